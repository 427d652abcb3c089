/* Generation with the key/value cache (wf_generator) against its peer,
 * recomputing the full forward over the whole sequence for every new token
 * (what generation costs without a cache), on the same model in the same
 * run.
 *
 *   generate_bench [--preset NAME] [--tokens N] [--threads N] [--step-threads N] [--reps R]
 *
 * Defaults: stories15M (random init), N = 256 positions (the preset's
 * max_seq_len): one prompt token and N-1 generated ones, greedy; the
 * kernels' default threads, and the generator's default threads for a
 * one-token step (wf_generator_set_step_threads). It prints:
 *   - cached generation: tokens/s of wf_generate, and the cost of a step
 *     near the start and near the end of the sequence (the attention part
 *     grows with the position; the matmuls do not);
 *   - the peer: for t = 1 .. N-1, wf_model_forward over the first t tokens
 *     and the argmax of the last row; tokens/s, the cost of a token near
 *     the start and near the end (it grows with t: quadratic in total);
 *     and the ratio;
 *   - prefill: N tokens in one wf_generator_prefill (chunks of 64), tokens/s;
 *   - the sampler alone on a vocab-sized row: greedy, plain, top-k 40,
 *     top-p 0.9, in microseconds per token.
 * Both paths are checked to pick the same tokens. The best of R runs
 * (default 3) is reported. Not a test: it prints numbers and asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/generate.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/rng.h"
#include "weft/thread.h"

#include "lib/bench_common.h"

typedef struct {
    int32_t *buf;
    int n;
} sink;

static int keep(void *user, int32_t token) {
    sink *s = user;
    s->buf[s->n++] = token;
    return 0;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int fail(const char *what) {
    fprintf(stderr, "generate_bench: %s: %s\n", what, wf_error_msg());
    return 1;
}

int main(int argc, char **argv) {
    const char *preset = "stories15M";
    int N = 0, threads = 0, reps = 3, step_threads = 0;
    const bench_opt opts[] = {
        {"--preset", "NAME", BENCH_OPT_STR, &preset},         {"--tokens", "N", BENCH_OPT_INT, &N},
        {"--threads", "N", BENCH_OPT_INT, &threads},          {"--step-threads", "N", BENCH_OPT_INT, &step_threads},
        {"--reps", "R", BENCH_OPT_INT, &reps},
    };
    if (bench_opts_parse(argc, argv, "generate_bench", NULL, opts, sizeof opts / sizeof *opts)) return 2;
    if (threads > 0) wf_kern_set_threads(threads);
    threads = wf_kern_threads();
    if (reps < 1) reps = 1;
    wf_model_config cfg;
    if (wf_model_config_preset(&cfg, preset) != WF_OK) return fail("preset");
    if (N <= 1 || N > cfg.max_seq_len) N = cfg.max_seq_len;
    const int V = cfg.vocab_size;

    wf_arena *arena;
    wf_model *m;
    wf_generator *g;
    if (wf_arena_create(&arena, 0) != WF_OK || wf_model_create(&m, &cfg, arena) != WF_OK ||
        wf_model_plan(m, 1, N) != WF_OK)
        return fail("model");
    wf_model_init(m, 1);
    if (wf_generator_create(&g, m, N) != WF_OK) return fail("generator");
    if (step_threads > 0) wf_generator_set_step_threads(g, step_threads);
    printf("generate_bench: %s (%.1fM parameters), %d positions, %d threads (%d for a step), "
           "OpenBLAS %s, best of %d\n",
           preset, wf_model_num_params(m) / 1e6, N, threads, wf_generator_step_threads(g),
           wf_kern_blas_core(), reps);

    int32_t *cached = calloc((size_t)N, sizeof *cached), *full = calloc((size_t)N, sizeof *full);
    const wf_sampler_config greedy = {0.0, 0, 1.0};
    const int n_new = N - 1;
    cached[0] = full[0] = 1; /* the prompt: one token */

    /* Cached: wf_generate, and the per-step cost at both ends. */
    double t_cached = 1e30, t_first = 1e30, t_last = 1e30;
    const int probe = N / 8 > 1 ? N / 8 : 1;
    for (int r = 0; r < reps; r++) {
        sink s = {cached + 1, 0};
        double t0 = wf_time_now();
        if (wf_generate(g, cached, 1, n_new, &greedy, 0, -1, keep, &s, NULL) != WF_OK)
            return fail("wf_generate");
        double t = wf_time_now() - t0;
        t_cached = t < t_cached ? t : t_cached;
        /* Replay step by step: time the first and the last `probe` steps. */
        const float *logits;
        wf_generator_reset(g);
        if (wf_generator_prefill(g, cached, 1, &logits) != WF_OK) return fail("prefill");
        double ta = wf_time_now();
        for (int i = 1; i <= probe; i++)
            if (wf_generator_step(g, cached[i], &logits) != WF_OK) return fail("step");
        double tb = wf_time_now();
        for (int i = probe + 1; i < N - probe; i++)
            if (wf_generator_step(g, cached[i], &logits) != WF_OK) return fail("step");
        double tc = wf_time_now();
        for (int i = N - probe; i < N; i++)
            if (wf_generator_step(g, cached[i], &logits) != WF_OK) return fail("step");
        double td = wf_time_now();
        t_first = tb - ta < t_first ? tb - ta : t_first;
        t_last = td - tc < t_last ? td - tc : t_last;
    }

    /* Peer: the full forward over the growing sequence, once per token. */
    double t_full = 1e30, f_first = 1e30, f_last = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = wf_time_now(), ta = 0, tb = 0;
        for (int t = 1; t < N; t++) {
            if (t == probe + 1) ta = wf_time_now();
            if (t == N - probe) tb = wf_time_now();
            if (wf_model_forward(m, full, NULL, 1, t, NULL) != WF_OK) return fail("forward");
            full[t] = argmax(wf_model_logits(m) + (size_t)(t - 1) * V, V);
        }
        double t1 = wf_time_now();
        t_full = t1 - t0 < t_full ? t1 - t0 : t_full;
        f_first = ta - t0 < f_first ? ta - t0 : f_first;
        f_last = t1 - tb < f_last ? t1 - tb : f_last;
    }
    int same = 0;
    while (same < N && cached[same] == full[same]) same++;

    /* Prefill of all N positions. */
    double t_prefill = 1e30;
    for (int r = 0; r < reps; r++) {
        wf_generator_reset(g);
        double t0 = wf_time_now();
        if (wf_generator_prefill(g, cached, N, NULL) != WF_OK) return fail("prefill");
        double t = wf_time_now() - t0;
        t_prefill = t < t_prefill ? t : t_prefill;
    }

    printf("\n%-34s %12s %12s\n", "", "tokens/s", "ms/token");
    printf("%-34s %12.1f %12.3f\n", "cached (wf_generate, greedy)", n_new / t_cached,
           1e3 * t_cached / n_new);
    printf("%-34s %12.1f %12.3f\n", "  steps at positions 1..N/8", probe / t_first,
           1e3 * t_first / probe);
    printf("%-34s %12.1f %12.3f\n", "  steps at positions 7N/8..N", probe / t_last,
           1e3 * t_last / probe);
    printf("%-34s %12.1f %12.3f\n", "full forward per token (peer)", n_new / t_full,
           1e3 * t_full / n_new);
    printf("%-34s %12.1f %12.3f\n", "  tokens at positions 1..N/8", probe / f_first,
           1e3 * f_first / probe);
    printf("%-34s %12.1f %12.3f\n", "  tokens at positions 7N/8..N", probe / f_last,
           1e3 * f_last / probe);
    printf("%-34s %12.1f %12.3f\n", "prefill of N tokens", N / t_prefill, 1e3 * t_prefill / N);
    printf("\ncached / full-forward speed-up: %.1fx over %d tokens; same tokens: %s\n",
           t_full / t_cached, n_new, same == N ? "yes" : "NO");
    if (same != N) printf("  (first difference at position %d)\n", same);

    /* The sampler alone on one vocab-sized row of logits. */
    float *row = malloc((size_t)V * sizeof *row), *scratch = malloc((size_t)V * sizeof *scratch);
    int32_t *idx = malloc((size_t)V * sizeof *idx);
    wf_rng data = wf_rng_make(5, 5);
    for (int i = 0; i < V; i++) row[i] = 3.0f * wf_rng_normal(&data);
    const struct {
        const char *name;
        wf_sampler_config c;
    } samplers[] = {{"greedy", {0.0, 0, 1.0}},
                    {"temperature 1", {1.0, 0, 1.0}},
                    {"top-k 40", {1.0, 40, 1.0}},
                    {"top-p 0.9", {1.0, 0, 0.9}},
                    {"top-k 40 + top-p 0.9", {0.8, 40, 0.9}}};
    printf("\nsampler on %d logits (us/token; a cached step is %.0f us):\n", V,
           1e6 * t_cached / n_new);
    for (size_t k = 0; k < sizeof samplers / sizeof *samplers; k++) {
        wf_rng r = wf_rng_make(1, 1);
        const int n = 200;
        volatile int32_t sum = 0;
        double t0 = wf_time_now();
        for (int i = 0; i < n; i++) sum += wf_sample(row, V, &samplers[k].c, &r, scratch, idx);
        (void)sum;
        printf("  %-22s %8.1f\n", samplers[k].name, 1e6 * (wf_time_now() - t0) / n);
    }
    free(row), free(scratch), free(idx), free(cached), free(full);
    wf_generator_destroy(g);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return 0;
}
