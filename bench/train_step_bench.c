/* One training step of the model (forward + backward, fp32, CPU) against
 * the machine's sgemm peak measured in the same run.
 *
 *   train_step_bench [--preset NAME] [--batch B] [--seq T] [--steps N] [--threads N]
 *
 * Defaults: stories15M, B = 8, T = 256, 5 timed steps after one warm-up,
 * the kernels' default thread count. It prints:
 *   - the sgemm peak: the best GFLOP/s of cblas_sgemm over square
 *     products of 1024..2048 and over the step's own largest product
 *     (the output projection), on the same threads;
 *   - the step: seconds, tokens/s, the FLOPs it does (6 N P for the matrix
 *     products, plus causal attention) and their rate as a share of the
 *     sgemm peak;
 *   - where the time goes, per op, forward and backward (wf_model_get_op_times);
 *   - how many threads the process has after the steps (OpenMP loops and
 *     OpenBLAS share one pool, so: the thread count, nothing more).
 * Not a test: it prints numbers and asserts nothing.
 */
#include <cblas.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/rng.h"
#include "weft/thread.h"

static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Best GFLOP/s of out (M, N) = a (M, K) @ b (N, K)^T over `reps` runs. */
static double sgemm_gflops(int M, int N, int K, int reps) {
    float *a = malloc((size_t)M * K * sizeof *a), *b = malloc((size_t)N * K * sizeof *b);
    float *c = malloc((size_t)M * N * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return 0;
    }
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 17) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 13) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = wf_time_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double t = wf_time_now() - t0;
        if (r > 0 && t < best) best = t; /* the first run warms up */
    }
    free(a), free(b), free(c);
    return 2.0 * M * N * K / best / 1e9;
}

