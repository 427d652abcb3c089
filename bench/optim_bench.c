/* optim_bench: the optimizer's time per step, AdamW against Muon (Muon for
 * the blocks' matrices plus AdamW for the rest, as optim.name = muon runs
 * them), on random gradients of a preset's parameters, and the
 * Newton-Schulz iteration's GFLOP/s against the sgemm peak (wf_peak_get,
 * measured now, not cached). No forward or backward: the optimizer alone.
 *
 *   optim_bench [--preset stories15M] [--threads 2] [--steps 5] [--ns-steps 5]
 *
 * Prints one block of text; bench/README.md, "Optimizer: Muon against
 * AdamW", has the numbers and how to read them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/backend.h"
#include "weft/mfu.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/rng.h"
#include "weft/trace.h"
#include "lib/bench_common.h"

static double now_s(void) { return (double)wf_trace_now() * 1e-9; }

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    const char *preset = "stories15M";
    int threads = 2, steps = 5, ns_steps = 5;
    const bench_opt opts[] = {{"--preset", "NAME", BENCH_OPT_STR, &preset},
                              {"--threads", "N", BENCH_OPT_INT, &threads},
                              {"--steps", "K", BENCH_OPT_INT, &steps},
                              {"--ns-steps", "S", BENCH_OPT_INT, &ns_steps}};
    int rc = bench_opts_parse(argc, argv, "optim_bench", NULL, opts, sizeof opts / sizeof *opts);
    if (rc) return rc;
    if (steps < 1 || threads < 1) {
        fprintf(stderr, "optim_bench: --steps and --threads must be >= 1\n");
        return 2;
    }
    wf_kern_set_threads(threads);
    wf_model_config mc;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_adamw *adamw = NULL, *rest = NULL;
    wf_muon *muon = NULL;
    wf_adamw_config ac = wf_adamw_config_default(), rc_ = ac;
    rc_.skip_muon = 1;
    wf_muon_config uc = wf_muon_config_default();
    uc.ns_steps = ns_steps;
    rc = 1;
    if (wf_model_config_preset(&mc, preset) != WF_OK || wf_arena_create(&arena, 0) != WF_OK ||
        wf_model_create(&m, &mc, arena) != WF_OK || wf_adamw_create(&adamw, &ac, m, arena) != WF_OK ||
        wf_adamw_create(&rest, &rc_, m, arena) != WF_OK ||
        wf_muon_create(&muon, &uc, m, wf_adamw_m(rest), arena) != WF_OK) {
        fprintf(stderr, "optim_bench: %s\n", wf_error_msg());
        goto done;
    }
    wf_model_init(m, 1);
    size_t P = wf_model_num_params(m);
    float *g = wf_model_grads(m);
    wf_rng rng = wf_rng_make(3, 1);
    for (size_t i = 0; i < P; i++) g[i] = wf_rng_normal(&rng) * 1e-3f;
    double norm = wf_grad_norm(m);

    /* one warm-up step each, then the median of `steps` */
    double *ta = calloc((size_t)steps, sizeof *ta), *tm = calloc((size_t)steps, sizeof *tm),
           *tr = calloc((size_t)steps, sizeof *tr);
    if (!ta || !tm || !tr) goto done_free;
    for (int k = -1; k < steps; k++) {
        double t0 = now_s();
        if (wf_adamw_step_shard(adamw, 1e-4, g, norm) != WF_OK) goto fail;
        double t1 = now_s();
        if (wf_adamw_step_shard(rest, 1e-4, g, norm) != WF_OK) goto fail;
        double t2 = now_s();
        if (wf_muon_step(muon, 1e-4, g, norm, NULL) != WF_OK) goto fail;
        double t3 = now_s();
        if (k >= 0) ta[k] = t1 - t0, tr[k] = t2 - t1, tm[k] = t3 - t2;
    }
    qsort(ta, (size_t)steps, sizeof *ta, cmp);
    qsort(tm, (size_t)steps, sizeof *tm, cmp);
    qsort(tr, (size_t)steps, sizeof *tr, cmp);
    double a = ta[steps / 2], mu = tm[steps / 2], r = tr[steps / 2];
    double flops = wf_muon_ns_flops(m, ns_steps);
    wf_peak peak;
    wf_peak_options po = {.cache_path = "", .budget_s = 1.0, .refresh = WF_PEAK_REMEASURE};
    if (wf_peak_get(&peak, &po) != WF_OK) goto fail;
    printf("optim_bench: %s, %zu parameters (%zu in Muon matrices), %d threads, median of %d steps\n", preset, P,
           wf_muon_numel(muon), threads, steps);
    printf("  adamw (every parameter):            %8.1f ms\n", a * 1e3);
    printf("  muon: adamw (the rest)              %8.1f ms\n", r * 1e3);
    printf("        muon (the matrices, %d NS)     %8.1f ms   NS %.2f GFLOP, %.1f GFLOP/s over the whole Muon step\n",
           ns_steps, mu * 1e3, flops / 1e9, flops / mu / 1e9);
    printf("        total                         %8.1f ms   (%.2fx adamw)\n", (r + mu) * 1e3, (r + mu) / a);
    printf("  sgemm peak: %.1f GFLOP/s (measured now); NS at %.0f%% of it\n", peak.tflops * 1e3,
           100.0 * flops / mu / 1e9 / (peak.tflops * 1e3));
    rc = 0;
    goto done_free;
fail:
    fprintf(stderr, "optim_bench: %s\n", wf_error_msg());
done_free:
    free(ta);
    free(tm);
    free(tr);
done:
    wf_muon_destroy(muon);
    wf_adamw_destroy(rest);
    wf_adamw_destroy(adamw);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return rc;
}
