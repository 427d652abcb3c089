/* The stateful, data-parallel data loader (contract: include/weft/loader.h,
 * design and worked example: docs/loader.md).
 *
 * Position p of epoch e holds sample wf_rng_permute(p, N, seed, e) (or p
 * without shuffle); sample i is tokens [i*T, i*T + T + 1) of the split's
 * virtual stream. Nothing about the order is stored: a batch is a pure
 * function of its cursor {epoch, sample}, the rank and the options, which is
 * what makes resume and resharding exact.
 *
 * A mixture: slot n of the global order goes to the source wf_mix_next
 * picks (weft/mixture.h), and the source's sample at position p = its
 * samples taken so far is wf_rng_permute(p mod N_k, N_k, seed_k, p / N_k)
 * with seed_k = wf_rng_at(seed, WF_LOADER_MIX_STREAM, k): each source has
 * its own epochs and orders. Every rank walks the schedule over the whole
 * global batch (O(global_batch x sources)) and reads its own rows.
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
/* The Philox stream of the sources' order seeds ("mix"). */
#define WF_LOADER_MIX_STREAM 0x6d6978u

/* The cursor: one dataset's {epoch, sample}, or a mixture's state (then
 * s is {0, m.slot}). */
typedef struct {
    wf_loader_state s;
    wf_mix_state m;
} lcursor;

typedef struct {
    int32_t *tokens;          /* (B, T+1) */
    lcursor state;            /* cursor the batch was read from */
    lcursor next;             /* and the one after it */
    int *src;                 /* mixture: (B) each row's source */
    uint64_t *src_pos;        /* mixture: (B) each row's position in its source's order */
    uint32_t *counts;         /* mixture: (n_src) the global batch's sequences per source */
    wf_status status;         /* WF_OK, or the read error ... */
    char msg[WF_LOADER_MSG_CAP]; /* ... and its message */
} loader_slot;

struct wf_loader {
    /* Immutable after create (read by both threads). */
    wf_dataset ds;            /* one dataset */
    int n_src;                /* a mixture's sources; 0 for one dataset */
    wf_dataset *srcs;         /* (n_src) */
    uint64_t *src_samples;    /* (n_src) N_k */
    uint64_t *src_seed;       /* (n_src) seed_k */
    void *meta;               /* one block holding every slot's src, src_pos and counts */
    uint64_t seed;
    int seq_len, global_batch, rank, world_size, batch, shuffle, prefetch;
    uint64_t n_samples;   /* N = (n_tokens - 1) / T */
    uint64_t n_batches;   /* floor(N / global_batch) */
    void *mem;            /* one block holding every slot's tokens */
    loader_slot *slots;
    int n_slots;          /* prefetch + 1 (1 when synchronous) */

    /* Consumer-only: touched by the caller's thread alone. */
    lcursor cursor;         /* next batch wf_loader_next returns */
    wf_batch out;

