/* `weft ckpt verify` and `weft ckpt inspect`: check a checkpoint's manifest
 * and every checksum, or list what it holds (step, files, scalar state,
 * tensors). Both take a checkpoint directory; verify also takes a run
 * directory (every checkpoint in it), inspect a run directory's newest
 * valid checkpoint. */
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/ckpt.h"
#include "weft/fileio.h"
#include "weft/weft.h"

typedef struct {
    int json, config;
} ckpt_opts;

static const wf_opt verify_opt_table[] = {
    {"json", NULL, WF_OPT_BOOL, offsetof(ckpt_opts, json), "false", WF_NO_RANGE,
     "print one JSON object per checkpoint: path, step, ok, problems"},
};

static const wf_cmd_spec verify_spec = {
    "ckpt verify",
    "weft ckpt verify CKPT_DIR|RUN_DIR [--json]",
    "Checks a checkpoint: the manifest (format, version, every piece inside its file, the pieces of each tensor "
    "covering it exactly), every data file's size and header, and every piece's XXH3 checksum. Given a run "
    "directory, checks each of its checkpoints. Exits 0 when all are good, 1 otherwise, naming the file and "
    "tensor of each problem.",
    verify_opt_table,
    sizeof verify_opt_table / sizeof *verify_opt_table,
    1,
    1,
    0,
};

static const wf_opt inspect_opt_table[] = {
    {"json", NULL, WF_OPT_BOOL, offsetof(ckpt_opts, json), "false", WF_NO_RANGE, "print the manifest itself"},
    {"show_config", "show-config", WF_OPT_BOOL, offsetof(ckpt_opts, config), "false", WF_NO_RANGE,
     "print the run configuration saved in the checkpoint (TOML)"},
};

static const wf_cmd_spec inspect_spec = {
    "ckpt inspect",
    "weft ckpt inspect CKPT_DIR|RUN_DIR [--json] [--show-config]",
    "Lists what a checkpoint holds: step, data files, the saved state (model config, optimizer step, loader "
    "cursor, seeds) and every tensor with its dtype, global shape and pieces. Given a run directory, shows its "
    "newest valid checkpoint.",
    inspect_opt_table,
    sizeof inspect_opt_table / sizeof *inspect_opt_table,
    1,
    1,
    0,
};

static void print_problem(void *ctx, const char *problem) {
    (void)ctx;
    fprintf(stderr, "  %s\n", problem);
}

/* Verifies one checkpoint directory; 0 if good. */
static int verify_one(const char *dir, int json) {
    wf_ckpt *c = NULL;
    wf_status s = wf_ckpt_open(&c, dir);
    if (s == WF_OK) s = wf_ckpt_verify(c, json ? NULL : print_problem, NULL);
    /* wf_ckpt_verify returns its first problem's message. */
    const char *first = s == WF_OK ? "" : wf_error_msg();
    if (json) {
        json_t *o = json_object(), *probs = json_array();
        json_object_set_new(o, "path", json_string(dir));
        if (c) json_object_set_new(o, "step", json_integer((json_int_t)wf_ckpt_step(c)));
        json_object_set_new(o, "ok", json_boolean(s == WF_OK));
        if (s != WF_OK) json_array_append_new(probs, json_string(first));
        json_object_set_new(o, "problems", probs);
        char *text = json_dumps(o, JSON_COMPACT);
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(o);
    } else if (s == WF_OK) {
        printf("ok      %s: step %" PRIu64 ", %d data file%s, %.1f MB, %zu tensors, every checksum matches\n", dir,
               wf_ckpt_step(c), wf_ckpt_world_size(c), wf_ckpt_world_size(c) == 1 ? "" : "s",
               (double)wf_ckpt_data_bytes(c) / 1e6, wf_ckpt_num_tensors(c));
    } else {
        printf("FAILED  %s: %s\n", dir, first);
    }
    wf_ckpt_close(c);
    return s == WF_OK ? 0 : 1;
}

static int verify_main(void *opts, const wf_strs *pos) {
    const ckpt_opts *o = opts;
    const char *path = pos->items[0];
    char buf[WF_PATH_MAX];
    if (wf_path_join(buf, sizeof buf, path, WF_CKPT_MANIFEST, NULL) != WF_OK) return wf_tool_fail(verify_spec.name);
    if (wf_path_exists(buf) || !wf_path_is_dir(path)) return verify_one(path, o->json);
    if (wf_rundir_path(buf, sizeof buf, path, WF_RUN_CHECKPOINTS) != WF_OK) return wf_tool_fail(verify_spec.name);
    const char *root = wf_path_is_dir(buf) ? buf : path;
    uint64_t *steps;
    size_t n;
    int rc;
    if (wf_ckpt_list(root, &steps, &n) != WF_OK) {
        rc = wf_tool_fail(verify_spec.name);
    } else if (n == 0) {
        rc = verify_one(path, o->json); /* says that manifest.json is missing */
    } else {
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            char dir[4096];
            wf_ckpt_step_dir(dir, sizeof dir, root, steps[i]);
            bad += verify_one(dir, o->json);
        }
        if (bad && !o->json) fprintf(stderr, "weft ckpt verify: %d of %zu checkpoints failed\n", bad, n);
        rc = bad ? 1 : 0;
    }
    free(steps);
    return rc;
}

