/* The stateful, data-parallel data loader (contract: include/weft/loader.h,
 * design and worked example: docs/loader.md).
 *
 * Position p of epoch e holds sample wf_rng_permute(p, N, seed, e) (or p
 * without shuffle); sample i is tokens [i*T, i*T + T + 1) of the split's
 * virtual stream. Nothing about the order is stored: a batch is a pure
 * function of its cursor {epoch, sample}, the rank and the options, which is
 * what makes resume and resharding exact.
 *
 * Prefetch: one producer thread fills a ring of prefetch + 1 batch buffers,
 * all allocated at create. At most `prefetch` of them are ready at a time;
 * one more is the batch the caller holds (valid until its next call), so the
 * caller never reads a buffer the thread writes. The ring is:
 *
 *     held (head-1)   ready [head, head+count)   being filled (head+count)
 *
 * Only the consumer moves head, only the producer raises count; both under
 * the mutex. set_state bumps a generation number: a batch that was being
 * read for an older generation is dropped when it completes.
 *
 * The loader is used by one caller thread; it does not make its own calls
 * thread-safe against each other (the cursor it returns is the caller's).
 * It does not cache, pin memory or read ahead of the batches it prefetches.
 */
#include "weft/loader.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader_impl.h"
#include "weft/rng.h"
#include "weft/stackdump.h"
#include "weft/thread.h"
#include "weft/trace.h"

#define WF_LOADER_MAX_PREFETCH 64
#define WF_LOADER_MSG_CAP 1024
#define WF_LOADER_SPIN_SECONDS 50e-6

typedef struct {
    int32_t *tokens;          /* (B, T+1) */
    wf_loader_state state;    /* cursor the batch was read from */
    wf_status status;         /* WF_OK, or the read error ... */
    char msg[WF_LOADER_MSG_CAP]; /* ... and its message */
} loader_slot;

struct wf_loader {
    /* Immutable after create (read by both threads). */
    wf_dataset ds;
    uint64_t seed;
    int seq_len, global_batch, rank, world_size, batch, shuffle, prefetch;
    uint64_t n_samples;   /* N = (n_tokens - 1) / T */
    uint64_t n_batches;   /* floor(N / global_batch) */
    void *mem;            /* one block holding every slot's tokens */
    loader_slot *slots;
    int n_slots;          /* prefetch + 1 (1 when synchronous) */

    /* Consumer-only: touched by the caller's thread alone. */
    wf_loader_state cursor; /* next batch wf_loader_next returns */
    wf_batch out;

    /* Shared, guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t ready_cv; /* a batch became ready */
    pthread_cond_t free_cv;  /* a slot became free, the cursor moved, or stop */
    int head, count, held;   /* ring: see the file comment; held is -1 or a slot */
    wf_loader_state next_read; /* producer's next cursor to read */
    int failed;              /* the producer published an error and waits for set_state */
    int stop;
    wf_loader_state inject_at; /* test hook: fail the read of this cursor */
    int inject;
    /* Generation of the cursor, bumped by set_state; written under mu, also
     * read without it by a running read so it can give up early. */
    atomic_ulong gen;
    atomic_int n_ready; /* mirror of count for the consumer's spin, written under mu */

    pthread_t thread;
    int thread_started;
};

/* ---------------------------------------------------------------- order */

static wf_loader_state normalize(const wf_loader *l, wf_loader_state s) {
    /* An epoch ends when fewer than global_batch positions remain. */
    if (s.sample + (uint64_t)l->global_batch > l->n_samples) {
        s.epoch++;
        s.sample = 0;
    }
    return s;
}

static wf_loader_state advance(const wf_loader *l, wf_loader_state s) {
    s.sample += (uint64_t)l->global_batch;
    return normalize(l, s);
}

static uint64_t sample_at(const wf_loader *l, uint64_t epoch, uint64_t pos) {
    return l->shuffle ? wf_rng_permute(pos, l->n_samples, l->seed, epoch) : pos;
}

/* Reads this rank's part of the global batch at cursor s into tokens
 * (B, T+1). Gives up early (returning WF_OK with a partial batch that the
 * caller drops) when the generation moves on from `gen`. */
