/* One whole training step of the model (zero_grad, forward with loss,
 * backward, global-norm clip and AdamW; fp32, CPU) against the machine's
 * sgemm peak measured in the same run.
 *
 *   train_step_bench [--preset NAME] [--batch B] [--seq T] [--steps N]
 *                    [--threads N] [--serve]
 *
 * Defaults: stories15M, B = 8, T = 256, 5 timed steps after one warm-up,
 * the kernels' default thread count. It prints:
 *   - the sgemm peak, MAMF-style: the best GFLOP/s of cblas_sgemm over
 *     large square products (1024..3072) and over every product of the
 *     step itself (forward, and both products of each backward, in the
 *     layouts the model calls them), on the same threads;
 *   - the step: seconds (and its phases), tokens/s, the FLOPs per token
 *     of docs/train.md (6 N_mm + 6 L T C) and their rate against the peak
 *     (MFU);
 *   - where the time goes, per op, forward and backward (wf_model_get_op_times),
 *     and the optimizer;
 *   - how many threads the process has after the steps (OpenMP loops and
 *     OpenBLAS share one pool, so: the thread count, nothing more).
 *
 * --serve keeps the model alive for bench/train_step_compare.py, which
 * steps it in turns with the PyTorch peer. It prints "ready {json}" and then
 * answers each line read from stdin with one line of JSON:
 *   peak        the sgemm peak and every shape's GFLOP/s
 *   run K       K whole steps: their times, phases summed, last loss
 *   ops         per-op seconds since the last "ops" (then resets them)
 *   quit        exits
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
#include "weft/optim.h"
#include "weft/thread.h"

#include "lib/bench_common.h"

/* The learning rate of every timed step (any positive value costs the same). */
#define BENCH_LR_ 3e-4

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

/* Best GFLOP/s of c (M, N) = op(a) @ op(b) over `reps` timed runs after one
 * warm-up, row-major; ta / tb say whether a is stored (K, M) and b (N, K). */
static double sgemm_gflops(int M, int N, int K, int ta, int tb, int reps) {
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
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N, 0.0f, c, N);
        double t = wf_time_now() - t0;
        if (r > 0 && t < best) best = t; /* the first run warms up */
    }
    free(a), free(b), free(c);
    return 2.0 * M * N * K / best / 1e9;
}

typedef struct {
    const char *name;
    int M, N, K, ta, tb;
    double gflops;
} bench_shape_;

/* The products of one step, as wf_kern_matmul_fwd / _bwd call them for a
 * linear layer of C inputs, OC outputs over N rows: forward (N, OC, C) NT,
 * input gradient (N, C, OC) NN, weight gradient (OC, C, N) TN. */
static int step_shapes(bench_shape_ *s, int N, int C, int QKV, int H, int V) {
    static const char *const names[] = {"qkv", "o", "gate+up", "down", "output"};
    const int in[] = {C, C, C, H, C}, out[] = {QKV, C, 2 * H, C, V};
    int n = 0;
    for (int i = 0; i < 5; i++) {
        s[n++] = (bench_shape_){names[i], N, out[i], in[i], 0, 1, 0};
        s[n++] = (bench_shape_){names[i], N, in[i], out[i], 0, 0, 0};
        s[n++] = (bench_shape_){names[i], out[i], in[i], N, 1, 0, 0};
    }
    return n;
}

#define BENCH_MAX_SHAPES_ 24

/* Measures every shape (fills s[i].gflops) and returns the best. */
static double sgemm_peak(bench_shape_ *s, int n) {
    double peak = 0;
    for (int i = 0; i < n; i++) {
        int big = (double)s[i].M * s[i].N * s[i].K > 4e9;
        s[i].gflops = sgemm_gflops(s[i].M, s[i].N, s[i].K, s[i].ta, s[i].tb, big ? 2 : 4);
        if (s[i].gflops > peak) peak = s[i].gflops;
    }
    return peak;
}

static int fill_shapes(bench_shape_ *s, int N, int C, int QKV, int H, int V) {
    static const int sq[] = {1024, 1536, 2048, 3072};
    int n = 0;
    for (int i = 0; i < 4; i++) s[n++] = (bench_shape_){"square", sq[i], sq[i], sq[i], 0, 1, 0};
    return n + step_shapes(s + n, N, C, QKV, H, V);
}

