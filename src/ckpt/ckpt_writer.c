/* The checkpoint writer of one rank: synchronous saves write straight from
 * the state's memory; asynchronous saves copy the state into a staging
 * buffer (the data file's exact image, allocated once) and hand it to a
 * writer thread.
 *
 * The handshake (one mutex, one condition variable): `busy` is set by
 * wf_ckpt_save after the copy and cleared by the thread when its work is on
 * disk. wf_ckpt_save waits for !busy before touching the staging buffer, so
 * two saves never overlap and the buffer is never overwritten while it is
 * being written; wf_ckpt_writer_wait and destroy wait for it too, so the
 * process cannot exit with a save half done. The thread reads the staging
 * buffer, the checksums and the job only while busy, the caller only while
 * !busy.
 *
 * Asynchronous saves of several ranks split a save in three, because only
 * the caller's thread may use the communicator (MPI_THREAD_SERIALIZED):
 *   1. wf_ckpt_save (collective): commits the previous save if it is still
 *      pending; rank 0 names and makes the temporary folder (broadcast, as
 *      in a synchronous save); every rank stages its part and returns.
 *   2. the writer thread writes and fsyncs this rank's data file into the
 *      folder and records its checksums and status: no collective.
 *   3. the commit (collective, caller's thread): in wf_ckpt_writer_commit
 *      once the ranks agreed that none is busy, or in the next save or
 *      wf_ckpt_writer_wait, each of which first waits for this rank's
 *      write. The ranks agree on the writes (the first failing rank's
 *      status and message are broadcast, so every rank returns the same
 *      error), the checksums are gathered (bitwise OR), rank 0 writes the
 *      manifest, renames the folder into place and prunes, and the ranks
 *      agree on that too. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"
#include "weft/comm.h"
#include "weft/fileio.h"
#include "weft/stackdump.h"
#include "weft/thread.h"
#include "weft/trace.h"

struct wf_ckpt_writer {
    wf_ckpt_plan plan;
    wf_ckpt_writer_opts o;
    wf_comm *comm;           /* world_size > 1 */
    uint64_t *sums;          /* (n_pieces) checksums of the save being written */
    unsigned char *staging;  /* async: the data file image, rank_bytes[rank] bytes */
    int ranks_async;         /* async with world_size > 1: the thread writes the data file only */
    int32_t *words;          /* ranks_async: (2 n_pieces + 2) the checksums as gathered */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started;
    /* Guarded by mu: */
    int busy, quit, unpolled, unreported, saved_any;
    char *job_dir;           /* the checkpoint (ranks_async: the temporary folder to write into) */
    uint64_t job_step;
    json_t *job_state;       /* owned copy of the meta */
    wf_ckpt_save_stats job, last;
    char last_err[1024];
    /* ranks_async: the outcome of this rank's data file write */
    wf_status wrote;
    double wrote_seconds;
    char wrote_err[1024];

    /* ranks_async, the caller's thread only: the save staged and not yet
     * committed (the same on every rank). */
    int pending;
    char *pend_dir, *pend_tmp;
    json_t *pend_state;      /* rank 0's copy of the meta; NULL on the others */
    wf_ckpt_save_stats pend;
};

/* After a commit of `dir`: retention in its parent (keep_last > 0). */
static wf_status prune_after(wf_ckpt_writer *w, const char *dir, int *pruned) {
    *pruned = 0;
    if (w->o.keep_last <= 0) return WF_OK;
    const char *slash = strrchr(dir, '/');
    char *root = slash ? strndup(dir, (size_t)(slash - dir)) : strdup(".");
    if (!root) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = wf_ckpt_prune(root, w->o.keep_last, w->o.keep_every, pruned);
    free(root);
    return s;
}

/* The whole save of rank o.rank into `dir`: data file, manifest (world
 * size 1: this rank has every checksum), commit, retention. */
/* Removes the temporary folder of a save that failed with `s`, keeping
 * that error's message (best effort: wf_ckpt_cleanup catches what is left). */
static void discard_tmp(const char *tmp, wf_status s) {
    wf_error_keep k = WF_ERROR_KEEP_INIT;
    wf_error_keep_note(&k, s);
    wf_remove_tree(tmp);
    wf_error_keep_restore(&k);
}