static wf_status read_batch(wf_loader *l, wf_loader_state s, int32_t *tokens, int inject,
                            unsigned long gen) {
    if (inject)
        return wf_error(WF_ERR_IO, "loader: %s: injected read error at epoch %llu sample %llu",
                        l->ds.n_shards ? l->ds.shards[0].path : "dataset",
                        (unsigned long long)s.epoch, (unsigned long long)s.sample);
    const size_t row = (size_t)l->seq_len + 1;
    const uint64_t first = s.sample + (uint64_t)l->rank * (uint64_t)l->batch;
    for (int b = 0; b < l->batch; b++) {
        if (gen != atomic_load_explicit(&l->gen, memory_order_relaxed)) return WF_OK;
        uint64_t idx = sample_at(l, s.epoch, first + (uint64_t)b);
        wf_status st = wf_dataset_read(&l->ds, idx * (uint64_t)l->seq_len, row, tokens + (size_t)b * row);
        if (st != WF_OK)
            return wf_error_wrap(st, "loader: reading sample %llu (epoch %llu, position %llu, rank %d): ",
                                 (unsigned long long)idx, (unsigned long long)s.epoch,
                                 (unsigned long long)(first + (uint64_t)b), l->rank);
    }
    return WF_OK;
}

/* ------------------------------------------------------------- producer */