/* Seconds of one step's phases. */
typedef struct {
    double zero, fwd, bwd, opt;
} bench_phases_;

static int run_step(wf_model *m, wf_adamw *opt, const int32_t *tokens, const int32_t *targets,
                    int B, int T, float *loss, bench_phases_ *ph) {
    double t0 = wf_time_now();
    wf_model_zero_grad(m);
    double t1 = wf_time_now();
    if (wf_model_forward(m, tokens, targets, B, T, loss) != WF_OK) return -1;
    double t2 = wf_time_now();
    if (wf_model_backward(m, 1.0f) != WF_OK) return -1;
    double t3 = wf_time_now();
    double norm = 0;
    if (wf_adamw_step(opt, BENCH_LR_, &norm) != WF_OK) return -1;
    double t4 = wf_time_now();
    ph->zero += t1 - t0, ph->fwd += t2 - t1, ph->bwd += t3 - t2, ph->opt += t4 - t3;
    return 0;
}

/* Training FLOPs per token, as docs/train.md counts them for MFU. */
static double flops_per_token(const wf_model_config *c, int T) {
    double C = c->dim, L = c->n_layers, V = c->vocab_size;
    double KV = (double)c->n_kv_heads * (c->dim / c->n_heads);
    double H = wf_model_config_hidden_dim(c);
    double n_mm = L * (2 * C * C + 2 * C * KV + 3 * C * H) + V * C;
    return 6 * n_mm + 6 * L * T * C;
}

