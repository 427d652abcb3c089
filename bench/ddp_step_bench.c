/* Data-parallel training throughput: the real model's training step
 * (forward, backward, gradient all-reduce through the DDP reducer, AdamW)
 * at whatever number of ranks it is launched with, on one global batch.
 *
 *   build/bench/ddp_step_bench [options]                     (1 rank)
 *   mpirun -np 2 --bind-to none build/bench/ddp_step_bench [options]
 *   options: [--preset NAME] [--batch B] [--seq T] [--steps N] [--threads N] [--bucket-mb M]
 *
 * Defaults: stories15M, global batch B = 8 sequences of T = 256, 4 timed
 * steps after one warm-up, 25 MiB buckets. Rank r takes sequences
 * [r B/W, (r+1) B/W) of the global batch (random tokens from a fixed seed,
 * sequence i from its own stream), so every rank count trains on the same
 * batches; the loss printed is the mean over ranks of the local mean loss,
 * which for equal local batches is the global mean: it should agree across
 * rank counts to rounding. Kernel threads per rank: --threads, else the
 * machine's cores / ranks (so 1 and 2 ranks use the same cores; launch
 * with --bind-to none, as Open MPI would bind each of 2 ranks to a core
 * but also a single rank to one core).
 *
 * It prints per step the loss and the time, and at the end the mean step
 * time split into forward+backward (the slowest rank's), waiting for the
 * slowest rank (a barrier, added here to separate it), the all-reduce
 * (wf_reducer_finish; the model has no per-tensor ready hooks yet, so
 * nothing overlaps) and AdamW,
 * tokens/s over all ranks, and the gradient bytes each rank sends in a
 * ring all-reduce, 2 (W-1)/W x 4 P. Only rank 0 prints.
 * Not a test: it prints numbers and asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/comm.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/rng.h"
#include "weft/thread.h"

#include "lib/bench_common.h"

static int rank_;

static int fail(const char *what) {
    fprintf(stderr, "ddp_step_bench (rank %d): %s: %s\n", rank_, what, wf_error_msg());
    return 1;
}

static double max_over_ranks(wf_comm *c, double x) {
    wf_comm_all_reduce_f64(c, &x, 1, WF_COMM_MAX, "bench max");
    return x;
}

int main(int argc, char **argv) {
    const char *preset = "stories15M";
    int B = 8, T = 256, steps = 4, threads = 0;
    double bucket_mb = 25;
    const bench_opt opts[] = {
        {"--preset", "NAME", BENCH_OPT_STR, &preset}, {"--batch", "B", BENCH_OPT_INT, &B},
        {"--seq", "T", BENCH_OPT_INT, &T},            {"--steps", "N", BENCH_OPT_INT, &steps},
        {"--threads", "N", BENCH_OPT_INT, &threads},  {"--bucket-mb", "M", BENCH_OPT_DOUBLE, &bucket_mb},
    };
    if (bench_opts_parse(argc, argv, "ddp_step_bench", "[mpirun -np W --bind-to none]", opts,
                         sizeof opts / sizeof *opts))
        return 2;
    wf_comm *c = NULL;
    if (wf_comm_create(&c, NULL) != WF_OK) return fail("communicator");
    rank_ = wf_comm_rank(c);
    int W = wf_comm_size(c);
    if (B % W != 0) {
        fprintf(stderr, "ddp_step_bench: the global batch %d is not a multiple of %d ranks\n", B, W);
        wf_comm_destroy(c);
        return 2;
    }
    if (threads <= 0) threads = wf_default_threads() / W > 0 ? wf_default_threads() / W : 1;
    wf_kern_set_threads(threads);
    const int Bl = B / W, lo = rank_ * Bl;

    wf_model_config cfg;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_adamw *opt = NULL;
    wf_adamw_config ac = wf_adamw_config_default();
    if (wf_model_config_preset(&cfg, preset) != WF_OK || wf_arena_create(&arena, 0) != WF_OK ||
        wf_model_create(&m, &cfg, arena) != WF_OK || wf_model_plan(m, Bl, T) != WF_OK ||
        wf_adamw_create(&opt, &ac, m, arena) != WF_OK)
        return fail("model");
    wf_model_init(m, 1);
    int nt = wf_model_num_tensors(m);
    wf_comm_span *spans = calloc((size_t)nt, sizeof *spans);
    if (!spans) return fail("out of memory");
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(m, i);
        spans[i] = (wf_comm_span){ti->offset, ti->numel};
    }
    wf_reducer *red = NULL;
    if (wf_reducer_create(&red, c, wf_model_grads(m), spans, nt, (size_t)(bucket_mb * (1 << 20))) !=
        WF_OK)
        return fail("reducer");
    size_t P = wf_model_num_params(m);
    if (rank_ == 0)
        printf("ddp_step_bench: %s (%zu parameters), global batch %d x %d on %d rank(s) (%s), "
               "%d kernel thread(s) each, %d buckets of %.0f MiB\n",
               preset, P, B, T, W, wf_comm_backend(c), threads, wf_reducer_num_buckets(red),
               bucket_mb);

    int32_t *tokens = malloc((size_t)Bl * T * sizeof *tokens);
    int32_t *targets = malloc((size_t)Bl * T * sizeof *targets);
    if (!tokens || !targets) return fail("out of memory");
    double sum_fb = 0, sum_ar = 0, sum_opt = 0, sum_step = 0, sum_skew = 0;
    for (int s = 0; s <= steps; s++) {
        wf_comm_set_step(c, s);
        /* Sequence i of step s: its own stream, the same for any W. */
        for (int b = 0; b < Bl; b++) {
            wf_rng r = wf_rng_make(1000 + (uint64_t)s, (uint64_t)(lo + b));
            for (int t = 0; t < T; t++) {
                tokens[b * T + t] = (int32_t)wf_rng_below(&r, (uint64_t)cfg.vocab_size);
                targets[b * T + t] = (int32_t)wf_rng_below(&r, (uint64_t)cfg.vocab_size);
            }
        }
        if (wf_comm_barrier(c, "step start") != WF_OK) return fail("barrier");
        double t0 = wf_time_now();
        float loss = 0;
        wf_model_zero_grad(m);
        if (wf_model_forward(m, tokens, targets, Bl, T, &loss) != WF_OK ||
            wf_model_backward(m, 1.0f) != WF_OK)
            return fail("forward/backward");
        double t1 = wf_time_now();
        /* Separate waiting for the slower rank from the all-reduce itself
         * (a real step does not need this barrier). */
        if (wf_comm_barrier(c, "skew") != WF_OK) return fail("barrier");
        double t1b = wf_time_now();
        if (wf_reducer_finish(red) != WF_OK) return fail("all-reduce");
        double t2 = wf_time_now();
        double norm = 0;
        if (wf_adamw_step(opt, 3e-4, &norm) != WF_OK) return fail("adamw");
        double t3 = wf_time_now();
        double gl = loss;
        if (wf_comm_all_reduce_f64(c, &gl, 1, WF_COMM_AVG, "loss") != WF_OK) return fail("loss");
        double step = max_over_ranks(c, t3 - t0);
        double fb = max_over_ranks(c, t1 - t0), ar = max_over_ranks(c, t2 - t1b);
        double skew = max_over_ranks(c, t1b - t1);
        double op = max_over_ranks(c, t3 - t2);
        if (rank_ == 0)
            printf("  step %d: loss %.6f grad_norm %.6f, %.3f s (fwd+bwd %.3f, wait for the slowest "
                   "rank %.3f, all-reduce %.3f, adamw %.3f)%s\n",
                   s, gl, norm, step, fb, skew, ar, op, s == 0 ? " warm-up" : "");
        if (s > 0) {
            sum_step += step;
            sum_fb += fb;
            sum_ar += ar;
            sum_skew += skew;
            sum_opt += op;
        }
    }
    if (rank_ == 0 && steps > 0) {
        double mean = sum_step / steps;
        printf("  mean of %d steps: %.3f s: fwd+bwd %.3f, wait %.3f, all-reduce %.3f, adamw %.3f; "
               "%.0f tokens/s over %d rank(s)\n",
               steps, mean, sum_fb / steps, sum_skew / steps, sum_ar / steps, sum_opt / steps,
               (double)B * T / mean, W);
        printf("  gradient: %.1f MB; a ring all-reduce sends %.1f MB per rank per step\n",
               4.0 * P / 1e6, 2.0 * (W - 1) / W * 4.0 * P / 1e6);
    }
    free(tokens);
    free(targets);
    free(spans);
    wf_reducer_destroy(red);
    wf_adamw_destroy(opt);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    wf_comm_destroy(c);
    return 0;
}