/* A failed save's message, kept in its figures. */
static void note_error(wf_ckpt_save_stats *st, wf_status s, const char *msg) {
    snprintf(st->error, sizeof st->error, "%s", s == WF_OK ? "" : msg ? msg : wf_error_msg());
}

static wf_status do_save(wf_ckpt_writer *w, const char *dir, uint64_t step, const json_t *state,
                         const unsigned char *image, int *pruned) {
    *pruned = 0;
    char *tmp = wf__ckpt_tmp_path(dir);
    if (!tmp) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = WF_OK;
    if (wf_path_exists(tmp)) s = wf_remove_tree(tmp);
    if (s == WF_OK) s = wf_mkdirs(tmp);
    if (s == WF_OK) s = wf__ckpt_write_data(&w->plan, w->o.rank, tmp, step, image, w->sums);
    if (s == WF_OK) s = wf__ckpt_write_manifest(&w->plan, tmp, step, state, w->sums);
    if (s == WF_OK) s = wf__ckpt_commit(tmp, dir);
    if (s != WF_OK) discard_tmp(tmp, s);
    free(tmp);
    if (s == WF_OK) s = prune_after(w, dir, pruned);
    return s;
}

/* One phase of a multi-rank save ends: every rank learns whether any
 * failed (an all-reduce, so it is also a barrier). A rank that did not fail
 * gets an error naming the first rank that did. */
static wf_status agree_phase(wf_ckpt_writer *w, wf_status mine, const char *phase) {
    int32_t v[2] = {mine != WF_OK, mine != WF_OK ? w->o.rank : INT32_MAX};
    wf_status s = wf_comm_all_reduce_i32(w->comm, v, 1, WF_COMM_MAX, "ckpt save");
    if (s == WF_OK) s = wf_comm_all_reduce_i32(w->comm, v + 1, 1, WF_COMM_MIN, "ckpt save");
    if (s != WF_OK) return s;
    if (mine != WF_OK) return mine;
    if (v[0]) return wf_error(WF_ERR_IO, "checkpoint save: rank %d failed %s (its log says why)", v[1], phase);
    return WF_OK;
}

/* The save of every rank (world size > 1, synchronous, collective): rank 0
 * makes the temporary folder, every rank writes its data file, rank 0
 * gathers the checksums of every piece (each rank contributes its own, the
 * rest zero: a bitwise OR is a gather), writes the manifest and commits
 * once every data file is on disk. */
static wf_status do_save_ranks(wf_ckpt_writer *w, const char *dir, uint64_t step, const json_t *state,
                               int *pruned) {
    *pruned = 0;
    int rank = w->o.rank;
    /* Rank 0's temporary folder (its name holds rank 0's pid) for all. */
    char *tmp = calloc(1, 4096);
    char *mine = rank == 0 ? wf__ckpt_tmp_path(dir) : NULL;
    wf_status s = tmp && (rank != 0 || mine) ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK && mine && strlen(mine) >= 4096) s = wf_error(WF_ERR_INVALID, "checkpoint: path too long: %s", mine);
    if (s == WF_OK && mine) memcpy(tmp, mine, strlen(mine) + 1);
    free(mine);
    s = agree_phase(w, s, "to name the temporary folder");
    if (s == WF_OK) s = wf_comm_broadcast(w->comm, tmp, 4096, 0, "ckpt tmp dir");
    if (s == WF_OK && rank == 0) {
        if (wf_path_exists(tmp)) s = wf_remove_tree(tmp);
        if (s == WF_OK) s = wf_mkdirs(tmp);
    }
    s = agree_phase(w, s, "to make the temporary folder");
    size_t n = w->plan.n_pieces;
    int32_t *words = NULL;
    if (s == WF_OK) {
        memset(w->sums, 0, (n + 1) * sizeof *w->sums);
        s = wf__ckpt_write_data(&w->plan, rank, tmp, step, NULL, w->sums);
        s = agree_phase(w, s, "to write its data file");
    }
    if (s == WF_OK) {
        words = calloc(2 * n + 2, sizeof *words);
        if (!words) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else memcpy(words, w->sums, n * sizeof *w->sums);
        s = agree_phase(w, s, "to allocate the checksums");
    }
    if (s == WF_OK) s = wf_comm_all_reduce_i32(w->comm, words, 2 * n, WF_COMM_BOR, "ckpt checksums");
    if (s == WF_OK) {
        wf_status m = WF_OK;
        if (rank == 0) {
            memcpy(w->sums, words, n * sizeof *w->sums);
            m = wf__ckpt_write_manifest(&w->plan, tmp, step, state, w->sums);
            if (m == WF_OK) m = wf__ckpt_commit(tmp, dir);
            if (m == WF_OK) m = prune_after(w, dir, pruned);
        }
        s = agree_phase(w, m, "to write the manifest and commit");
    }
    free(words);
    if (s != WF_OK && rank == 0 && tmp && wf_path_exists(tmp)) discard_tmp(tmp, s);
    free(tmp);
    return s;
}

