/* Activation recomputation (train.recompute, wf_model_set_recompute): the
 * training step's time and the activation memory of each mode, against
 * none, its peer, in the same run.
 *
 *   recompute_bench [--preset NAME] [--batch B] [--seq T] [--rounds R]
 *                   [--threads N] [--plan-only]
 *
 * Defaults: stories15M, B x T = 8 x 256, 5 rounds, the kernels' default
 * thread count. One model per mode (same seed, same batch), each warmed up
 * by one step; then R rounds, each timing one whole step (zero_grad,
 * forward, backward, AdamW) of every mode, the order rotating from round
 * to round so that no mode always runs first. Prints per mode: the
 * activation bytes planned (wf_model_get_memory) and what
 * wf_model_plan_bytes predicts, the arena's peak, the median and the best
 * step time and the best's ratio to none's best (on a shared machine the
 * best is the least disturbed), the CPU seconds of the process per step,
 * forward / backward / recompute seconds (op times; the backward's include
 * the recompute), and whether the step's loss, gradients and updated
 * weights equal none's bit for bit.
 * --plan-only prints only the activation bytes of each mode
 * (wf_model_plan_bytes), without creating a model: for sizes this machine
 * cannot step. Not a test: it prints numbers and asserts nothing; it exits non-zero only
 * when a mode cannot be set up or stepped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/thread.h"

#include "lib/bench_common.h"

enum { N_MODES_ = 3, MAX_ROUNDS_ = 101 };

typedef struct {
    wf_model_recompute mode;
    wf_arena *arena;
    wf_model *m;
    wf_adamw *opt;
    double t[MAX_ROUNDS_];
    double cpu;
    float loss;
} bench_mode_;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    double s[MAX_ROUNDS_];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double best_of(const double *v, int n) {
    double b = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] < b) b = v[i];
    return b;
}

static double sum_ops(const double *v) {
    double s = 0;
    for (int i = 0; i < WF_OP_COUNT; i++) s += v[i];
    return s;
}

/* One step; the gradients stay in the model until the next zero_grad. */
static int step(bench_mode_ *b, const int32_t *tok, const int32_t *tgt, int B, int T, double *dt) {
    double c0 = bench_cpu_seconds(), t0 = wf_time_now();
    wf_model_zero_grad(b->m);
    if (wf_model_forward(b->m, tok, tgt, B, T, &b->loss) != WF_OK) return -1;
    if (wf_model_backward(b->m, 1.0f) != WF_OK) return -1;
    double norm;
    if (wf_adamw_step(b->opt, 3e-4, &norm) != WF_OK) return -1;
    *dt = wf_time_now() - t0;
    b->cpu += bench_cpu_seconds() - c0;
    return 0;
}

