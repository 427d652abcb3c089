/* weft: the batch-size ramp (data.batch_ramp_*; docs/loader.md, "Batch-size
 * ramp-up").
 *
 * The global batch of a training step, in sequences, as a pure function of
 * the tokens trained before the step: it starts at `start`, grows by `inc`
 * in n = (final - start) / inc equal increases, and is `final` from `tokens`
 * tokens on (Megatron's --rampup-batch-size, which BLOOM used: 192 growing
 * by 16 to 2048). With c tokens trained,
 *
 *     level(c) = min(n, floor(c * n / tokens))   (computed exactly)
 *     seqs(c)  = start + level(c) * inc
 *
 * so the k-th increase happens at the first step that starts at or after
 * ceil(k * tokens / n) tokens. Every size is whole micro-batches of the
 * trainer's data.batch_size sequences (which the ranks split evenly), so a
 * step reads seqs / batch_size consecutive micro-batches of the loader and
 * the loader's cursor stays independent of the rank count: a run resumed
 * mid-ramp at another world size reads exactly the tokens it would have.
 *
 * Nothing here allocates; every function is O(log n) or O(n) in the number
 * of increases, never in the number of steps.
 */
#ifndef WEFT_BATCH_RAMP_H
#define WEFT_BATCH_RAMP_H

#include <stdint.h>

#include "weft/status.h"

/* The most increases a ramp may have (keeps the exact arithmetic in 64 bits). */
#define WF_BATCH_RAMP_MAX_INCREASES (1 << 20)

/* What the config asks for (the trainer's data.* keys, named in errors). */
typedef struct {
    int64_t start;   /* data.batch_ramp_start: sequences of the first steps; 0: no ramp */
    int64_t inc;     /* data.batch_ramp_step: sequences added per increase; 0: one micro-batch */
    int64_t tokens;  /* data.batch_ramp_tokens: tokens trained when the batch reaches `final` */
    int64_t final;   /* sequences per step after the ramp (global_batch_tokens / seq_len) */
    int64_t micro;   /* data.batch_size: sequences per micro-batch over all ranks (a multiple of world) */
    int world;       /* ranks, for the messages */
    int64_t seq_len; /* T, tokens per sequence */
} wf_batch_ramp_config;

typedef struct {
    int64_t start;   /* sequences of the first step (= final without a ramp) */
    int64_t inc;     /* sequences added per increase (0 without a ramp) */
    int64_t final;   /* sequences per step after the ramp */
    uint64_t tokens; /* the ramp's length in tokens (0 without a ramp) */
    int64_t seq_len; /* T */
    int64_t n_inc;   /* increases: (final - start) / inc; 0 without a ramp */
} wf_batch_ramp;

/* Checks `c` and fills `r`. A config with start 0 (and inc and tokens 0)
 * is "no ramp": every step has `final` sequences. Refused (WF_ERR_CONFIG,
 * naming the key and saying what would fit): inc or tokens without start;
 * start or inc not a multiple of micro; start not below final; final -
 * start not a multiple of inc; tokens 0; more than
 * WF_BATCH_RAMP_MAX_INCREASES increases. */
wf_status wf_batch_ramp_init(wf_batch_ramp *r, const wf_batch_ramp_config *c);

/* 1 if `r` ramps (start < final). */
int wf_batch_ramp_active(const wf_batch_ramp *r);

/* The global batch, in sequences, of the step that starts after
 * `tokens_done` tokens were trained. */
int64_t wf_batch_ramp_seqs(const wf_batch_ramp *r, uint64_t tokens_done);

/* The tokens that `steps` steps train, starting after `tokens_done`
 * (saturates at UINT64_MAX). The run's tokens after step s are
 * wf_batch_ramp_tokens_in(r, 0, s). */
uint64_t wf_batch_ramp_tokens_in(const wf_batch_ramp *r, uint64_t tokens_done, uint64_t steps);

/* Steps, starting after `tokens_done`, that keep the current size before
 * it grows; UINT64_MAX at the final size. */
uint64_t wf_batch_ramp_steps_at_size(const wf_batch_ramp *r, uint64_t tokens_done);

#endif