/* ---- asynchronous saves of several ranks ---- */

#define TMP_PATH_MAX 4096 /* the temporary folder's name as broadcast */

/* One phase of an asynchronous multi-rank save ends: every rank learns the
 * first rank that failed (one MIN all-reduce, also a barrier) and, only
 * after a failure, that rank's status and message (a broadcast), so that
 * every rank returns the same error. `mine_msg` is this rank's message when
 * `mine` failed, `mine_committed` whether the checkpoint was committed all
 * the same (only retention failed); `what` says what the failing rank
 * could not do. */
static wf_status agree_error(wf_ckpt_writer *w, wf_status mine, const char *mine_msg, int mine_committed,
                             const char *what, uint64_t step) {
    struct {
        int32_t status, committed;
        char msg[1016];
    } e;
    memset(&e, 0, sizeof e);
    if (mine != WF_OK) { /* copied first: the collectives may reuse the message buffer */
        e.status = (int32_t)mine;
        e.committed = mine_committed != 0;
        snprintf(e.msg, sizeof e.msg, "%s", mine_msg ? mine_msg : "");
    }
    int32_t first = mine != WF_OK ? w->o.rank : INT32_MAX;
    WF_TRY(wf_comm_all_reduce_i32(w->comm, &first, 1, WF_COMM_MIN, "ckpt agree"));
    if (first == INT32_MAX) return WF_OK;
    WF_TRY(wf_comm_broadcast(w->comm, &e, sizeof e, first, "ckpt error"));
    e.msg[sizeof e.msg - 1] = '\0';
    return wf_error((wf_status)e.status, "the checkpoint save of step %llu failed on rank %d of %d, which %s: %s (%s)",
                    (unsigned long long)step, (int)first, w->o.world_size, what, e.msg,
                    e.committed ? "the checkpoint itself was committed"
                                : "nothing was committed; the earlier checkpoints are intact");
}

static void free_pending(wf_ckpt_writer *w) {
    free(w->pend_dir);
    free(w->pend_tmp);
    json_decref(w->pend_state);
    w->pend_dir = w->pend_tmp = NULL;
    w->pend_state = NULL;
    w->pending = 0;
}

