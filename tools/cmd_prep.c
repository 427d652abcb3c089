/* `weft prep`: crawled pages in, clean documents out (include/weft/prep.h,
 * docs/prep.md). This file only gathers the inputs (a directory means every
 * regular file under it, in byte order of their paths, hidden ones left
 * out), runs the pipeline and prints its stats report. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/prep.h"
#include "weft/store.h"
#include "weft/weft.h"

typedef struct {
    char **v;
    size_t n, cap;
} path_list;

static int list_push(path_list *l, const char *p) {
    if (WF_GROW(l->v, l->cap, l->n + 1, 64) != WF_OK) return -1;
    l->v[l->n] = strdup(p);
    return l->v[l->n++] ? 0 : -1;
}

static void list_free(path_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The output directory, resolved, so that expanding an input directory
 * that contains it does not read the run's own files. */
static char out_real[PATH_MAX];

static wf_status expand(const char *path, path_list *out) {
    char real[PATH_MAX];
    if (out_real[0] && realpath(path, real) && strcmp(real, out_real) == 0) return WF_OK;
    if (!wf_path_is_dir(path)) {
        if (list_push(out, path) != 0) return wf_error(WF_ERR_NOMEM, "out of memory");
        return WF_OK;
    }
    DIR *d = opendir(path);
    if (!d) return wf_error(WF_ERR_IO, "%s: cannot list the directory", path);
    path_list here = {0};
    struct dirent *e;
    wf_status s = WF_OK;
    while ((e = readdir(d)) != NULL && s == WF_OK) {
        if (e->d_name[0] == '.') continue;
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (!p) {
            s = wf_error(WF_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(p, n, "%s/%s", path, e->d_name);
        if (list_push(&here, p) != 0) s = wf_error(WF_ERR_NOMEM, "out of memory");
        free(p);
    }
    closedir(d);
    if (here.n) qsort(here.v, here.n, sizeof *here.v, cmp_str);
    for (size_t i = 0; i < here.n && s == WF_OK; i++) s = expand(here.v[i], out);
    list_free(&here);
    return s;
}

static wf_status run_prep(const wf_prep_config *c, const wf_strs *pos) {
    path_list inputs = {0};
    wf_status s = WF_OK;
    if (!c->output || !realpath(c->output, out_real)) out_real[0] = '\0';
    for (size_t i = 0; i < pos->n && s == WF_OK; i++) s = expand(pos->items[i], &inputs);
    if (s == WF_OK && inputs.n == 0) s = wf_error(WF_ERR_CONFIG, "the input directories hold no files");
    if (s == WF_OK) s = wf_prep_run(c, (const char *const *)inputs.v, inputs.n);
    if (s == WF_OK) {
        char path[WF_PATH_MAX];
        char *text = NULL;
        size_t len = 0;
        s = wf_path_join(path, sizeof path, c->output, c->json ? "stats.json" : "stats.txt", NULL);
        if (s == WF_OK) s = wf_store_read(path, &text, &len); /* the output may be in an object store */
        if (s == WF_OK) fwrite(text, 1, len, stdout);
        free(text);
    }
    list_free(&inputs);
    return s;
}

static int prep_main(void *opts, const wf_strs *pos) {
    return run_prep(opts, pos) == WF_OK ? 0 : wf_tool_fail(wf_prep_spec()->name);
}

int wf_cmd_prep(int argc, char **argv) {
    wf_prep_config c;
    return wf_tool_run(wf_prep_spec(), &c, sizeof c, argc, argv, prep_main);
}
