/* weft: text generation from a wf_model: a key/value cache for inference,
 * the sampler (temperature, top-k, top-p) and a generation loop.
 *
 * A wf_generator runs the model's forward one position at a time (or a
 * prompt in chunks) for a batch of one sequence, keeping every layer's keys
 * and values, so that position t costs O(t) attention work instead of a
 * forward over all t tokens: generating n tokens is O(n) matmuls, not
 * O(n^2). Its memory is planned at creation (an arena the generator owns):
 *   K cache, V cache: (n_layers, max_tokens, n_kv_heads, head_dim) floats
 *   each; keys are stored after RoPE.
 * It reads the model's parameters in place (no copy), so it must not
 * outlive the model; if the parameters change, call wf_generator_reset.
 * The logits it computes equal those of wf_model_forward on the whole
 * sequence to fp32 rounding (tests/unit/test_generate.c). docs/generate.md
 * has the layout and the sampling rules.
 *
 * Besides the one sequence, wf_generator_branches forwards several
 * continuations of the cached prefix at once without keeping them (to
 * score an example's choices on a context computed once).
 *
 * Not here: batches of independent sequences, beam search, repetition
 * penalties, tokenization (the caller maps text to ids and back).
 * Not thread-safe: one generator belongs to one thread at a time (several
 * generators may share one model).
 */
#ifndef WEFT_GENERATE_H
#define WEFT_GENERATE_H

#include <stdint.h>

#include "weft/model.h"
#include "weft/rng.h"
#include "weft/status.h"

typedef struct wf_generator wf_generator;

/* Creates a generator for `m` whose cache holds `max_tokens` positions
 * (<= model.max_seq_len; 0 or less means model.max_seq_len). Everything it
 * needs is allocated here, once. The model need not be planned
 * (wf_model_plan is for training), but must hold its parameters in its own
 * buffer (not created with WF_MODEL_NO_PARAMS: WF_ERR_INVALID). Free with
 * wf_generator_destroy. */
wf_status wf_generator_create(wf_generator **out, wf_model *m, int max_tokens);
void wf_generator_destroy(wf_generator *g); /* accepts NULL */

/* Forgets the sequence: the next prefill starts at position 0. */
void wf_generator_reset(wf_generator *g);

/* Threads of a one-token step (wf_generator_step, and a prefill of one
 * token): between 1 and the kernels' thread count at creation, which is
 * the default (n is clamped). A step is a few milliseconds of
 * matrix-vector products cut into dozens of short parallel regions. On an
 * idle machine threads pay (stories15M, 2 cores: 1.37 ms a token on 2
 * threads, 2.26 ms on 1), but when another process holds a core each
 * region waits for the OS to schedule its last thread (measured: 28..68 ms
 * a token on 2 threads of a busy 2-core machine, 4..5 ms on 1). On a
 * shared machine, set 1. Prompts (more than one token) always use every
 * thread: their regions are long. */
void wf_generator_set_step_threads(wf_generator *g, int n);
int wf_generator_step_threads(const wf_generator *g);

/* Positions in the cache (tokens processed since the last reset), and the
 * most it can hold. */
int wf_generator_pos(const wf_generator *g);
int wf_generator_capacity(const wf_generator *g);

/* Appends n >= 1 tokens (processed in chunks of up to 64 positions, each
 * chunk through the matmuls at once) and points *logits at the (vocab)
 * logits of the token after the last one. Fails with WF_ERR_RANGE, before
 * changing anything, when a token id is outside the vocabulary or the
 * sequence would grow past the capacity. *logits stays valid until the
 * next prefill, step or destroy. `logits` may be NULL. */
wf_status wf_generator_prefill(wf_generator *g, const int32_t *tokens, int n,
                               const float **logits);

/* wf_generator_prefill of one token. */
wf_status wf_generator_step(wf_generator *g, int32_t token, const float **logits);

/* Forgets the positions from `pos` on (0 <= pos <= wf_generator_pos, else
 * WF_ERR_RANGE): the next prefill continues at pos. For a caller that
 * keeps a prefix its next sequence shares (e.g. the same few-shot
 * examples) instead of computing it again. */
wf_status wf_generator_rewind(wf_generator *g, int pos);