static void *producer_main(void *arg) {
    wf_loader *l = arg;
    wf_trace_thread_setup("loader", 30); /* names it in traces; only fails out of memory */
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (l->failed || l->count >= l->prefetch))
            pthread_cond_wait(&l->free_cv, &l->mu);
        if (l->stop) break;
        const int w = (l->head + l->count) % l->n_slots;
        const wf_loader_state s = l->next_read;
        const unsigned long gen = atomic_load_explicit(&l->gen, memory_order_relaxed);
        const int inject = l->inject && l->inject_at.epoch == s.epoch && l->inject_at.sample == s.sample;
        loader_slot *slot = &l->slots[w];
        pthread_mutex_unlock(&l->mu);

        /* Slot w is neither ready nor held, so nobody else touches it. */
        wf_trace_span span = wf_trace_begin(WF_TRACE_IO, "loader read");
        wf_status st = read_batch(l, s, slot->tokens, inject, gen);
        wf_trace_end(span);

        pthread_mutex_lock(&l->mu);
        if (gen != atomic_load_explicit(&l->gen, memory_order_relaxed)) continue; /* cursor moved */
        slot->state = s;
        slot->status = st;
        if (st != WF_OK) {
            snprintf(slot->msg, sizeof slot->msg, "%s", wf_error_msg());
            l->failed = 1;
        } else {
            l->next_read = advance(l, s);
        }
        l->count++;
        atomic_store_explicit(&l->n_ready, l->count, memory_order_relaxed);
        pthread_cond_signal(&l->ready_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* --------------------------------------------------------------- create */

void wf_loader_destroy(wf_loader *l) {
    if (!l) return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        atomic_fetch_add(&l->gen, 1); /* a read in progress gives up */
        pthread_cond_broadcast(&l->free_cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    pthread_cond_destroy(&l->free_cv);
    pthread_cond_destroy(&l->ready_cv);
    pthread_mutex_destroy(&l->mu);
    free(l->mem);
    free(l->slots);
    wf_dataset_close(&l->ds);
    free(l);
}

static wf_status check_opts(const wf_loader_opts *o, const char **split) {
    if (!o || !o->dir || !o->dir[0])
        return wf_error(WF_ERR_INVALID, "loader: no dataset directory given (set data.dir to a "
                                        "directory written by `weft tokenize`)");
    *split = o->split ? o->split : "train";
    if (strcmp(*split, "train") != 0 && strcmp(*split, "val") != 0)
        return wf_error(WF_ERR_INVALID, "loader: %s: split is \"%s\"; it must be \"train\" or \"val\"",
                        o->dir, *split);
    if (o->seq_len < 1)
        return wf_error(WF_ERR_INVALID, "loader: %s: seq_len is %d; it must be at least 1", o->dir,
                        o->seq_len);
    if (o->world_size < 1)
        return wf_error(WF_ERR_INVALID, "loader: %s: world_size is %d; it must be at least 1",
                        o->dir, o->world_size);
    if (o->rank < 0 || o->rank >= o->world_size)
        return wf_error(WF_ERR_INVALID, "loader: %s: rank %d is out of range for world_size %d "
                                        "(ranks are 0..%d)",
                        o->dir, o->rank, o->world_size, o->world_size - 1);
    if (o->global_batch < 1 || o->global_batch % o->world_size != 0)
        return wf_error(WF_ERR_INVALID, "loader: %s: global_batch %d is not a positive multiple of "
                                        "world_size %d; pick one that %d ranks can split evenly "
                                        "(e.g. %d or %d)",
                        o->dir, o->global_batch, o->world_size, o->world_size,
                        o->global_batch > o->world_size
                            ? o->global_batch / o->world_size * o->world_size
                            : o->world_size,
                        o->global_batch > o->world_size
                            ? (o->global_batch / o->world_size + 1) * o->world_size
                            : 2 * o->world_size);
    if (o->prefetch < 0 || o->prefetch > WF_LOADER_MAX_PREFETCH)
        return wf_error(WF_ERR_INVALID, "loader: %s: prefetch is %d; it must be in 0..%d (0 reads "
                                        "synchronously, 2 is the usual choice)",
                        o->dir, o->prefetch, WF_LOADER_MAX_PREFETCH);
    return WF_OK;
}

wf_status wf_loader_create(wf_loader **out, const wf_loader_opts *o) {
    *out = NULL;
    const char *split = NULL;
    WF_TRY(check_opts(o, &split));

    wf_loader *l = calloc(1, sizeof *l);
    if (!l) return wf_error(WF_ERR_NOMEM, "loader: out of memory");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->ready_cv, NULL);
    pthread_cond_init(&l->free_cv, NULL);
    atomic_init(&l->gen, 0);
    atomic_init(&l->n_ready, 0);
    l->held = -1;
    l->seed = o->seed;
    l->seq_len = o->seq_len;
    l->global_batch = o->global_batch;
    l->rank = o->rank;
    l->world_size = o->world_size;
    l->batch = o->global_batch / o->world_size;
    l->shuffle = o->shuffle != 0;
    l->prefetch = o->prefetch;

    wf_status s = wf_dataset_open(&l->ds, o->dir, split, o->verify);
    if (s != WF_OK) {
        wf_error_wrap(s, "loader: opening split %s of %s: ", split, o->dir);
        wf_loader_destroy(l);
        return s;
    }
    l->n_samples = l->ds.n_tokens > 0 ? (l->ds.n_tokens - 1) / (uint64_t)l->seq_len : 0;
    l->n_batches = l->n_samples / (uint64_t)l->global_batch;
    if (l->n_batches == 0) {
        s = wf_error(WF_ERR_RANGE, "loader: %s: split %s has %llu tokens, which make %llu samples "
                                   "of seq_len+1 = %d tokens, fewer than global_batch %d; use a "
                                   "smaller global_batch or seq_len, or tokenize more data",
                     o->dir, split, (unsigned long long)l->ds.n_tokens,
                     (unsigned long long)l->n_samples, l->seq_len + 1, l->global_batch);
        wf_loader_destroy(l);
        return s;
    }

    /* Every buffer now, none per batch: prefetch ready + 1 held. */
    l->n_slots = l->prefetch + 1;
    const size_t row_tokens = (size_t)l->batch * ((size_t)l->seq_len + 1);
    const size_t stride = (row_tokens * sizeof(int32_t) + 63) & ~(size_t)63;
    l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
    if (!l->slots || posix_memalign(&l->mem, 64, stride * (size_t)l->n_slots) != 0) {
        l->mem = NULL;
        s = wf_error(WF_ERR_NOMEM, "loader: out of memory for %d batch buffers of %zu bytes",
                     l->n_slots, stride);
        wf_loader_destroy(l);
        return s;
    }
    for (int i = 0; i < l->n_slots; i++)
        l->slots[i].tokens = (int32_t *)(void *)((char *)l->mem + (size_t)i * stride);

    if (l->prefetch > 0) {
        /* The thread blocks every signal, so that SIGINT/SIGTERM handlers
         * (and sigwait) of the trainer run on the trainer's threads; all
         * but the stack dumps' capture signal, once they are set up, so
         * that a dump shows where the thread is (a stuck read). */
        sigset_t all, old;
        sigfillset(&all);
        if (wf_stackdump_signal() > 0) sigdelset(&all, wf_stackdump_signal());
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&l->thread, NULL, producer_main, l);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            s = wf_error(WF_ERR_INTERNAL, "loader: cannot start the prefetch thread (out of "
                                          "threads?); set prefetch to 0 to read synchronously");
            wf_loader_destroy(l);
            return s;
        }
        l->thread_started = 1;
    }
    *out = l;
    return WF_OK;
}

void wf__loader_inject_error(wf_loader *l, wf_loader_state at) {
    pthread_mutex_lock(&l->mu);
    l->inject = 1;
    l->inject_at = at;
    pthread_mutex_unlock(&l->mu);
}

