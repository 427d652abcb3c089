/* The batch-size ramp (contract: include/weft/batch_ramp.h; docs/loader.md,
 * "Batch-size ramp-up"). Pure integer arithmetic on the config: no state,
 * no allocation. The exact floor(c * n / R) would overflow 64 bits for
 * large c * n, so the level is found by a binary search over the
 * thresholds ceil(k * R / n) = k * (R / n) + ceil(k * (R % n) / n), whose
 * products stay below n^2 <= 2^40. It does not know about ranks beyond
 * naming them in a message: the sizes are multiples of the micro-batch,
 * which the trainer has already made a multiple of the rank count. */
#include "weft/batch_ramp.h"

#include <stdio.h>

/* ceil(k * R / n): the first token count at level k (0 <= k <= n). */
static uint64_t threshold(const wf_batch_ramp *r, int64_t k) {
    const uint64_t n = (uint64_t)r->n_inc, uk = (uint64_t)k;
    return uk * (r->tokens / n) + (uk * (r->tokens % n) + n - 1) / n;
}

/* Increases done after `c` tokens: min(n, floor(c * n / R)). */
static int64_t level(const wf_batch_ramp *r, uint64_t c) {
    if (r->n_inc == 0 || c >= r->tokens) return r->n_inc;
    int64_t lo = 0, hi = r->n_inc - 1; /* threshold(0) = 0 <= c < threshold(n) = R */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (threshold(r, mid) <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) { return a && b > UINT64_MAX / a ? UINT64_MAX : a * b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

/* "4" or "4 or 8": multiples of `m` around `v` for a message. */
static void suggest(char *buf, size_t size, int64_t v, int64_t m) {
    int64_t lo = v / m * m;
    if (lo < m) snprintf(buf, size, "%lld", (long long)m);
    else snprintf(buf, size, "%lld or %lld", (long long)lo, (long long)(lo + m));
}

wf_status wf_batch_ramp_init(wf_batch_ramp *r, const wf_batch_ramp_config *c) {
    *r = (wf_batch_ramp){.start = c->final, .final = c->final, .seq_len = c->seq_len};
    if (c->final < 1 || c->micro < 1 || c->seq_len < 1 || c->final % c->micro != 0)
        return wf_error(WF_ERR_INVALID, "batch ramp: final %lld, micro-batch %lld and seq_len %lld must be positive, "
                                        "the final a multiple of the micro-batch",
                        (long long)c->final, (long long)c->micro, (long long)c->seq_len);
    char alt[64];
    if (c->start == 0) {
        if (c->inc != 0)
            return wf_error(WF_ERR_CONFIG, "data.batch_ramp_step = %lld is set but data.batch_ramp_start is 0 (no "
                                           "ramp): give data.batch_ramp_start, the global batch in sequences of the "
                                           "first steps, or leave data.batch_ramp_step out",
                            (long long)c->inc);
        if (c->tokens != 0)
            return wf_error(WF_ERR_CONFIG, "data.batch_ramp_tokens = %lld is set but data.batch_ramp_start is 0 (no "
                                           "ramp): give data.batch_ramp_start, the global batch in sequences of the "
                                           "first steps, or leave data.batch_ramp_tokens out",
                            (long long)c->tokens);
        return WF_OK;
    }
    if (c->start < 0 || c->start % c->micro != 0) {
        suggest(alt, sizeof alt, c->start, c->micro);
        return wf_error(WF_ERR_CONFIG, "data.batch_ramp_start = %lld sequences is not a multiple of data.batch_size = "
                                       "%lld: every step's global batch is whole micro-batches of %lld sequences, "
                                       "split over the %d rank%s; use %s",
                        (long long)c->start, (long long)c->micro, (long long)c->micro, c->world,
                        c->world == 1 ? "" : "s", alt);
    }
    if (c->start >= c->final)
        return wf_error(WF_ERR_CONFIG, "data.batch_ramp_start = %lld sequences is not below the final global batch of "
                                       "%lld sequences (data.global_batch_tokens / data.seq_len = %lld / %lld): the "
                                       "ramp grows the batch up to it; lower the start or raise "
                                       "data.global_batch_tokens",
                        (long long)c->start, (long long)c->final, (long long)(c->final * c->seq_len),
                        (long long)c->seq_len);
    int64_t inc = c->inc ? c->inc : c->micro;
    if (inc < 0 || inc % c->micro != 0) {
        suggest(alt, sizeof alt, inc, c->micro);
        return wf_error(WF_ERR_CONFIG, "data.batch_ramp_step = %lld sequences is not a multiple of data.batch_size = "
                                       "%lld: each increase adds whole micro-batches of %lld sequences, split over the "
                                       "%d rank%s; use %s",
                        (long long)inc, (long long)c->micro, (long long)c->micro, c->world, c->world == 1 ? "" : "s",
                        alt);
    }
    int64_t growth = c->final - c->start;
    if (growth % inc != 0)
        return wf_error(WF_ERR_CONFIG, "data.batch_ramp_step = %lld sequences does not divide the ramp's growth from "
                                       "data.batch_ramp_start = %lld to the final %lld sequences (%lld): the batch must "
                                       "reach the final size in whole increases; use a step that divides %lld, e.g. "
                                       "%lld",
                        (long long)inc, (long long)c->start, (long long)c->final, (long long)growth,
                        (long long)growth, (long long)c->micro);
    if (growth / inc > WF_BATCH_RAMP_MAX_INCREASES)
        return wf_error(WF_ERR_CONFIG, "data.batch_ramp_step = %lld sequences makes %lld increases from %lld to %lld "
                                       "sequences, more than %d: use a larger step",
                        (long long)inc, (long long)(growth / inc), (long long)c->start, (long long)c->final,
                        WF_BATCH_RAMP_MAX_INCREASES);
    if (c->tokens <= 0)
        return wf_error(WF_ERR_CONFIG, "data.batch_ramp_tokens = %lld: give the tokens over which the global batch "
                                       "grows from data.batch_ramp_start = %lld to %lld sequences",
                        (long long)c->tokens, (long long)c->start, (long long)c->final);
    r->start = c->start;
    r->inc = inc;
    r->tokens = (uint64_t)c->tokens;
    r->n_inc = growth / inc;
    return WF_OK;
}

int wf_batch_ramp_active(const wf_batch_ramp *r) { return r->n_inc > 0; }

int64_t wf_batch_ramp_seqs(const wf_batch_ramp *r, uint64_t tokens_done) {
    return r->start + level(r, tokens_done) * r->inc;
}

uint64_t wf_batch_ramp_steps_at_size(const wf_batch_ramp *r, uint64_t tokens_done) {
    int64_t k = level(r, tokens_done);
    if (k == r->n_inc) return UINT64_MAX;
    uint64_t step_tokens = (uint64_t)(r->start + k * r->inc) * (uint64_t)r->seq_len;
    return (threshold(r, k + 1) - tokens_done + step_tokens - 1) / step_tokens;
}

uint64_t wf_batch_ramp_tokens_in(const wf_batch_ramp *r, uint64_t tokens_done, uint64_t steps) {
    /* One pass per size the steps go through: at most n + 1. */
    uint64_t total = 0, c = tokens_done;
    while (steps > 0) {
        uint64_t step_tokens = (uint64_t)wf_batch_ramp_seqs(r, c) * (uint64_t)r->seq_len;
        uint64_t m = wf_batch_ramp_steps_at_size(r, c);
        if (m >= steps) return add_sat(total, mul_sat(steps, step_tokens));
        total += m * step_tokens; /* below the ramp's tokens: no overflow */
        c += m * step_tokens;
        steps -= m;
    }
    return total;
}