/* Phase 3 (collective, the caller's thread): commits the pending save. */
static wf_status commit_ranks(wf_ckpt_writer *w, wf_ckpt_save_stats *stats) {
    if (!w->pending) return WF_OK;
    double t0 = wf_time_now();
    wf_trace_span span = wf_trace_begin(WF_TRACE_IO, "ckpt commit");
    /* This rank's write: done at once when the ranks agreed none is busy. */
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    wf_status wrote = w->wrote;
    double wrote_seconds = w->wrote_seconds;
    char wrote_err[1024];
    snprintf(wrote_err, sizeof wrote_err, "%s", w->wrote_err);
    pthread_mutex_unlock(&w->mu);

    int rank = w->o.rank, pruned = 0;
    uint64_t step = w->pend.step;
    size_t n = w->plan.n_pieces;
    wf_status s = agree_error(w, wrote, wrote_err, 0, "could not write its data file", step);
    if (s == WF_OK) {
        /* Each rank's checksums at its pieces' indices, zeros elsewhere. */
        memset(w->words, 0, (2 * n + 2) * sizeof *w->words);
        memcpy(w->words, w->sums, n * sizeof *w->sums);
        s = wf_comm_all_reduce_i32(w->comm, w->words, 2 * n, WF_COMM_BOR, "ckpt checksums");
    }
    if (s == WF_OK) {
        wf_status m = WF_OK;
        int committed = 0;
        if (rank == 0) {
            memcpy(w->sums, w->words, n * sizeof *w->sums);
            m = wf__ckpt_write_manifest(&w->plan, w->pend_tmp, step, w->pend_state, w->sums);
            if (m == WF_OK) m = wf__ckpt_commit(w->pend_tmp, w->pend_dir);
            committed = m == WF_OK;
            if (m == WF_OK) m = prune_after(w, w->pend_dir, &pruned);
        }
        s = agree_error(w, m, m != WF_OK ? wf_error_msg() : NULL, committed,
                        "could not write the manifest, commit or remove old checkpoints", step);
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", s == WF_OK ? "" : wf_error_msg());
    if (s != WF_OK && rank == 0 && wf_path_exists(w->pend_tmp)) {
        /* Every rank's write is over (all agreed above), so the folder is
         * nobody's any more. */
        discard_tmp(w->pend_tmp, s);
    }
    wf_trace_end(span);
    wf_ckpt_save_stats st = w->pend;
    st.write_seconds = wrote_seconds;
    st.commit_seconds = wf_time_now() - t0;
    st.blocked_seconds += st.commit_seconds;
    st.pruned = pruned;
    st.status = s;
    note_error(&st, s, msg);
    free_pending(w);
    pthread_mutex_lock(&w->mu);
    w->last = st;
    snprintf(w->last_err, sizeof w->last_err, "%s", msg);
    w->unpolled = w->saved_any = 1;
    w->unreported = 0; /* returned here, on every rank */
    pthread_mutex_unlock(&w->mu);
    if (stats) *stats = st;
    return s;
}

/* Phases 1 and 2 of an asynchronous multi-rank save (collective). */
/* Gives the writer thread its job (it owns `dir` and `state` from here):
 * write the staged state of `step` into `dir`. */
static void hand_to_thread(wf_ckpt_writer *w, char *dir, uint64_t step, json_t *state, const wf_ckpt_save_stats *st) {
    pthread_mutex_lock(&w->mu);
    w->job_dir = dir;
    w->job_step = step;
    w->job_state = state;
    w->job = *st;
    w->busy = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static wf_status save_ranks_async(wf_ckpt_writer *w, const char *dir, uint64_t step, const wf_ckpt_meta *meta,
                                  wf_ckpt_save_stats *stats) {
    /* The previous save, if pending; the same status on every rank. Its
     * time counts in its own figures (commit_seconds), not in this save's. */
    WF_TRY(commit_ranks(w, NULL));
    double t0 = wf_time_now();
    int rank = w->o.rank;
    wf_ckpt_save_stats st = {0};
    st.step = step;
    st.bytes = w->plan.rank_bytes[rank];

    /* The final and temporary folders' names (rank 0's temporary folder,
     * whose name holds its pid, for all) and rank 0's copy of the meta. */
    char *dir_copy = strdup(dir), *tmp = calloc(1, TMP_PATH_MAX), *job_tmp = malloc(TMP_PATH_MAX);
    json_t *state = NULL;
    wf_status s = dir_copy && tmp && job_tmp ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK && rank == 0) {
        const json_t *mj = wf__ckpt_meta_json(meta);
        state = mj ? json_deep_copy(mj) : json_object();
        char *mine = wf__ckpt_tmp_path(dir);
        if (!state || !mine) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else if (strlen(mine) >= TMP_PATH_MAX) s = wf_error(WF_ERR_INVALID, "checkpoint: path too long: %s", mine);
        else memcpy(tmp, mine, strlen(mine) + 1);
        free(mine);
    }
    s = agree_error(w, s, s != WF_OK ? wf_error_msg() : NULL, 0, "could not prepare the save", step);
    if (s == WF_OK) s = wf_comm_broadcast(w->comm, tmp, TMP_PATH_MAX, 0, "ckpt tmp dir");
    if (s == WF_OK) {
        tmp[TMP_PATH_MAX - 1] = '\0';
        wf_status m = WF_OK;
        if (rank == 0) {
            if (wf_path_exists(tmp)) m = wf_remove_tree(tmp);
            if (m == WF_OK) m = wf_mkdirs(tmp);
        }
        s = agree_error(w, m, m != WF_OK ? wf_error_msg() : NULL, 0, "could not make the temporary folder", step);
    }
    if (s != WF_OK) {
        free(dir_copy);
        free(tmp);
        free(job_tmp);
        json_decref(state);
        return s;
    }

    /* Not busy (the commit above waited): the staging buffer, the
     * checksums and the job fields are ours. */
    memcpy(job_tmp, tmp, TMP_PATH_MAX);
    memset(w->sums, 0, (w->plan.n_pieces + 1) * sizeof *w->sums);
    double t1 = wf_time_now();
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_MEMORY, "ckpt snapshot", (int64_t)st.bytes);
    wf_status staged = wf__ckpt_stage(&w->plan, rank, step, w->staging);
    wf_trace_end(span);
    /* A backend's copy can fail (never the host's): every rank then fails
     * the save together, and rank 0 removes the temporary folder. */
    s = agree_error(w, staged, staged != WF_OK ? wf_error_msg() : NULL, 0, "could not copy the state", step);
    if (s != WF_OK) {
        if (rank == 0) (void)wf_remove_tree(tmp); /* the save's error is the one to report */
        free(dir_copy);
        free(tmp);
        free(job_tmp);
        json_decref(state);
        return s;
    }
    double t2 = wf_time_now();
    st.copy_seconds = t2 - t1;
    st.blocked_seconds = t2 - t0;

    w->pending = 1;
    w->pend_dir = dir_copy;
    w->pend_tmp = tmp;
    w->pend_state = state;
    w->pend = st;
    hand_to_thread(w, job_tmp, step, NULL, &st);
    if (stats) *stats = st;
    return WF_OK;
}

