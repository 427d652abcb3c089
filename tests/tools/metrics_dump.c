/* metrics_dump: writes a synthetic training run's observability files, the
 * way the trainer does, for tests/py/test_tensorboard.py and
 * tests/py/test_report.py: run.json (wf_run_record_write), metrics.jsonl
 * and a TensorBoard event file (wf_metrics_*), with loss spikes decided by
 * the real spike detector.
 *
 *   metrics_dump OUT_DIR [key=value ...]
 *
 * Keys: steps (default 120), spike_at (step whose loss and grad norm jump,
 * default 80; 0: none), rollback (1: after the spike, log steps again from
 * spike_at - 10 after wf_metrics_restart, as a rollback to a checkpoint
 * would; default 0),
 * eval_every (validation loss every N steps, default 20), flush (seconds
 * between writes, default 3600: everything is written at close), window,
 * z, warmup (spike detector, defaults 20, 5, 10), peak (configured TFLOP/s,
 * default 0.05).
 *
 * The values are a function of the step (docs/formats/metrics-jsonl.md
 * describes the fields; the test recomputes these formulas):
 *   loss       = 2 + 8 * exp(-step / 30) + 0.02 * sin(step)   (x 3 at spike_at)
 *   grad_norm  = 1 + 0.5 * exp(-step / 20) + 0.01 * cos(step) (x 20 at spike_at)
 *   lr         = 1e-3 * min(1, step / 10)
 *   val_loss   = loss + 0.1 at every eval_every-th step
 *   tokens     = 4096; step_s = 0.2 + 0.001 * (step % 7); data_s = 0.01;
 *   fwd_bwd_s  = 0.15; optim_s = 0.02; ckpt_s = 0.01 at every 50th step else 0;
 *   comm_s     = 0.005 (as if two ranks)
 *   data_pos   = step - 1 (one micro-batch a step)
 * Memory fields are this process's real ones. Prints one line per spike.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/arena.h"
#include "weft/fileio.h"
#include "weft/metrics.h"
#include "weft/mfu.h"
#include "weft/runctl.h"
#include "weft/model.h"

static double arg(int argc, char **argv, const char *key, double def) {
    size_t kl = strlen(key);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], key, kl) == 0 && argv[i][kl] == '=') return atof(argv[i] + kl + 1);
    return def;
}

static void synth(wf_metrics_step *r, int64_t step, int spike_at, int eval_every) {
    double s = (double)step;
    wf_metrics_step_init(r);
    r->step = step;
    r->elapsed_s = 0.2 * s;
    r->loss = 2 + 8 * exp(-s / 30) + 0.02 * sin(s);
    r->grad_norm = 1 + 0.5 * exp(-s / 20) + 0.01 * cos(s);
    if (step == spike_at) {
        r->loss *= 3;
        r->grad_norm *= 20;
    }
    r->lr = 1e-3 * (s < 10 ? s / 10 : 1);
    if (eval_every > 0 && step % eval_every == 0) {
        r->val_loss = r->loss + 0.1;
        r->eval_s = 0.05;
    }
    r->tokens = 4096;
    r->batch_seqs = 16;
    r->tokens_seen = 4096 * step;
    r->step_s = 0.2 + 0.001 * (double)(step % 7);
    r->data_s = 0.01;
    r->fwd_bwd_s = 0.15;
    r->optim_s = 0.02;
    r->ckpt_s = step % 50 == 0 ? 0.01 : 0;
    r->comm_s = 0.005;
    r->data_pos = step - 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: metrics_dump OUT_DIR [key=value ...]\n");
        return 2;
    }
    const char *dir = argv[1];
    int steps = (int)arg(argc, argv, "steps", 120);
    int spike_at = (int)arg(argc, argv, "spike_at", 80);
    int rollback = (int)arg(argc, argv, "rollback", 0);
    int eval_every = (int)arg(argc, argv, "eval_every", 20);
    double flush = arg(argc, argv, "flush", 3600);
    double peak_tf = arg(argc, argv, "peak", 0.05);
    wf_spike_config sc = {(int)arg(argc, argv, "window", 20), arg(argc, argv, "z", 5), (int)arg(argc, argv, "warmup", 10),
                          1, 0};

    wf_model_config mc;
    wf_arena *arena = NULL;
    wf_metrics *m = NULL;
    wf_spike_detector det;
    memset(&det, 0, sizeof det);
    wf_status s = wf_model_config_preset(&mc, "tiny");
    if (s == WF_OK) s = wf_mkdirs(dir);
    double fpt = wf_model_flops_per_token(&mc, 64);
    wf_peak_options po = {peak_tf, "", 0, 0, 0};
    wf_peak peak;
    if (s == WF_OK) s = wf_peak_get(&peak, &po);
    const char *config = "[model]\npreset = \"tiny\"\n[metrics]\npeak_tflops = 0.05\n";
    wf_run_record rec = {config, argc, argv, &peak, fpt, (int64_t)wf_model_config_num_params(&mc), NULL, NULL, NULL, NULL};
    if (s == WF_OK) s = wf_run_record_write(dir, &rec);
    if (s == WF_OK) s = wf_arena_create(&arena, 1 << 20);
    if (s == WF_OK && !wf_arena_alloc(arena, 3 << 20, 64)) s = WF_ERR_NOMEM;
    wf_metrics_options mo = {dir, 1, 1, flush};
    if (s == WF_OK) s = wf_metrics_open(&m, &mo);
    if (s == WF_OK) s = wf_spike_init(&det, &sc);
    int done_rollback = 0;
    for (int64_t step = 1; s == WF_OK && step <= steps; step++) {
        wf_metrics_step r;
        synth(&r, step, done_rollback ? 0 : spike_at, eval_every);
        wf_metrics_step_derive(&r, fpt, 1, peak.tflops);
        wf_metrics_step_memory(&r, arena);
        wf_spike_result sr = wf_spike_check(&det, r.loss, r.grad_norm);
        r.loss_z = sr.loss_z;
        r.grad_norm_z = sr.grad_norm_z;
        r.spike = sr.spike;
        if (sr.spike) {
            char line[512];
            wf_spike_describe(&sr, step, r.data_pos, r.loss, r.grad_norm,
                              rollback ? WF_SPIKE_ROLLBACK : WF_SPIKE_WARN, line, sizeof line);
            printf("%s\n", line);
        }
        s = wf_metrics_log(m, &r);
        if (s == WF_OK && sr.spike && rollback && !done_rollback) {
            done_rollback = 1;
            step = spike_at - 11; /* the loop's ++ resumes at spike_at - 10 */
            s = wf_metrics_restart(m, spike_at - 10);
        }
    }
    if (s == WF_OK) s = wf_metrics_scalar(m, "eval/custom", 42.0, steps);
    wf_status s2 = wf_metrics_close(m);
    if (s == WF_OK) s = s2;
    wf_spike_deinit(&det);
    wf_arena_destroy(arena);
    if (s != WF_OK) {
        fprintf(stderr, "metrics_dump: %s\n", wf_error_msg());
        return 1;
    }
    return 0;
}