/* Scoring several continuations of one context: forwards n_branch >= 1
 * branches on top of the cached positions [0, P), P = wf_generator_pos,
 * each as if it alone followed them, and keeps none of them (the position
 * stays P). Branch b has lens[b] >= 1 tokens (the branches' tokens are
 * concatenated in `tokens`), at positions P .. P + lens[b] - 1, and its
 * tokens see the cache and their own branch's earlier tokens, never
 * another branch. `logits` receives (sum of lens, vocab) floats: the
 * logits after every branch token, in order; they equal those of a
 * prefill of the prefix and then the branch, to fp32 rounding. The
 * branches are computed together (up to 64 rows through the matmuls at
 * once) in the cache's rows after P, so P + sum of lens must be at most
 * the capacity (else WF_ERR_RANGE before any work: give fewer at a time).
 * A token outside the vocabulary is WF_ERR_RANGE. On the prefill's
 * threads. */
wf_status wf_generator_branches(wf_generator *g, const int32_t *tokens, const int *lens, int n_branch,
                                float *logits);

/* ------------------------------------------------------------- sampling */

typedef struct {
    double temperature; /* 0: greedy (argmax); else logits are divided by it */
    int top_k;          /* keep the k most likely tokens; 0: off */
    double top_p;       /* keep the smallest most-likely set with probability
                           >= top_p (nucleus); 1.0: off */
} wf_sampler_config;

/* temperature 1, top_k off, top_p off: plain sampling from softmax(logits). */
wf_sampler_config wf_sampler_config_default(void);

/* Checks the ranges: temperature finite and >= 0, top_k >= 0, top_p in
 * [0, 1]. WF_ERR_CONFIG naming the bad value otherwise. */
wf_status wf_sampler_config_validate(const wf_sampler_config *c);

/* Picks the next token from `logits` (vocab):
 *   temperature == 0: the argmax, the lowest id among equal maxima; no
 *     random number is drawn. top_k and top_p are then irrelevant.
 *   else, in this order: p = softmax(logits / temperature); top_k keeps the
 *     k tokens of highest p (ties to the lower id); top_p then keeps, of
 *     what is left and renormalised, the shortest prefix in order of
 *     decreasing p (ties to the lower id) whose sum reaches top_p (always at
 *     least one token); one token is drawn from what is kept, in proportion
 *     to p, with exactly one value u of `rng` (wf_rng_uniform_double): the
 *     first at which the running sum of p passes u times the kept sum,
 *     walking in id order when top_k and top_p are both off, else in the
 *     order above.
 * NaN and -inf logits are never chosen; if some logits are +inf, the lowest
 * such id is. Returns -1 only when no logit is a number above -inf.
 * `c` must be valid (wf_sampler_config_validate). scratch and scratch_idx
 * hold `vocab` elements each; their contents are overwritten. */
int32_t wf_sample(const float *logits, int vocab, const wf_sampler_config *c, wf_rng *rng,
                  float *scratch, int32_t *scratch_idx);

/* The stream of wf_rng that wf_generate samples from: token i of a
 * generation draws value i of wf_rng_make(seed, WF_GENERATE_RNG_STREAM). */
#define WF_GENERATE_RNG_STREAM UINT64_C(0x73616d706c65) /* "sample" */

/* Called for each generated token, in order; a nonzero return stops the
 * generation after this token (not an error). */
typedef int (*wf_generate_fn)(void *user, int32_t token);

/* Resets `g`, prefills the prompt (n_prompt >= 1 tokens) and generates up
 * to max_new tokens with `cfg` and `seed`, calling on_token (may be NULL)
 * for each. It stops early when stop_token (-1: none) is sampled; the stop
 * token is not passed to on_token nor counted. *n_generated (may be NULL)
 * receives the number of tokens passed to on_token. The whole text must fit
 * the cache: n_prompt + max_new <= wf_generator_capacity(g), else
 * WF_ERR_RANGE before any work. The same model, prompt, config and seed give
 * the same tokens (on the same thread count: see docs/generate.md). */
wf_status wf_generate(wf_generator *g, const int32_t *prompt, int n_prompt, int max_new,
                      const wf_sampler_config *cfg, uint64_t seed, int32_t stop_token,
                      wf_generate_fn on_token, void *user, int *n_generated);

#endif