/* ---- the writer thread ---- */

/* Several ranks: phase 2, this rank's data file into the temporary folder. */
static void thread_write_rank(wf_ckpt_writer *w, const char *tmp, uint64_t step) {
    double t0 = wf_time_now();
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_IO, "ckpt write", (int64_t)w->plan.rank_bytes[w->o.rank]);
    wf_status s = wf__ckpt_write_data(&w->plan, w->o.rank, tmp, step, w->staging, w->sums);
    wf_trace_end(span);
    double dt = wf_time_now() - t0;
    pthread_mutex_lock(&w->mu);
    w->wrote = s;
    w->wrote_seconds = dt;
    snprintf(w->wrote_err, sizeof w->wrote_err, "%s", s == WF_OK ? "" : wf_error_msg());
    free(w->job_dir);
    w->job_dir = NULL;
    w->busy = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *writer_main(void *arg) {
    wf_ckpt_writer *w = arg;
    wf_trace_thread_setup("ckpt-writer", 40); /* its spans: docs/tracing.md; only fails out of memory */
    wf_error_clear();
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy) break; /* quit with nothing to do */
        char *dir = w->job_dir;
        uint64_t step = w->job_step;
        json_t *state = w->job_state;
        pthread_mutex_unlock(&w->mu);
        if (w->ranks_async) {
            thread_write_rank(w, dir, step); /* clears busy */
            pthread_mutex_lock(&w->mu);
            continue;
        }

        double t0 = wf_time_now();
        int pruned;
        wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_IO, "ckpt write", (int64_t)w->plan.rank_bytes[w->o.rank]);
        wf_status s = do_save(w, dir, step, state, w->staging, &pruned);
        wf_trace_end(span);
        double dt = wf_time_now() - t0;

        pthread_mutex_lock(&w->mu);
        w->last = w->job;
        w->last.write_seconds = dt;
        w->last.pruned = pruned;
        w->last.status = s;
        snprintf(w->last_err, sizeof w->last_err, "%s", s == WF_OK ? "" : wf_error_msg());
        note_error(&w->last, s, w->last_err);
        free(w->job_dir);
        json_decref(w->job_state);
        w->job_dir = NULL;
        w->job_state = NULL;
        w->busy = 0;
        w->unpolled = w->unreported = w->saved_any = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

wf_status wf_ckpt_writer_create(wf_ckpt_writer **out, const wf_ckpt_tensor *tensors, size_t n,
                                const wf_ckpt_writer_opts *opts) {
    return wf_ckpt_writer_create_ranks(out, tensors, n, opts, NULL);
}