int wf_cmd_ckpt_verify(int argc, char **argv) {
    ckpt_opts o;
    return wf_tool_run(&verify_spec, &o, sizeof o, argc, argv, verify_main);
}

/* Prints the scalar state (sections as "section.key"), leaving out the
 * config text. */
static void print_state(const char *manifest) {
    json_t *m = json_loads(manifest, 0, NULL);
    const json_t *state = json_object_get(m, "state");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)(uintptr_t)state, key, v) {
        if (strcmp(key, "config") == 0 && json_is_string(v)) {
            const char *t = json_string_value(v);
            int lines = 0;
            for (; *t; t++) lines += *t == '\n';
            printf("  %-28s %d lines of TOML (--show-config prints them)\n", "config", lines);
            continue;
        }
        const char *k2;
        json_t *v2;
        json_t *one = json_object();
        if (json_is_object(v)) json_object_update(one, v);
        else json_object_set(one, "", v);
        json_object_foreach(one, k2, v2) {
            char name[256];
            snprintf(name, sizeof name, "%s%s%s", key, *k2 ? "." : "", k2);
            char *text = json_dumps(v2, JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
            /* Long values (the spike window: one number per step) are cut
             * to one line; --json prints them whole. */
            size_t len = text ? strlen(text) : 0;
            if (len > 100) printf("  %-28s %.72s... (%zu characters; --json prints all)\n", name, text, len);
            else printf("  %-28s %s\n", name, text ? text : "?");
            free(text);
        }
        json_decref(one);
    }
    json_decref(m);
}

static int inspect_main(void *opts, const wf_strs *pos) {
    const ckpt_opts *o = opts;
    wf_ckpt *c;
    if (wf_ckpt_open_path(&c, pos->items[0]) != WF_OK) return wf_tool_fail(inspect_spec.name);
    int rc = 0;
    if (o->json) {
        fputs(wf_ckpt_manifest_text(c), stdout);
    } else if (o->config) {
        const char *cfg;
        if (wf_ckpt_get_str(c, "config", &cfg) == WF_OK) fputs(cfg, stdout);
        else rc = wf_tool_fail(inspect_spec.name);
    } else {
        int w = wf_ckpt_world_size(c);
        printf("checkpoint %s\n", wf_ckpt_path(c));
        printf("  %-28s %" PRIu64 "\n", "step", wf_ckpt_step(c));
        printf("  %-28s weft-checkpoint version %d, written by %d rank%s\n", "format", WF_CKPT_FORMAT_VERSION, w,
               w == 1 ? "" : "s");
        printf("  %-28s %.1f MB in %d data file%s\n", "data", (double)wf_ckpt_data_bytes(c) / 1e6, w,
               w == 1 ? "" : "s");
        print_state(wf_ckpt_manifest_text(c));
        size_t n = wf_ckpt_num_tensors(c);
        uint64_t total = 0;
        printf("  %zu tensors:\n", n);
        printf("    %-52s %-5s %-16s %s\n", "name", "dtype", "shape", "pieces");
        for (size_t i = 0; i < n; i++) {
            wf_ckpt_tensor_desc d;
            wf_ckpt_tensor_at(c, i, &d);
            char shape[96];
            size_t off = (size_t)snprintf(shape, sizeof shape, "[");
            uint64_t numel = 1;
            for (int k = 0; k < d.ndim && off < sizeof shape; k++) {
                off += (size_t)snprintf(shape + off, sizeof shape - off, k ? ", %" PRId64 : "%" PRId64, d.shape[k]);
                numel *= (uint64_t)d.shape[k];
            }
            if (off < sizeof shape) snprintf(shape + off, sizeof shape - off, "]");
            total += numel;
            printf("    %-52s %-5s %-16s %d\n", d.name, d.dtype, shape, d.n_pieces);
        }
        printf("  %" PRIu64 " values in all\n", total);
    }
    wf_ckpt_close(c);
    return rc;
}

int wf_cmd_ckpt_inspect(int argc, char **argv) {
    ckpt_opts o;
    return wf_tool_run(&inspect_spec, &o, sizeof o, argc, argv, inspect_main);
}
