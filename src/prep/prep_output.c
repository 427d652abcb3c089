/* What is done to the output directory on --force: the previous run's
 * files (shards, stats, _prep/) are deleted, and only those. The shards
 * themselves are written by the finish step (prep_step_finish.c). Layout:
 * docs/formats/prep-output.md. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "prep/prep_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"

#define PART_SUFFIX ".part"

/* Parses "<bucket>_<digits>.jsonl.zst[.part]". */
static int parse_shard_name(const char *name, char bucket[8], int64_t *shard, int *part) {
    const char *us = strchr(name, '_');
    if (!us || us == name || (size_t)(us - name) >= 8) return 0;
    const char *p = us + 1;
    int64_t n = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 12) n = n * 10 + (*p++ - '0'), digits++;
    if (digits < 5) return 0;
    if (strcmp(p, ".jsonl.zst") == 0) *part = 0;
    else if (strcmp(p, ".jsonl.zst" PART_SUFFIX) == 0) *part = 1;
    else return 0;
    memcpy(bucket, name, (size_t)(us - name));
    bucket[us - name] = '\0';
    *shard = n;
    return 1;
}

/* Calls fn for each shard file in each subfolder of dir (not _prep). */
typedef wf_status (*shard_fn)(void *ctx, const char *lang, const char *bucket, int64_t shard, int part,
                              const char *path);

static wf_status each_shard(const char *dir, shard_fn fn, void *ctx) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? WF_OK : wf_error(WF_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    wf_status s = WF_OK;
    struct dirent *e;
    while (s == WF_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "_prep") == 0 || strlen(e->d_name) >= 16) continue;
        char sub[WF_PATH_MAX];
        s = wf_path_join(sub, sizeof sub, dir, e->d_name, NULL);
        if (s != WF_OK || !wf_path_is_dir(sub)) continue;
        DIR *sd = opendir(sub);
        if (!sd) continue;
        struct dirent *f;
        while (s == WF_OK && (f = readdir(sd)) != NULL) {
            char bucket[8];
            int64_t shard;
            int part;
            if (!parse_shard_name(f->d_name, bucket, &shard, &part)) continue;
            char path[WF_PATH_MAX];
            s = wf_path_join(path, sizeof path, sub, f->d_name, NULL);
            if (s == WF_OK) s = fn(ctx, e->d_name, bucket, shard, part, path);
        }
        closedir(sd);
    }
    closedir(d);
    return s;
}

static wf_status wipe_one(void *ctx, const char *lang, const char *bucket, int64_t shard, int part,
                          const char *path) {
    (void)ctx, (void)lang, (void)bucket, (void)shard, (void)part;
    if (unlink(path) != 0) return wf_error(WF_ERR_IO, "%s: cannot delete: %s", path, strerror(errno));
    return WF_OK;
}

wf_status wf__prep_output_wipe(const char *dir) {
    WF_TRY(each_shard(dir, wipe_one, NULL));
    char p[WF_PATH_MAX];
    WF_TRY(wf_path_join(p, sizeof p, dir, "_prep", NULL));
    if (wf_path_is_dir(p)) WF_TRY(wf_remove_tree(p));
    WF_TRY(wf_path_join(p, sizeof p, dir, "stats.json", NULL));
    unlink(p);
    WF_TRY(wf_path_join(p, sizeof p, dir, "stats.txt", NULL));
    unlink(p);
    /* Language folders left empty go too. */
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            if (wf_path_join(p, sizeof p, dir, e->d_name, NULL) != WF_OK) {
                wf_error_clear(); /* a name too long to be one of ours: not ours to remove */
                continue;
            }
            if (wf_path_is_dir(p)) rmdir(p); /* fails, harmlessly, unless empty */
        }
        closedir(d);
    }
    return WF_OK;
}

/* ---- vectors ---- */

wf_status wf__prep_u64vec_push(u64vec *v, uint64_t x) {
    WF_TRY(WF_GROW(v->v, v->cap, v->n + 1, 1024));
    v->v[v->n++] = x;
    return WF_OK;
}

void wf__prep_u64vec_free(u64vec *v) {
    free(v->v);
    memset(v, 0, sizeof *v);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void wf__prep_u64vec_sort(u64vec *v) {
    if (v->n) qsort(v->v, v->n, sizeof *v->v, cmp_u64);
}

void wf__prep_u64vec_sort_unique(u64vec *v) {
    if (!v->n) return;
    qsort(v->v, v->n, sizeof *v->v, cmp_u64);
    size_t n = 1;
    for (size_t i = 1; i < v->n; i++)
        if (v->v[i] != v->v[n - 1]) v->v[n++] = v->v[i];
    v->n = n;
}

#define HASHLOG_MAGIC "WFPRPHL1"