wf_status wf_ckpt_writer_create_ranks(wf_ckpt_writer **out, const wf_ckpt_tensor *tensors, size_t n,
                                      const wf_ckpt_writer_opts *opts, wf_comm *comm) {
    *out = NULL;
    if (opts->world_size < 1 || opts->rank < 0 || opts->rank >= opts->world_size)
        return wf_error(WF_ERR_INVALID, "checkpoint writer: rank %d of %d is not a rank", opts->rank,
                        opts->world_size);
    if (opts->world_size > 1 &&
        (!comm || wf_comm_size(comm) != opts->world_size || wf_comm_rank(comm) != opts->rank))
        return wf_error(WF_ERR_UNSUPPORTED,
                        "checkpoint writer: rank %d of %d needs the communicator of those ranks to gather the "
                        "checksums to rank 0 (wf_ckpt_writer_create_ranks)",
                        opts->rank, opts->world_size);
    wf_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return wf_error(WF_ERR_NOMEM, "out of memory");
    w->o = *opts;
    w->comm = comm;
    w->ranks_async = opts->world_size > 1 && opts->async;
    wf_status s = wf__ckpt_plan_make(&w->plan, tensors, n, opts->world_size);
    if (s != WF_OK) {
        free(w);
        return s;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->sums = calloc(w->plan.n_pieces + 1, sizeof *w->sums);
    if (!w->sums) s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK && w->ranks_async && !(w->words = calloc(2 * w->plan.n_pieces + 2, sizeof *w->words)))
        s = wf_error(WF_ERR_NOMEM, "out of memory");
    if (s == WF_OK && opts->async) {
        size_t bytes = (size_t)w->plan.rank_bytes[opts->rank];
        /* Zeroed once: the padding between pieces stays zero for good. */
        w->staging = calloc(1, bytes);
        if (!w->staging)
            s = wf_error(WF_ERR_NOMEM, "checkpoint: cannot allocate the %.1f MB staging buffer of asynchronous "
                         "saves (set ckpt.async = false to write without one)", (double)bytes / 1e6);
    }
    if (s == WF_OK && opts->async) {
        /* The thread takes no signals: the training thread handles them, and
         * the thread's writes and fsyncs are never interrupted. Except the
         * stack dumps' capture signal once they are set up (its handler
         * restarts what it interrupts), so that a dump shows where the
         * thread is (a hung write). */
        sigset_t all, old;
        sigfillset(&all);
        if (wf_stackdump_signal() > 0) sigdelset(&all, wf_stackdump_signal());
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&w->thread, NULL, writer_main, w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) s = wf_error(WF_ERR_INTERNAL, "checkpoint: cannot start the writer thread (error %d)", rc);
        else w->started = 1;
    }
    if (s != WF_OK) {
        wf_ckpt_writer_destroy(w);
        return s;
    }
    *out = w;
    return WF_OK;
}

void wf_ckpt_writer_destroy(wf_ckpt_writer *w) {
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1; /* the thread finishes a save in flight first */
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    free(w->job_dir);
    json_decref(w->job_state);
    free_pending(w); /* not committed: its .tmp-* folder stays for wf_ckpt_cleanup */
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->staging);
    free(w->sums);
    free(w->words);
    wf__ckpt_plan_free(&w->plan);
    free(w);
}

size_t wf_ckpt_writer_staging_bytes(const wf_ckpt_writer *w) {
    return w->staging ? (size_t)w->plan.rank_bytes[w->o.rank] : 0;
}

void wf_ckpt_writer_save_need(const wf_ckpt_writer *w, uint64_t *bytes, uint64_t *files) {
    uint64_t b = 0;
    for (int r = 0; r < w->o.world_size; r++) b += (uint64_t)w->plan.rank_bytes[r];
    /* The manifest: a JSON line per piece (name, shape, offsets, checksum)
     * and the meta, whose largest part is the config text; 1 KiB a piece
     * and 1 MiB for the rest bound it with room to spare. */
    *bytes = b + 1024 * (uint64_t)w->plan.n_pieces + (1u << 20);
    *files = (uint64_t)w->o.world_size + 2;
}