int main(int argc, char **argv) {
    const char *preset = "stories15M";
    int B = 8, T = 256, steps = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--preset") && v) preset = v, i++;
        else if (!strcmp(argv[i], "--batch") && v) B = atoi(v), i++;
        else if (!strcmp(argv[i], "--seq") && v) T = atoi(v), i++;
        else if (!strcmp(argv[i], "--steps") && v) steps = atoi(v), i++;
        else if (!strcmp(argv[i], "--threads") && v) threads = atoi(v), i++;
        else {
            fprintf(stderr, "usage: train_step_bench [--preset NAME] [--batch B] [--seq T] "
                            "[--steps N] [--threads N]\n");
            return 2;
        }
    }
    if (threads > 0) wf_kern_set_threads(threads);
    threads = wf_kern_threads();

    wf_model_config cfg;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    if (wf_model_config_preset(&cfg, preset) != WF_OK || wf_arena_create(&arena, 0) != WF_OK ||
        wf_model_create(&m, &cfg, arena) != WF_OK || wf_model_plan(m, B, T) != WF_OK) {
        fprintf(stderr, "train_step_bench: %s\n", wf_error_msg());
        return 1;
    }
    const int N = B * T, C = cfg.dim, V = cfg.vocab_size, L = cfg.n_layers, NH = cfg.n_heads;
    const int HD = C / NH, H = wf_model_config_hidden_dim(&cfg);
    const int QKV = (NH + 2 * cfg.n_kv_heads) * HD;

    printf("train_step_bench: %s, B x T = %d x %d, %d threads, %zu parameters, OpenBLAS %s "
           "kernels\n",
           preset, B, T, threads, wf_model_num_params(m), wf_kern_blas_core());
    char advice[256];
    if (wf_kern_blas_check(advice, sizeof advice)) printf("  warning: %s\n", advice);
    double peak = 0;
    const int sq[] = {1024, 1536, 2048};
    for (size_t i = 0; i < sizeof sq / sizeof *sq; i++) {
        double g = sgemm_gflops(sq[i], sq[i], sq[i], 3);
        printf("  sgemm %4d^3:            %7.1f GFLOP/s\n", sq[i], g);
        if (g > peak) peak = g;
    }
    double g_head = sgemm_gflops(N, V, C, 2);
    printf("  sgemm %d x %d x %d:  %7.1f GFLOP/s (the output projection)\n", N, V, C, g_head);
    if (g_head > peak) peak = g_head;
    printf("  sgemm peak:               %7.1f GFLOP/s\n", peak);

    int32_t *tokens = malloc((size_t)N * sizeof *tokens), *targets = malloc((size_t)N * sizeof *targets);
    wf_rng r = wf_rng_make(1, 1);
    for (int i = 0; i < N; i++) {
        tokens[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
        targets[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
    }
    wf_model_init(m, 1);
    float loss = 0;
    double best = 1e30, total = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) wf_model_reset_op_times(m); /* step 0 warms up */
        double t0 = wf_time_now();
        wf_model_zero_grad(m);
        if (wf_model_forward(m, tokens, targets, B, T, &loss) != WF_OK ||
            wf_model_backward(m, 1.0f) != WF_OK) {
            fprintf(stderr, "train_step_bench: %s\n", wf_error_msg());
            return 1;
        }
        double t = wf_time_now() - t0;
        if (s > 0) {
            total += t;
            if (t < best) best = t;
        }
    }
    double mean = total / steps;
    /* FLOPs: 2 per multiply-add; backward of a product is two products. */
    double mm_fwd = 2.0 * N * C * ((double)QKV + C + 2.0 * H) + 2.0 * N * H * C;
    mm_fwd = mm_fwd * L + 2.0 * N * C * V;
    double pairs = (double)B * NH * T * (T + 1) / 2.0; /* causal (query, key) pairs */
    double att = pairs * HD * (4.0 + 10.0) * L;         /* fwd: qk, pv; bwd: qk, dp, dq, dk, dv */
    double flops = 3.0 * mm_fwd + att;
    printf("  step: %.3f s mean, %.3f s best (of %d) -> %.0f tokens/s; loss %.4f\n", mean, best,
           steps, N / mean, loss);
    printf("  step FLOPs: %.1f G (matmul %.1f G, attention %.1f G) -> %.1f GFLOP/s = %.0f%% of "
           "sgemm peak\n",
           flops / 1e9, 3.0 * mm_fwd / 1e9, att / 1e9, flops / mean / 1e9,
           100.0 * flops / mean / 1e9 / peak);

    wf_model_op_times ot = wf_model_get_op_times(m);
    double sum = 0;
    for (int i = 0; i < WF_OP_COUNT; i++) sum += ot.fwd[i] + ot.bwd[i];
    printf("  per step, by op:      forward   backward   share\n");
    for (int i = 0; i < WF_OP_COUNT; i++) {
        double f = ot.fwd[i] / steps, b = ot.bwd[i] / steps;
        printf("    %-14s %8.1f ms %8.1f ms %6.1f%%\n", wf_model_op_name((wf_model_op)i), f * 1e3,
               b * 1e3, 100.0 * (ot.fwd[i] + ot.bwd[i]) / sum);
    }
    double mm_t = (ot.fwd[WF_OP_MATMUL] + ot.bwd[WF_OP_MATMUL]) / steps;
    printf("  matmul: %.1f GFLOP/s = %.0f%% of sgemm peak\n", 3.0 * mm_fwd / mm_t / 1e9,
           100.0 * 3.0 * mm_fwd / mm_t / 1e9 / peak);
    printf("  threads in the process after the steps: %d (kernel threads: %d)\n", count_threads(),
           threads);
    wf_model_memory mem = wf_model_get_memory(m);
    printf("  memory: parameters %.1f MB, gradients %.1f MB, activations %.1f MB\n",
           mem.param_bytes / 1e6, mem.grad_bytes / 1e6, mem.activation_bytes / 1e6);
    free(tokens), free(targets);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return 0;
}