int main(int argc, char **argv) {
    const char *preset = "stories15M";
    int B = 8, T = 256, rounds = 5, threads = 0, plan_only = 0;
    const bench_opt opts[] = {
        {"--preset", "NAME", BENCH_OPT_STR, &preset}, {"--batch", "B", BENCH_OPT_INT, &B},
        {"--seq", "T", BENCH_OPT_INT, &T},            {"--rounds", "R", BENCH_OPT_INT, &rounds},
        {"--threads", "N", BENCH_OPT_INT, &threads},  {"--plan-only", NULL, BENCH_OPT_FLAG, &plan_only},
    };
    if (bench_opts_parse(argc, argv, "recompute_bench", NULL, opts, sizeof opts / sizeof *opts)) return 2;
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS_) rounds = MAX_ROUNDS_;
    if (threads > 0) wf_kern_set_threads(threads);
    threads = wf_kern_threads();
    wf_model_config cfg;
    if (wf_model_config_preset(&cfg, preset) != WF_OK) {
        fprintf(stderr, "recompute_bench: %s\n", wf_error_msg());
        return 2;
    }
    if (plan_only) {
        size_t bytes[N_MODES_];
        for (int k = 0; k < N_MODES_; k++)
            if (wf_model_plan_bytes(&cfg, B, T, threads, (wf_model_recompute)k, &bytes[k]) != WF_OK) {
                fprintf(stderr, "recompute_bench: %s\n", wf_error_msg());
                return 1;
            }
        printf("recompute_bench --plan-only: %s, B x T = %d x %d, %d threads\n", preset, B, T,
               threads);
        for (int k = 0; k < N_MODES_; k++)
            printf("  %-9s %14zu bytes  %5.1f%% of none's\n",
                   wf_model_recompute_name((wf_model_recompute)k), bytes[k],
                   100.0 * (double)bytes[k] / (double)bytes[0]);
        return 0;
    }
    size_t N = (size_t)B * (size_t)T;
    int32_t *tok = malloc(N * sizeof *tok), *tgt = malloc(N * sizeof *tgt);
    if (!tok || !tgt) {
        fprintf(stderr, "recompute_bench: out of memory for the batch\n");
        return 1;
    }
    bench_random_batch(tok, tgt, N, cfg.vocab_size);
    bench_mode_ b[N_MODES_];
    memset(b, 0, sizeof b);
    wf_adamw_config ac = wf_adamw_config_default();
    for (int k = 0; k < N_MODES_; k++) {
        b[k].mode = (wf_model_recompute)k;
        double dt;
        if (wf_arena_create(&b[k].arena, 0) != WF_OK ||
            wf_model_create(&b[k].m, &cfg, b[k].arena) != WF_OK ||
            wf_model_set_recompute(b[k].m, b[k].mode) != WF_OK ||
            wf_model_plan(b[k].m, B, T) != WF_OK ||
            wf_adamw_create(&b[k].opt, &ac, b[k].m, b[k].arena) != WF_OK) {
            fprintf(stderr, "recompute_bench: %s: %s\n", wf_model_recompute_name(b[k].mode),
                    wf_error_msg());
            return 1;
        }
        wf_model_init(b[k].m, 1);
        if (step(&b[k], tok, tgt, B, T, &dt) != 0) { /* warm-up */
            fprintf(stderr, "recompute_bench: %s: %s\n", wf_model_recompute_name(b[k].mode),
                    wf_error_msg());
            return 1;
        }
        wf_model_reset_op_times(b[k].m);
        b[k].cpu = 0;
    }
    for (int round = 0; round < rounds; round++)
        for (int j = 0; j < N_MODES_; j++) {
            bench_mode_ *x = &b[(round + j) % N_MODES_];
            if (step(x, tok, tgt, B, T, &x->t[round]) != 0) {
                fprintf(stderr, "recompute_bench: %s: %s\n", wf_model_recompute_name(x->mode),
                        wf_error_msg());
                return 1;
            }
        }
    printf("recompute_bench: %s, B x T = %d x %d, %d threads, %d rounds\n", preset, B, T, threads,
           rounds);
    printf("  %-9s %13s %13s %13s %8s %8s %7s %8s %8s %8s %8s %s\n", "mode", "activations B",
           "plan_bytes B", "arena peak B", "med ms", "best ms", "vs none", "cpu ms", "fwd ms",
           "bwd ms", "rec ms", "same bits");
    double base = best_of(b[0].t, rounds);
    size_t np = wf_model_num_params(b[0].m);
    for (int k = 0; k < N_MODES_; k++) {
        size_t predicted = 0;
        if (wf_model_plan_bytes(&cfg, B, T, threads, b[k].mode, &predicted) != WF_OK) {
            fprintf(stderr, "recompute_bench: %s\n", wf_error_msg());
            return 1;
        }
        wf_model_op_times ot = wf_model_get_op_times(b[k].m);
        double best = best_of(b[k].t, rounds);
        int same = b[k].loss == b[0].loss &&
                   memcmp(wf_model_grads(b[k].m), wf_model_grads(b[0].m), np * sizeof(float)) == 0 &&
                   memcmp(wf_model_params(b[k].m), wf_model_params(b[0].m), np * sizeof(float)) == 0;
        printf("  %-9s %13zu %13zu %13zu %8.1f %8.1f %6.2fx %8.1f %8.1f %8.1f %8.1f %s\n",
               wf_model_recompute_name(b[k].mode), wf_model_get_memory(b[k].m).activation_bytes,
               predicted, wf_arena_get_stats(b[k].arena).peak, median(b[k].t, rounds) * 1e3,
               best * 1e3, best / base, b[k].cpu / rounds * 1e3, sum_ops(ot.fwd) / rounds * 1e3,
               (sum_ops(ot.bwd) + sum_ops(ot.rec)) / rounds * 1e3, sum_ops(ot.rec) / rounds * 1e3,
               same ? "yes" : "NO");
    }
    for (int k = 0; k < N_MODES_; k++) {
        wf_adamw_destroy(b[k].opt);
        wf_model_destroy(b[k].m);
        wf_arena_destroy(b[k].arena);
    }
    free(tok), free(tgt);
    return 0;
}