    /* Shared, guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t ready_cv; /* a batch became ready */
    pthread_cond_t free_cv;  /* a slot became free, the cursor moved, or stop */
    int head, count, held;   /* ring: see the file comment; held is -1 or a slot */
    lcursor next_read;       /* producer's next cursor to read */
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

static wf_loader_state advance_one(const wf_loader *l, wf_loader_state s) {
    s.sample += (uint64_t)l->global_batch;
    return normalize(l, s);
}

/* The cursor after the batch at c. */
static wf_status advance(const wf_loader *l, lcursor *c) {
    if (!l->n_src) {
        c->s = advance_one(l, c->s);
        return WF_OK;
    }
    WF_TRY(wf_mix_advance(&c->m, (uint64_t)l->global_batch));
    c->s = (wf_loader_state){0, c->m.slot};
    return WF_OK;
}

static int inject_matches(const wf_loader *l, const lcursor *c) {
    return l->inject && l->inject_at.epoch == c->s.epoch && l->inject_at.sample == c->s.sample;
}

static uint64_t sample_at(const wf_loader *l, uint64_t epoch, uint64_t pos) {
    return l->shuffle ? wf_rng_permute(pos, l->n_samples, l->seed, epoch) : pos;
}

/* A mixture's part of read_batch: walks the schedule over the whole
 * global batch from c, counting every source's sequences, and reads the
 * rows of this rank's slots. */
static wf_status read_mix(wf_loader *l, const lcursor *c, loader_slot *slot, unsigned long gen) {
    const size_t row = (size_t)l->seq_len + 1;
    const uint64_t first = (uint64_t)l->rank * (uint64_t)l->batch;
    wf_mix_state m = c->m;
    memset(slot->counts, 0, (size_t)l->n_src * sizeof *slot->counts);
    for (uint64_t j = 0; j < (uint64_t)l->global_batch; j++) {
        int k;
        WF_TRY(wf_mix_next(&m, &k));
        slot->counts[k]++;
        if (j < first || j >= first + (uint64_t)l->batch) continue;
        if (gen != atomic_load_explicit(&l->gen, memory_order_relaxed)) return WF_OK;
        const size_t b = (size_t)(j - first);
        const uint64_t pos = m.taken[k] - 1, n = l->src_samples[k];
        const uint64_t idx = l->shuffle ? wf_rng_permute(pos % n, n, l->src_seed[k], pos / n) : pos % n;
        slot->src[b] = k;
        slot->src_pos[b] = pos;
        wf_status st = wf_dataset_read(&l->srcs[k], idx * (uint64_t)l->seq_len, row, slot->tokens + b * row);
        if (st != WF_OK)
            return wf_error_wrap(st, "loader: reading sample %llu of source %d (its position %llu, slot %llu, "
                                     "rank %d): ",
                                 (unsigned long long)idx, k + 1, (unsigned long long)pos,
                                 (unsigned long long)(m.slot - 1), l->rank);
    }
    return WF_OK;
}

/* Reads this rank's part of the global batch at cursor c into the slot's
 * tokens (B, T+1). Gives up early (returning WF_OK with a partial batch
 * that the caller drops) when the generation moves on from `gen`. */
static wf_status read_batch(wf_loader *l, const lcursor *c, loader_slot *slot, int inject, unsigned long gen) {
    const wf_loader_state s = c->s;
    if (inject)
        return wf_error(WF_ERR_IO, "loader: %s: injected read error at epoch %llu sample %llu",
                        l->n_src ? "mixture" : l->ds.n_shards ? l->ds.shards[0].path : "dataset",
                        (unsigned long long)s.epoch, (unsigned long long)s.sample);
    if (l->n_src) return read_mix(l, c, slot, gen);
    int32_t *tokens = slot->tokens;
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
        loader_slot *slot = &l->slots[w];
        /* Slot w is neither ready nor held, so nobody else touches it: the
         * cursor goes straight into it. */
        slot->state = l->next_read;
        const unsigned long gen = atomic_load_explicit(&l->gen, memory_order_relaxed);
        const int inject = inject_matches(l, &slot->state);
        pthread_mutex_unlock(&l->mu);

        wf_trace_span span = wf_trace_begin(WF_TRACE_IO, "loader read");
        wf_status st = read_batch(l, &slot->state, slot, inject, gen);
        slot->next = slot->state;
        if (st == WF_OK) st = advance(l, &slot->next);
        wf_trace_end(span);

        pthread_mutex_lock(&l->mu);
        if (gen != atomic_load_explicit(&l->gen, memory_order_relaxed)) continue; /* cursor moved */
        slot->status = st;
        if (st != WF_OK) {
            snprintf(slot->msg, sizeof slot->msg, "%s", wf_error_msg());
            l->failed = 1;
        } else {
            l->next_read = slot->next;
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
    free(l->meta);
    free(l->slots);
    wf_dataset_close(&l->ds);
    for (int k = 0; l->srcs && k < l->n_src; k++) wf_dataset_close(&l->srcs[k]);
    free(l->srcs);
    free(l->src_samples);
    free(l->src_seed);
    free(l);
}

static wf_status check_opts(const wf_loader_opts *o, const char **split) {
    if (o && o->n_sources > 0) {
        if (o->dir)
            return wf_error(WF_ERR_INVALID, "loader: both a dataset directory and a mixture of %d sources given",
                            o->n_sources);
        if (o->n_sources > WF_MIX_MAX_SOURCES || !o->source_dirs || !o->weights ||
            o->weights->n != o->n_sources)
            return wf_error(WF_ERR_INVALID, "loader: a mixture needs 1 to %d source directories and as many "
                                            "weights (got %d sources, %d weights)",
                            WF_MIX_MAX_SOURCES, o->n_sources, o->weights ? o->weights->n : 0);
        for (int k = 0; k < o->n_sources; k++)
            if (!o->source_dirs[k] || !o->source_dirs[k][0])
                return wf_error(WF_ERR_INVALID, "loader: source %d of the mixture has no directory", k + 1);
    } else if (!o || !o->dir || !o->dir[0]) {
        return wf_error(WF_ERR_INVALID, "loader: no dataset directory given (set data.dir to a "
                                        "directory written by `weft tokenize`)");
    }
    const char *name = o->dir ? o->dir : "mixture";
    *split = o->split ? o->split : "train";
    if (strcmp(*split, "train") != 0 && strcmp(*split, "val") != 0)
        return wf_error(WF_ERR_INVALID, "loader: %s: split is \"%s\"; it must be \"train\" or \"val\"",
                        name, *split);
    if (o->seq_len < 1)
        return wf_error(WF_ERR_INVALID, "loader: %s: seq_len is %d; it must be at least 1", name,
                        o->seq_len);
    if (o->world_size < 1)
        return wf_error(WF_ERR_INVALID, "loader: %s: world_size is %d; it must be at least 1",
                        name, o->world_size);
    if (o->rank < 0 || o->rank >= o->world_size)
        return wf_error(WF_ERR_INVALID, "loader: %s: rank %d is out of range for world_size %d "
                                        "(ranks are 0..%d)",
                        name, o->rank, o->world_size, o->world_size - 1);
    if (o->global_batch < 1 || o->global_batch % o->world_size != 0)
        return wf_error(WF_ERR_INVALID, "loader: %s: global_batch %d is not a positive multiple of "
                                        "world_size %d; pick one that %d ranks can split evenly "
                                        "(e.g. %d or %d)",
                        name, o->global_batch, o->world_size, o->world_size,
                        o->global_batch > o->world_size
                            ? o->global_batch / o->world_size * o->world_size
                            : o->world_size,
                        o->global_batch > o->world_size
                            ? (o->global_batch / o->world_size + 1) * o->world_size
                            : 2 * o->world_size);
    if (o->prefetch < 0 || o->prefetch > WF_LOADER_MAX_PREFETCH)
        return wf_error(WF_ERR_INVALID, "loader: %s: prefetch is %d; it must be in 0..%d (0 reads "
                                        "synchronously, 2 is the usual choice)",
                        name, o->prefetch, WF_LOADER_MAX_PREFETCH);
    return WF_OK;
}

/* A mixture's sources: each split opened, its samples counted (at least
 * one each), the vocabularies the same. */
static wf_status open_sources(wf_loader *l, const wf_loader_opts *o, const char *split) {
    l->srcs = calloc((size_t)o->n_sources, sizeof *l->srcs);
    l->src_samples = calloc((size_t)o->n_sources, sizeof *l->src_samples);
    l->src_seed = calloc((size_t)o->n_sources, sizeof *l->src_seed);
    if (!l->srcs || !l->src_samples || !l->src_seed) return wf_error(WF_ERR_NOMEM, "loader: out of memory");
    l->n_src = o->n_sources;
    for (int k = 0; k < o->n_sources; k++) {
        const char *dir = o->source_dirs[k];
        wf_status s = wf_dataset_open(&l->srcs[k], dir, split, o->verify);
        if (s != WF_OK) return wf_error_wrap(s, "loader: source %d: opening split %s of %s: ", k + 1, split, dir);
        const wf_dataset *d = &l->srcs[k];
        l->src_samples[k] = d->n_tokens > 0 ? (d->n_tokens - 1) / (uint64_t)l->seq_len : 0;
        if (l->src_samples[k] == 0)
            return wf_error(WF_ERR_RANGE, "loader: source %d (%s): split %s has %llu tokens, fewer than one "
                                          "sample of seq_len+1 = %d tokens; use a shorter seq_len or tokenize "
                                          "more data",
                            k + 1, dir, split, (unsigned long long)d->n_tokens, l->seq_len + 1);
        if (d->vocab_size != l->srcs[0].vocab_size)
            return wf_error(WF_ERR_FORMAT, "loader: source %d (%s) has a vocabulary of %u ids, source 1 (%s) one "
                                           "of %u: the sources of a mixture share one tokenizer",
                            k + 1, dir, d->vocab_size, o->source_dirs[0], l->srcs[0].vocab_size);
        l->src_seed[k] = wf_rng_at(l->seed, WF_LOADER_MIX_STREAM, (uint64_t)k);
        l->n_samples += l->src_samples[k];
    }
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

    wf_status s = o->n_sources > 0 ? open_sources(l, o, split)
                                   : wf_dataset_open(&l->ds, o->dir, split, o->verify);
    if (s != WF_OK) {
        if (!o->n_sources) wf_error_wrap(s, "loader: opening split %s of %s: ", split, o->dir);
        wf_loader_destroy(l);
        return s;
    }
    if (!o->n_sources) l->n_samples = l->ds.n_tokens > 0 ? (l->ds.n_tokens - 1) / (uint64_t)l->seq_len : 0;
    l->n_batches = l->n_samples / (uint64_t)l->global_batch;
    if (!o->n_sources && l->n_batches == 0) {
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
    if (l->n_src) {
        /* Per slot: src (B ints), src_pos (B u64), counts (n_src u32). */
        /* Rounded to 16 bytes, so that every slot's src_pos is aligned. */
        const size_t mstride = ((size_t)l->batch * (sizeof(int) + sizeof(uint64_t)) +
                                (size_t)l->n_src * sizeof(uint32_t) + 16 + 15) & ~(size_t)15;
        l->meta = calloc((size_t)l->n_slots, mstride);
        if (!l->meta) {
            s = wf_error(WF_ERR_NOMEM, "loader: out of memory for the mixture's batch records");
            wf_loader_destroy(l);
            return s;
        }
        for (int i = 0; i < l->n_slots; i++) {
            char *p = (char *)l->meta + (size_t)i * mstride;
            l->slots[i].src_pos = (uint64_t *)(void *)p;
            l->slots[i].src = (int *)(void *)(p + (size_t)l->batch * sizeof(uint64_t));
            l->slots[i].counts = (uint32_t *)(void *)(p + (size_t)l->batch * (sizeof(uint64_t) + sizeof(int)));
        }
        wf_mix_state_init(&l->cursor.m, o->weights);
        l->next_read = l->cursor;
    }

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
    l->out.state = slot->state.s;
    l->out.wait_seconds = waited;
    l->out.source = l->n_src ? slot->src : NULL;
    l->out.source_pos = l->n_src ? slot->src_pos : NULL;
    l->out.counts = l->n_src ? slot->counts : NULL;
    l->out.mix = l->n_src ? &slot->state.m : NULL;
}

static wf_status next_sync(wf_loader *l, const wf_batch **b) {
    loader_slot *slot = &l->slots[0];
    pthread_mutex_lock(&l->mu);
    const int inject = inject_matches(l, &l->cursor);
    pthread_mutex_unlock(&l->mu);
    /* The caller waits for the whole read: that is its wait time. */
    const double t0 = wf_time_now();
    slot->state = l->cursor;
    WF_TRY(read_batch(l, &slot->state, slot, inject, atomic_load(&l->gen)));
    slot->next = slot->state;
    WF_TRY(advance(l, &slot->next));
    fill_out(l, slot, wf_time_now() - t0);
    l->cursor = slot->next;
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
    l->cursor = slot->next;
    *b = &l->out;
    return WF_OK;
}

/* ---------------------------------------------------------------- state */

wf_loader_state wf_loader_get_state(const wf_loader *l) { return l->cursor.s; }

/* The cursor moves to c: what was read ahead is dropped. */
static void move_cursor(wf_loader *l, const lcursor *c) {
    l->cursor = *c;
    if (l->prefetch == 0) return;
    pthread_mutex_lock(&l->mu);
    atomic_fetch_add(&l->gen, 1);
    l->count = 0; /* drop what is ready; the held batch stays valid */
    atomic_store_explicit(&l->n_ready, 0, memory_order_relaxed);
    l->failed = 0;
    l->next_read = *c;
    pthread_cond_signal(&l->free_cv);
    pthread_mutex_unlock(&l->mu);
}

wf_status wf_loader_set_state(wf_loader *l, wf_loader_state s) {
    if (l->n_src)
        return wf_error(WF_ERR_INVALID, "loader: a mixture's cursor is a wf_mix_state: use wf_loader_set_mix");
    if (s.sample > l->n_samples)
        return wf_error(WF_ERR_RANGE, "loader: state {epoch %llu, sample %llu} is past the %llu "
                                      "samples of an epoch of this dataset (seq_len %d); was it "
                                      "saved for another dataset or seq_len?",
                        (unsigned long long)s.epoch, (unsigned long long)s.sample,
                        (unsigned long long)l->n_samples, l->seq_len);
    lcursor c;
    memset(&c, 0, sizeof c);
    c.s = normalize(l, s);
    move_cursor(l, &c);
    return WF_OK;
}

wf_status wf_loader_get_mix(const wf_loader *l, wf_mix_state *out) {
    if (!l->n_src) return wf_error(WF_ERR_INVALID, "loader: reads one dataset, not a mixture");
    *out = l->cursor.m;
    return WF_OK;
}

wf_status wf_loader_set_mix(wf_loader *l, const wf_mix_state *m) {
    if (!l->n_src) return wf_error(WF_ERR_INVALID, "loader: reads one dataset, not a mixture");
    if (m->weights.n != l->n_src)
        return wf_error(WF_ERR_INVALID, "loader: a mixture state of %d sources for a mixture of %d", m->weights.n,
                        l->n_src);
    WF_TRY(wf_mix_state_check(m, "loader"));
    lcursor c;
    memset(&c, 0, sizeof c);
    c.m = *m;
    c.s = (wf_loader_state){0, m->slot};
    move_cursor(l, &c);
    return WF_OK;
}

int wf_loader_num_sources(const wf_loader *l) { return l->n_src; }
uint64_t wf_loader_source_samples(const wf_loader *l, int k) {
    return k >= 0 && k < l->n_src ? l->src_samples[k] : 0;
}

uint64_t wf_loader_samples_per_epoch(const wf_loader *l) { return l->n_samples; }
uint64_t wf_loader_batches_per_epoch(const wf_loader *l) { return l->n_batches; }

int wf_loader_ready(wf_loader *l) {
    pthread_mutex_lock(&l->mu);
    int n = l->count;
    pthread_mutex_unlock(&l->mu);
    return n;
}