wf_status wf_ckpt_save(wf_ckpt_writer *w, const char *dir, uint64_t step, const wf_ckpt_meta *meta,
                       wf_ckpt_save_stats *stats) {
    if (w->ranks_async) return save_ranks_async(w, dir, step, meta, stats);
    double t0 = wf_time_now();
    wf_ckpt_save_stats st = {0};
    st.step = step;
    st.bytes = w->plan.rank_bytes[w->o.rank];
    if (!w->o.async) {
        int pruned;
        wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_IO, "ckpt write", (int64_t)st.bytes);
        wf_status s = w->o.world_size > 1 ? do_save_ranks(w, dir, step, wf__ckpt_meta_json(meta), &pruned)
                                          : do_save(w, dir, step, wf__ckpt_meta_json(meta), NULL, &pruned);
        wf_trace_end(span);
        st.write_seconds = st.blocked_seconds = wf_time_now() - t0;
        st.pruned = pruned;
        st.status = s;
        note_error(&st, s, NULL);
        w->last = st;
        w->unpolled = w->saved_any = 1;
        if (stats) *stats = st;
        return s;
    }
    /* Async: wait for the previous save; report its failure if nobody has. */
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    if (w->unreported && w->last.status != WF_OK) {
        wf_status prev = w->last.status;
        unsigned long long prev_step = (unsigned long long)w->last.step;
        w->unreported = 0;
        w->unpolled = 0;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", w->last_err);
        pthread_mutex_unlock(&w->mu);
        return wf_error(prev, "the checkpoint save of step %llu failed: %s", prev_step, msg);
    }
    pthread_mutex_unlock(&w->mu);

    /* Not busy: the staging buffer and the job fields are ours. */
    char *dir_copy = strdup(dir);
    json_t *state = wf__ckpt_meta_json(meta) ? json_deep_copy(wf__ckpt_meta_json(meta)) : json_object();
    if (!dir_copy || !state) {
        free(dir_copy);
        json_decref(state);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    double t1 = wf_time_now();
    wf_trace_span span = wf_trace_begin_bytes(WF_TRACE_MEMORY, "ckpt snapshot", (int64_t)st.bytes);
    wf_status staged = wf__ckpt_stage(&w->plan, w->o.rank, step, w->staging);
    wf_trace_end(span);
    if (staged != WF_OK) {
        free(dir_copy);
        json_decref(state);
        return staged;
    }
    double t2 = wf_time_now();
    st.copy_seconds = t2 - t1;
    st.blocked_seconds = t2 - t0;

    hand_to_thread(w, dir_copy, step, state, &st);
    if (stats) *stats = st;
    return WF_OK;
}

wf_status wf_ckpt_writer_wait(wf_ckpt_writer *w, wf_ckpt_save_stats *stats) {
    if (w->ranks_async) commit_ranks(w, NULL); /* collective; its status becomes the last save's */
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    wf_ckpt_save_stats st = w->last;
    int any = w->saved_any;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", w->last_err);
    w->unreported = 0;
    pthread_mutex_unlock(&w->mu);
    if (stats) *stats = st;
    if (!any || st.status == WF_OK) return WF_OK;
    if (!w->o.async) return st.status; /* the message was set by wf_ckpt_save in this thread */
    if (w->ranks_async) return wf_error(st.status, "%s", msg); /* the agreed message, whole */
    return wf_error(st.status, "the checkpoint save of step %llu failed: %s", (unsigned long long)st.step, msg);
}

int wf_ckpt_writer_poll(wf_ckpt_writer *w, wf_ckpt_save_stats *stats) {
    pthread_mutex_lock(&w->mu);
    int got = w->unpolled;
    if (got) {
        *stats = w->last;
        w->unpolled = 0;
        if (w->last.status != WF_OK) w->unreported = 0; /* the caller sees the failure in *stats */
    }
    pthread_mutex_unlock(&w->mu);
    return got;
}

int wf_ckpt_writer_busy(wf_ckpt_writer *w) {
    pthread_mutex_lock(&w->mu);
    int b = w->busy;
    pthread_mutex_unlock(&w->mu);
    return b;
}

int wf_ckpt_writer_pending(const wf_ckpt_writer *w) { return w->pending; }

wf_status wf_ckpt_writer_commit(wf_ckpt_writer *w, wf_ckpt_save_stats *stats) {
    return w->ranks_async ? commit_ranks(w, stats) : WF_OK;
}