/* The --serve loop: one JSON line per command read from stdin. */
static int serve(wf_model *m, wf_adamw *opt, const int32_t *tokens, const int32_t *targets, int B,
                 int T, bench_shape_ *shapes, int n_shapes) {
    char line[256];
    int steps_since_ops = 0;
    while (fgets(line, sizeof line, stdin)) {
        int k = 0;
        if (strncmp(line, "quit", 4) == 0) break;
        if (strncmp(line, "peak", 4) == 0) {
            double peak = sgemm_peak(shapes, n_shapes);
            if (!(peak > 0)) {
                fprintf(stderr, "train_step_bench: the sgemm peak failed (out of memory for its matrices)\n");
                return 1;
            }
            printf("{\"peak\": %.2f, \"shapes\": [", peak);
            for (int i = 0; i < n_shapes; i++)
                printf("%s{\"name\": \"%s\", \"mnk\": [%d, %d, %d], \"t\": \"%c%c\", "
                       "\"gflops\": %.2f}",
                       i ? ", " : "", shapes[i].name, shapes[i].M, shapes[i].N, shapes[i].K,
                       shapes[i].ta ? 'T' : 'N', shapes[i].tb ? 'T' : 'N', shapes[i].gflops);
            printf("]}\n");
        } else if (sscanf(line, "run %d", &k) == 1 && k > 0) {
            bench_phases_ ph = {0, 0, 0, 0};
            float loss = 0;
            double c0 = bench_cpu_seconds();
            printf("{\"times\": [");
            for (int s = 0; s < k; s++) {
                double t0 = wf_time_now();
                if (run_step(m, opt, tokens, targets, B, T, &loss, &ph) != 0) {
                    fprintf(stderr, "train_step_bench: %s\n", wf_error_msg());
                    return 1;
                }
                printf("%s%.6f", s ? ", " : "", wf_time_now() - t0);
            }
            printf("], \"cpu\": %.6f, \"zero\": %.6f, \"fwd\": %.6f, \"bwd\": %.6f, "
                   "\"opt\": %.6f, \"loss\": %.6f}\n",
                   bench_cpu_seconds() - c0, ph.zero, ph.fwd, ph.bwd, ph.opt, (double)loss);
            steps_since_ops += k;
        } else if (strncmp(line, "ops", 3) == 0) {
            wf_model_op_times ot = wf_model_get_op_times(m);
            printf("{\"steps\": %d, \"threads\": %d", steps_since_ops, count_threads());
            for (int dir = 0; dir < 2; dir++) {
                printf(", \"%s\": {", dir ? "bwd" : "fwd");
                for (int i = 0; i < WF_OP_COUNT; i++)
                    printf("%s\"%s\": %.6f", i ? ", " : "", wf_model_op_name((wf_model_op)i),
                           dir ? ot.bwd[i] : ot.fwd[i]);
                printf("}");
            }
            printf("}\n");
            wf_model_reset_op_times(m);
            steps_since_ops = 0;
        } else {
            printf("{\"error\": \"unknown command; use peak, run K, ops or quit\"}\n");
        }
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *preset = "stories15M";
    int B = 8, T = 256, steps = 5, threads = 0, serve_mode = 0;
    const bench_opt opts[] = {
        {"--preset", "NAME", BENCH_OPT_STR, &preset}, {"--batch", "B", BENCH_OPT_INT, &B},
        {"--seq", "T", BENCH_OPT_INT, &T},            {"--steps", "N", BENCH_OPT_INT, &steps},
        {"--threads", "N", BENCH_OPT_INT, &threads},  {"--serve", NULL, BENCH_OPT_FLAG, &serve_mode},
    };
    if (bench_opts_parse(argc, argv, "train_step_bench", NULL, opts, sizeof opts / sizeof *opts)) return 2;
    if (steps < 1) steps = 1;
    if (threads > 0) wf_kern_set_threads(threads);
    threads = wf_kern_threads();

    wf_model_config cfg;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_adamw *opt = NULL;
    wf_adamw_config ac = wf_adamw_config_default(); /* clip 1.0, wd 0.1, betas 0.9, 0.95 */
    if (wf_model_config_preset(&cfg, preset) != WF_OK || wf_arena_create(&arena, 0) != WF_OK ||
        wf_model_create(&m, &cfg, arena) != WF_OK || wf_model_plan(m, B, T) != WF_OK ||
        wf_adamw_create(&opt, &ac, m, arena) != WF_OK) {
        fprintf(stderr, "train_step_bench: %s\n", wf_error_msg());
        return 1;
    }
    const int N = B * T, C = cfg.dim, V = cfg.vocab_size, NH = cfg.n_heads;
    const int HD = C / NH, H = wf_model_config_hidden_dim(&cfg);
    const int QKV = (NH + 2 * cfg.n_kv_heads) * HD;
    const double fpt = flops_per_token(&cfg, T);
    const double mm_fpt = fpt - 6.0 * cfg.n_layers * T * C; /* without attention's term */

    int32_t *tokens = malloc((size_t)N * sizeof *tokens), *targets = malloc((size_t)N * sizeof *targets);
    if (!tokens || !targets) {
        fprintf(stderr, "train_step_bench: out of memory for the batch\n");
        return 1;
    }
    bench_random_batch(tokens, targets, (size_t)N, V);
    wf_model_init(m, 1);
    bench_shape_ shapes[BENCH_MAX_SHAPES_];
    int n_shapes = fill_shapes(shapes, N, C, QKV, H, V);

    if (serve_mode) {
        const char *better = wf_kern_blas_better_core();
        printf("ready {\"preset\": \"%s\", \"B\": %d, \"T\": %d, \"threads\": %d, \"params\": %zu, "
               "\"flops_per_token\": %.1f, \"matmul_flops_per_token\": %.1f, \"blas_core\": \"%s\", "
               "\"blas_better_core\": \"%s\"}\n",
               preset, B, T, threads, wf_model_num_params(m), fpt, mm_fpt, wf_kern_blas_core(),
               better ? better : "");
        fflush(stdout);
        int rc = serve(m, opt, tokens, targets, B, T, shapes, n_shapes);
        free(tokens), free(targets);
        wf_adamw_destroy(opt);
        wf_model_destroy(m);
        wf_arena_destroy(arena);
        return rc;
    }

    printf("train_step_bench: %s, B x T = %d x %d, %d threads, %zu parameters, OpenBLAS %s "
           "kernels\n",
           preset, B, T, threads, wf_model_num_params(m), wf_kern_blas_core());
    char advice[256];
    if (wf_kern_blas_check(advice, sizeof advice)) printf("  warning: %s\n", advice);
    double peak = sgemm_peak(shapes, n_shapes);
    if (!(peak > 0)) {
        /* The peer of MFU: without it every ratio would be nonsense. */
        fprintf(stderr, "train_step_bench: the sgemm peak failed (out of memory for its matrices)\n");
        return 1;
    }
    for (int i = 0; i < n_shapes; i++)
        printf("  sgemm %-8s %5d x %5d x %5d %c%c: %7.1f GFLOP/s\n", shapes[i].name, shapes[i].M,
               shapes[i].N, shapes[i].K, shapes[i].ta ? 'T' : 'N', shapes[i].tb ? 'T' : 'N',
               shapes[i].gflops);
    printf("  sgemm peak (best of the above): %.1f GFLOP/s\n", peak);

    float loss = 0;
    double best = 1e30, total = 0, cpu0 = 0;
    bench_phases_ ph = {0, 0, 0, 0};
    for (int s = 0; s <= steps; s++) {
        if (s == 1) { /* step 0 warms up */
            wf_model_reset_op_times(m);
            ph = (bench_phases_){0, 0, 0, 0};
            cpu0 = bench_cpu_seconds();
        }
        double t0 = wf_time_now();
        if (run_step(m, opt, tokens, targets, B, T, &loss, &ph) != 0) {
            fprintf(stderr, "train_step_bench: %s\n", wf_error_msg());
            return 1;
        }
        double t = wf_time_now() - t0;
        if (s > 0) {
            total += t;
            if (t < best) best = t;
        }
    }
    double mean = total / steps, flops = fpt * N;
    double cpu_step = (bench_cpu_seconds() - cpu0) / steps / threads; /* CPU seconds per thread */
    printf("  step: %.3f s mean, %.3f s best (of %d) -> %.0f tokens/s; loss %.4f\n", mean, best,
           steps, N / mean, loss);
    printf("  phases (mean): zero_grad %.1f ms, forward %.1f ms, backward %.1f ms, clip+AdamW "
           "%.1f ms\n",
           ph.zero / steps * 1e3, ph.fwd / steps * 1e3, ph.bwd / steps * 1e3,
           ph.opt / steps * 1e3);
    printf("  step FLOPs (docs/train.md: 6 N_mm + 6 L T C per token): %.1f G -> %.1f GFLOP/s = "
           "MFU %.1f%% (mean), %.1f%% (best)\n",
           flops / 1e9, flops / mean / 1e9, 100.0 * flops / mean / 1e9 / peak,
           100.0 * flops / best / 1e9 / peak);
    printf("  CPU time per step: %.3f s per thread (%d threads)\n", cpu_step, threads);

    wf_model_op_times ot = wf_model_get_op_times(m);
    double sum = ph.opt + ph.zero;
    for (int i = 0; i < WF_OP_COUNT; i++) sum += ot.fwd[i] + ot.bwd[i];
    printf("  per step, by op:      forward   backward   share\n");
    for (int i = 0; i < WF_OP_COUNT; i++) {
        double f = ot.fwd[i] / steps, b = ot.bwd[i] / steps;
        printf("    %-14s %8.1f ms %8.1f ms %6.1f%%\n", wf_model_op_name((wf_model_op)i), f * 1e3,
               b * 1e3, 100.0 * (ot.fwd[i] + ot.bwd[i]) / sum);
    }
    printf("    %-14s %8.1f ms %11s %6.1f%%\n", "zero_grad", ph.zero / steps * 1e3, "",
           100.0 * ph.zero / sum);
    printf("    %-14s %8.1f ms %11s %6.1f%%\n", "clip+AdamW", ph.opt / steps * 1e3, "",
           100.0 * ph.opt / sum);
    double mm_t = (ot.fwd[WF_OP_MATMUL] + ot.bwd[WF_OP_MATMUL]) / steps;
    double mm_flops = mm_fpt * N;
    printf("  matmul: %.1f GFLOP/s = %.0f%% of sgemm peak\n", mm_flops / mm_t / 1e9,
           100.0 * mm_flops / mm_t / 1e9 / peak);
    printf("  threads in the process after the steps: %d (kernel threads: %d)\n", count_threads(),
           threads);
    wf_model_memory mem = wf_model_get_memory(m);
    printf("  memory: parameters %.1f MB, gradients %.1f MB, AdamW moments %.1f MB, activations "
           "%.1f MB\n",
           mem.param_bytes / 1e6, mem.grad_bytes / 1e6, 2 * mem.param_bytes / 1e6,
           mem.activation_bytes / 1e6);
    free(tokens), free(targets);
    wf_adamw_destroy(opt);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return 0;
}