/* ----------------------------------------------------------------- next */

static void fill_out(wf_loader *l, const loader_slot *slot, double waited) {
    l->out.tokens = slot->tokens;
    l->out.batch = l->batch;
    l->out.seq_len = l->seq_len;
    l->out.state = slot->state;
    l->out.wait_seconds = waited;
}

static wf_status next_sync(wf_loader *l, const wf_batch **b) {
    loader_slot *slot = &l->slots[0];
    pthread_mutex_lock(&l->mu);
    const int inject = l->inject && l->inject_at.epoch == l->cursor.epoch &&
                       l->inject_at.sample == l->cursor.sample;
    pthread_mutex_unlock(&l->mu);
    /* The caller waits for the whole read: that is its wait time. */
    const double t0 = wf_time_now();
    WF_TRY(read_batch(l, l->cursor, slot->tokens, inject, atomic_load(&l->gen)));
    slot->state = l->cursor;
    fill_out(l, slot, wf_time_now() - t0);
    l->cursor = advance(l, l->cursor);
    *b = &l->out;
    return WF_OK;
}

wf_status wf_loader_next(wf_loader *l, const wf_batch **b) {
    *b = NULL;
    if (l->prefetch == 0) return next_sync(l, b);

    pthread_mutex_lock(&l->mu);
    if (l->held >= 0) { /* the caller is done with the previous batch */
        l->held = -1;
        pthread_cond_signal(&l->free_cv);
    }
    double waited = 0.0;
    if (l->count == 0) {
        const double t0 = wf_time_now();
        /* The thread is usually microseconds from done: spin that long
         * before paying for a sleep and a wake-up. */
        pthread_mutex_unlock(&l->mu);
        while (atomic_load_explicit(&l->n_ready, memory_order_relaxed) == 0 &&
               wf_time_now() - t0 < WF_LOADER_SPIN_SECONDS) {
        }
        pthread_mutex_lock(&l->mu);
        while (l->count == 0) pthread_cond_wait(&l->ready_cv, &l->mu);
        waited = wf_time_now() - t0;
    }
    loader_slot *slot = &l->slots[l->head];
    if (slot->status != WF_OK) {
        /* Left in the ring: every later call reports it until set_state. */
        wf_status st = wf_error(slot->status, "%s", slot->msg);
        pthread_mutex_unlock(&l->mu);
        return st;
    }
    l->held = l->head;
    l->head = (l->head + 1) % l->n_slots;
    l->count--;
    atomic_store_explicit(&l->n_ready, l->count, memory_order_relaxed);
    pthread_cond_signal(&l->free_cv);
    pthread_mutex_unlock(&l->mu);

    fill_out(l, slot, waited);
    l->cursor = advance(l, slot->state);
    *b = &l->out;
    return WF_OK;
}

/* ---------------------------------------------------------------- state */

wf_loader_state wf_loader_get_state(const wf_loader *l) { return l->cursor; }

wf_status wf_loader_set_state(wf_loader *l, wf_loader_state s) {
    if (s.sample > l->n_samples)
        return wf_error(WF_ERR_RANGE, "loader: state {epoch %llu, sample %llu} is past the %llu "
                                      "samples of an epoch of this dataset (seq_len %d); was it "
                                      "saved for another dataset or seq_len?",
                        (unsigned long long)s.epoch, (unsigned long long)s.sample,
                        (unsigned long long)l->n_samples, l->seq_len);
    s = normalize(l, s);
    l->cursor = s;
    if (l->prefetch == 0) return WF_OK;
    pthread_mutex_lock(&l->mu);
    atomic_fetch_add(&l->gen, 1);
    l->count = 0; /* drop what is ready; the held batch stays valid */
    atomic_store_explicit(&l->n_ready, 0, memory_order_relaxed);
    l->failed = 0;
    l->next_read = s;
    pthread_cond_signal(&l->free_cv);
    pthread_mutex_unlock(&l->mu);
    return WF_OK;
}

uint64_t wf_loader_samples_per_epoch(const wf_loader *l) { return l->n_samples; }
uint64_t wf_loader_batches_per_epoch(const wf_loader *l) { return l->n_batches; }

int wf_loader_ready(wf_loader *l) {
    pthread_mutex_lock(&l->mu);
    int n = l->count;
    pthread_mutex_unlock(&l->mu);
    return n;
}
