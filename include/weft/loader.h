/* weft: the stateful, data-parallel data loader.
 *
 * The training split is one virtual token stream (see shard.h), cut into
 * samples of T+1 tokens: sample i covers tokens [i*T, i*T + T + 1). Each
 * epoch visits the samples in an order fixed by (seed, epoch), reshuffled
 * every epoch. A global batch is `global_batch` consecutive samples of that
 * order; rank r of W gets the r-th of W equal parts (B = global_batch / W
 * samples), so the union over ranks is the same global batch for any W.
 * An epoch ends when fewer than global_batch samples remain (they are
 * dropped).
 *
 * The loader's whole state is a cursor {epoch, sample index into the epoch's
 * order} that does not depend on W: a run can resume mid-epoch with another
 * number of ranks and read exactly the tokens it would have read.
 *
 * A mixture (docs/loader.md, "Dataset mixing") reads several datasets
 * instead of one: the sequence slots of the global order (slot n is the
 * n-th sample of the run, all ranks together) go to the sources by the
 * schedule of weft/mixture.h, and each source is read one sample at a time
 * in its own order (reshuffled per epoch of that source, keyed by the seed
 * and the source's index). Its cursor is a wf_mix_state: the slots served,
 * each source's samples taken and the current weights' segment, none of
 * which depends on W. A global batch is `global_batch` consecutive slots,
 * split over the ranks as above; every rank walks the schedule over the
 * whole global batch, so each knows every source's count in it.
 *
 * A background thread keeps two batches ready. wf_loader_next reports how
 * long the caller waited.
 */
#ifndef WEFT_LOADER_H
#define WEFT_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "weft/mixture.h"
#include "weft/shard.h"
#include "weft/status.h"

typedef struct {
    uint64_t epoch;
    uint64_t sample; /* index into the epoch's order of the next global batch's first sample */
} wf_loader_state;

typedef struct {
    const char *dir;        /* dataset directory (NULL for a mixture) */
    const char *split;      /* "train" (shuffled) or "val" (in order, no shuffle) */
    uint64_t seed;
    int seq_len;            /* T */
    int global_batch;       /* samples per global batch, a multiple of world_size */
    int rank, world_size;
    int shuffle;            /* 1 for train; val uses 0 */
    int prefetch;           /* batches kept ready by the background thread: 0 = synchronous, default 2 */
    int verify;             /* verify shard checksums on open */
    /* A mixture instead of `dir`: n_sources dataset directories (1 to
     * WF_MIX_MAX_SOURCES) and their starting weights (n == n_sources). */
    const char *const *source_dirs;
    int n_sources;
    const wf_mix_weights *weights;
} wf_loader_opts;

typedef struct {
    int32_t *tokens;        /* (B, T+1) row-major: inputs are [:, :T], targets [:, 1:] */
    int batch;              /* B, this rank's samples */
    int seq_len;            /* T */
    wf_loader_state state;  /* cursor of this batch (before it was read); a mixture's: {0, mix->slot} */
    double wait_seconds;    /* how long wf_loader_next blocked for it */
    /* A mixture only (NULL otherwise): */
    const int *source;        /* (B) the source of each of this rank's rows */
    const uint64_t *source_pos; /* (B) each row's position in its source's order (epoch = pos / samples) */
    const uint32_t *counts;   /* (n_sources) sequences of the whole global batch from each source, all ranks */
    const wf_mix_state *mix;  /* the mixture's cursor this batch was read from */
} wf_batch;

/* The usual prefetch depth (callers that build wf_loader_opts use it). */
#define WF_LOADER_DEFAULT_PREFETCH 2

typedef struct wf_loader wf_loader;

wf_status wf_loader_create(wf_loader **out, const wf_loader_opts *o);
void wf_loader_destroy(wf_loader *l); /* accepts NULL; stops the thread */

/* The next batch. *b points into loader memory valid until the next
 * wf_loader_next or wf_loader_destroy (set_state keeps it). A read error of the prefetch thread is returned
 * here, with its message, for the batch that failed, and again on every
 * call until set_state. A loader is used from one thread. */
wf_status wf_loader_next(wf_loader *l, const wf_batch **b);

/* The cursor of the next batch wf_loader_next will return: save this. For
 * a mixture {0, slot}: save its wf_loader_get_mix instead. */
wf_loader_state wf_loader_get_state(const wf_loader *l);
/* Moves the cursor (drops prefetched batches). A mixture refuses it
 * (WF_ERR_INVALID): use wf_loader_set_mix. */
wf_status wf_loader_set_state(wf_loader *l, wf_loader_state s);

/* A mixture's cursor of the next batch (its weights included): save this.
 * WF_ERR_INVALID for a loader of one dataset. */
wf_status wf_loader_get_mix(const wf_loader *l, wf_mix_state *out);
/* Moves a mixture's cursor (drops prefetched batches): a saved one, or
 * one the caller changed with wf_mix_set_weights (new weights from the
 * next batch on) or wf_mix_advance (skip data). Checked first
 * (wf_mix_state_check): WF_ERR_FORMAT, or WF_ERR_INVALID for another
 * number of sources or a loader of one dataset. */
wf_status wf_loader_set_mix(wf_loader *l, const wf_mix_state *s);

/* Samples per epoch and global batches per epoch. For a mixture, whose
 * sources each have their own epochs: the sum of the sources' samples, and
 * that over global_batch. */
uint64_t wf_loader_samples_per_epoch(const wf_loader *l);
uint64_t wf_loader_batches_per_epoch(const wf_loader *l);

/* Sources of a mixture (0 for one dataset), and source k's samples per
 * epoch (N_k = (tokens - 1) / T). */
int wf_loader_num_sources(const wf_loader *l);
uint64_t wf_loader_source_samples(const wf_loader *l, int k);

/* Batches ready now (0..prefetch; always 0 when synchronous): a gauge for
 * metrics, and how tests know the thread is waiting for a free buffer. */
int wf_loader_ready(wf_loader *l);

#endif
