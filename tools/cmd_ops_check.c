/* `weft ops-check [--backend NAME | --device DEV] [--op OP] [--json] [--perf]`: every op
 * of a backend against the reference backend `ref` on random inputs of odd
 * and tail shapes, by normalised error against a threshold per op and
 * dtype (wf_backend_ops_check, include/weft/backend.h); --perf times each
 * op on larger shapes instead and prints GFLOP/s or GB/s. Exit status 1
 * when an op fails its threshold. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/backend.h"

typedef struct {
    char *backend;
    char *device;
    char *op;
    int json;
    int perf;
    int64_t seed;
    int64_t threads;
} ops_opts;

static const wf_opt ops_opt_table[] = {
    {"backend", NULL, WF_OPT_STR, offsetof(ops_opts, backend), NULL, WF_NO_RANGE,
     "the backend to check: cpu (the default), ref, cuda, cudaemu, or another that wf_backend_open knows"},
    {"device", NULL, WF_OPT_STR, offsetof(ops_opts, device), NULL, WF_CHOICES(wf_backend_device_names),
     .help = "check the compute backend of this device instead (cpu, cuda, auto: as `weft train --device`)"},
    {"op", NULL, WF_OPT_STR, offsetof(ops_opts, op), NULL, WF_NO_RANGE, "check this op only (default: every op)"},
    {"json", NULL, WF_OPT_BOOL, offsetof(ops_opts, json), "false", WF_NO_RANGE, "print one JSON object"},
    {"perf", NULL, WF_OPT_BOOL, offsetof(ops_opts, perf), "false", WF_NO_RANGE,
     "time each op on larger shapes (no comparison) and print GFLOP/s or GB/s"},
    {"seed", NULL, WF_OPT_INT, offsetof(ops_opts, seed), "1", 0, 1e15, "seed of the random inputs"},
    {"threads", NULL, WF_OPT_INT, offsetof(ops_opts, threads), "0", 0, 4096,
     "kernel threads (0: the OpenMP default)"},
};

static const wf_cmd_spec ops_spec = {
    "ops-check",
    "weft ops-check [--backend NAME | --device cpu|cuda|auto] [--op OP] [--json] [--perf]",
    "Runs every op of a backend (matmul, rmsnorm, rope, attention, swiglu, embedding, cross-entropy, sumsq, "
    "first non-finite, loss sum, add, cast, AdamW; forward and backward) on random inputs of odd and tail "
    "shapes, and the same op of the reference backend `ref` on the same inputs, and compares each output by "
    "its normalised error sum((x - r)^2) / sum(r^2) against the op's threshold for its dtype (f32: 1e-10; "
    "double sums 1e-20; counts and indices exact; bf16 outputs 1.6e-5, on a backend that has bf16: matmul, "
    "attention and cast of cuda and cudaemu). Exit status 1 when any output fails. With --perf, times "
    "each op on larger shapes instead (best of 3) and prints GFLOP/s or GB/s. cudaemu runs the CUDA kernels "
    "under an emulator; WF_CUDAEMU_SCHEDULE (rr, fwd, rev, shuffle[:SEED]) picks its thread order (docs/gpu.md).",
    ops_opt_table,
    sizeof ops_opt_table / sizeof *ops_opt_table,
    0,
    0,
    0,
};

typedef struct {
    int json, perf;
    json_t *list;
} ops_ctx;

static void print_result(void *ctx, const wf_ops_check_result *r) {
    ops_ctx *c = ctx;
    if (c->json) {
        json_t *o = json_object();
        json_object_set_new(o, "op", json_string(r->op));
        json_object_set_new(o, "shape", json_string(r->shape));
        json_object_set_new(o, "output", json_string(r->output));
        json_object_set_new(o, "dtype", json_string(wf_dtype_name(r->dtype)));
        if (c->perf) {
            json_object_set_new(o, "seconds", json_real(r->seconds));
            json_object_set_new(o, "rate", json_real(r->rate));
            json_object_set_new(o, "unit", json_string(r->rate_unit));
        } else {
            json_object_set_new(o, "err", isfinite(r->err) ? json_real(r->err) : json_string("inf"));
            json_object_set_new(o, "threshold", json_real(r->threshold));
            json_object_set_new(o, "ok", json_boolean(r->ok));
        }
        json_array_append_new(c->list, o);
    } else if (c->perf) {
        printf("%-17s %-44s %10.3f ms %9.2f %s\n", r->op, r->shape, r->seconds * 1e3, r->rate, r->rate_unit);
    } else {
        printf("%-4s %-17s %-44s %-8s %-4s err %.3g (threshold %.0e)\n", r->ok ? "ok" : "FAIL", r->op, r->shape,
               r->output, wf_dtype_name(r->dtype), r->err, r->threshold);
    }
}

static int ops_main(void *opts, const wf_strs *pos) {
    ops_opts *o = opts;
    if (o->threads > 0) wf_kern_set_threads((int)o->threads);
    wf_backend *be = NULL, *ref = NULL;
    if (o->device && o->backend) {
        wf_error(WF_ERR_CONFIG, "--device %s and --backend %s: give one of them", o->device, o->backend);
        return wf_tool_fail("ops-check");
    }
    wf_status s0 = WF_OK;
    if (o->device) {
        char note[768], why[1024];
        s0 = wf_backend_open_device(&be, o->device, note, sizeof note);
        if (s0 != WF_OK) {
            snprintf(why, sizeof why, "%s", wf_error_msg());
            wf_error(WF_ERR_UNSUPPORTED, "--device %s: %s", o->device, why);
        } else if (note[0]) {
            fprintf(stderr, "weft ops-check: %s\n", note);
        }
    } else {
        s0 = wf_backend_open(&be, o->backend ? o->backend : "cpu");
    }
    if (s0 != WF_OK || wf_backend_open(&ref, "ref") != WF_OK) {
        wf_backend_close(be);
        return wf_tool_fail("ops-check");
    }
    ops_ctx ctx = {o->json, o->perf, o->json ? json_array() : NULL};
    int failed = 0;
    wf_status s = wf_backend_ops_check(be, ref, o->op, o->perf, (uint64_t)o->seed, print_result, &ctx, &failed);
    int rc = 0;
    if (s != WF_OK) {
        rc = wf_tool_fail("ops-check");
    } else if (o->json) {
        json_t *root = json_object();
        json_object_set_new(root, "backend", json_string(wf_backend_name(be)));
        json_object_set_new(root, "reference", json_string("ref"));
        json_object_set_new(root, "mode", json_string(o->perf ? "perf" : "check"));
        json_object_set_new(root, "failed", json_integer(failed));
        json_object_set_new(root, "results", ctx.list);
        ctx.list = NULL;
        char *text = json_dumps(root, JSON_INDENT(1));
        if (text) puts(text);
        free(text);
        json_decref(root);
    } else if (!o->perf) {
        printf("%s: %s against ref\n", failed ? "FAILED" : "passed", wf_backend_name(be));
    }
    if (s == WF_OK && failed) {
        if (!o->json) fprintf(stderr, "weft ops-check: %d outputs of backend %s exceed their thresholds\n", failed,
                              wf_backend_name(be));
        rc = 1;
    }
    json_decref(ctx.list);
    wf_backend_close(be);
    wf_backend_close(ref);
    return rc;
}

int wf_cmd_ops_check(int argc, char **argv) {
    ops_opts o;
    return wf_tool_run(&ops_spec, &o, sizeof o, argc, argv, ops_main);
}
