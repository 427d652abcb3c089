/* `weft store ls|cp|cat|rm|stat`: the store layer (weft/store.h) by hand:
 * list a prefix, copy between local paths and s3:// objects (a multipart
 * upload for a large file), print an object or a byte range of it, remove
 * objects, show an object's size. For checking a bucket's contents and
 * credentials before a long job, and for moving a dataset or checkpoint in
 * or out of a store (docs/storage.md). */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/store.h"

typedef struct {
    char *endpoint, *region;
    int64_t retries, part_mb, threads, offset, length;
    double timeout_s;
    int json;
} store_opts;

#define STORE_OPTS                                                                                                   \
    {"store.endpoint", "endpoint", WF_OPT_STR, offsetof(store_opts, endpoint), NULL, WF_NO_RANGE,                   \
     "S3 endpoint http(s)://host[:port] (default: AWS_ENDPOINT_URL, else AWS's endpoint of the region)"},            \
        {"store.region", "region", WF_OPT_STR, offsetof(store_opts, region), NULL, WF_NO_RANGE,                     \
         "region (default: AWS_REGION, else us-east-1)"},                                                            \
        {"store.retries", NULL, WF_OPT_INT, offsetof(store_opts, retries), "5", 0, 100,                             \
         "attempts after the first for answers that may pass (5xx, SlowDown, broken connections)"},                  \
        {"store.timeout_s", NULL, WF_OPT_FLOAT, offsetof(store_opts, timeout_s), "30", 0.1, 3600,                    \
         "connect timeout and the longest a transfer may stall, seconds"},                                          \
        {"store.part_mb", NULL, WF_OPT_INT, offsetof(store_opts, part_mb), "16", 5, 5120, "multipart part size, MiB"}, \
    {                                                                                                                \
        "store.threads", NULL, WF_OPT_INT, offsetof(store_opts, threads), "4", 1, 64, "parts in flight at once"    \
    }

static const wf_opt plain_table[] = {STORE_OPTS};
static const wf_opt ls_table[] = {
    STORE_OPTS,
    {"json", NULL, WF_OPT_BOOL, offsetof(store_opts, json), "false", WF_NO_RANGE,
     "print one JSON object per object: url, size"},
};
static const wf_opt cat_table[] = {
    STORE_OPTS,
    {"offset", NULL, WF_OPT_INT, offsetof(store_opts, offset), "0", 0, 9e18, "first byte to print"},
    {"length", NULL, WF_OPT_INT, offsetof(store_opts, length), "-1", -1, 9e18,
     "bytes to print from --offset (-1: to the end); a range is one ranged GET"},
};

#define N(t) (sizeof t / sizeof *t)
static const wf_cmd_spec ls_spec = {"store ls", "weft store ls PREFIX [--json] [--store.KEY=VALUE]",
                                    "Lists every object (file) whose URL starts with PREFIX, an s3://bucket/prefix "
                                    "or a local path, with its size in bytes, sorted by name.",
                                    ls_table, N(ls_table), 1, 1, 0};
static const wf_cmd_spec cp_spec = {"store cp", "weft store cp SRC DST [--store.KEY=VALUE]",
                                    "Copies SRC to DST, each a local path or an s3:// URL. A local file larger than "
                                    "one part (store.part_mb) goes up as a multipart upload with store.threads parts "
                                    "in flight; the object appears only when complete. Downloads are atomic.",
                                    plain_table, N(plain_table), 2, 2, 0};
static const wf_cmd_spec cat_spec = {"store cat", "weft store cat URL [--offset N] [--length N] [--store.KEY=VALUE]",
                                     "Writes an object (or a byte range of it) to standard output. A whole object "
                                     "weft wrote is checked against the XXH3 it was written with.",
                                     cat_table, N(cat_table), 1, 1, 0};
static const wf_cmd_spec rm_spec = {"store rm", "weft store rm URL... [--store.KEY=VALUE]",
                                    "Removes objects (files). One that is not there is not an error.",
                                    plain_table, N(plain_table), 1, -1, 0};
static const wf_cmd_spec stat_spec = {"store stat", "weft store stat URL [--store.KEY=VALUE]",
                                      "Prints an object's size in bytes; exits 1 naming the bucket and key when it "
                                      "is not there.",
                                      plain_table, N(plain_table), 1, 1, 0};

static int configure(const char *cmd, const store_opts *o) {
    wf_store_options so = {o->endpoint, o->region, o->retries ? (int)o->retries : -1, o->timeout_s, (int)o->part_mb,
                           (int)o->threads, NULL};
    return wf_store_configure(&so) == WF_OK ? 0 : wf_tool_fail(cmd);
}

static int ls_body(void *p, const wf_strs *pos) {
    store_opts *o = p;
    if (configure("store ls", o)) return 1;
    wf_store_entry *e = NULL;
    size_t n = 0;
    if (wf_store_list(pos->items[0], &e, &n) != WF_OK) return wf_tool_fail("store ls");
    for (size_t i = 0; i < n; i++) {
        if (o->json) {
            printf("{\"url\": \"");
            for (const char *c = e[i].url; *c; c++) {
                if (*c == '"' || *c == '\\') printf("\\%c", *c);
                else if ((unsigned char)*c < 32) printf("\\u%04x", *c);
                else putchar(*c);
            }
            printf("\", \"size\": %" PRIu64 "}\n", e[i].size);
        } else {
            printf("%12" PRIu64 "  %s\n", e[i].size, e[i].url);
        }
    }
    wf_store_list_free(e, n);
    return 0;
}

static int cp_body(void *p, const wf_strs *pos) {
    store_opts *o = p;
    if (configure("store cp", o)) return 1;
    const char *src = pos->items[0], *dst = pos->items[1];
    wf_status s;
    if (!wf_store_is_remote(src)) {
        s = wf_store_upload(src, dst);
    } else if (!wf_store_is_remote(dst)) {
        s = wf_store_download(src, dst);
    } else {  /* object to object, through memory */
        char *data = NULL;
        size_t len = 0;
        s = wf_store_read(src, &data, &len);
        if (s == WF_OK) s = wf_store_write(dst, data, len);
        free(data);
    }
    return s == WF_OK ? 0 : wf_tool_fail("store cp");
}

static int cat_body(void *p, const wf_strs *pos) {
    store_opts *o = p;
    if (configure("store cat", o)) return 1;
    const char *url = pos->items[0];
    char *data = NULL;
    size_t len = 0;
    wf_status s;
    if (o->offset == 0 && o->length < 0) {
        s = wf_store_read(url, &data, &len);
    } else {
        uint64_t want = (uint64_t)o->length;
        s = WF_OK;
        if (o->length < 0) {
            wf_store_stat st;
            s = wf_store_head(url, &st);
            if (s == WF_OK && st.size < (uint64_t)o->offset)
                s = wf_error(WF_ERR_RANGE, "%s: --offset %" PRId64 " is past its end (%" PRIu64 " bytes)", url,
                             o->offset, st.size);
            if (s == WF_OK) want = st.size - (uint64_t)o->offset;
        }
        len = (size_t)want;
        data = s == WF_OK ? malloc(len ? len : 1) : NULL;
        if (s == WF_OK && !data) s = wf_error(WF_ERR_NOMEM, "out of memory for %zu bytes", len);
        if (s == WF_OK) s = wf_store_read_range(url, (uint64_t)o->offset, len, data);
    }
    if (s == WF_OK && fwrite(data, 1, len, stdout) != len) s = wf_error(WF_ERR_IO, "writing to standard output failed");
    free(data);
    return s == WF_OK ? 0 : wf_tool_fail("store cat");
}

static int rm_body(void *p, const wf_strs *pos) {
    store_opts *o = p;
    if (configure("store rm", o)) return 1;
    for (size_t i = 0; i < pos->n; i++)
        if (wf_store_delete(pos->items[i]) != WF_OK) return wf_tool_fail("store rm");
    return 0;
}

static int stat_body(void *p, const wf_strs *pos) {
    store_opts *o = p;
    if (configure("store stat", o)) return 1;
    wf_store_stat st;
    if (wf_store_head(pos->items[0], &st) != WF_OK) return wf_tool_fail("store stat");
    printf("%" PRIu64 "\n", st.size);
    return 0;
}

int wf_cmd_store_ls(int argc, char **argv) {
    store_opts o;
    return wf_tool_run(&ls_spec, &o, sizeof o, argc, argv, ls_body);
}
int wf_cmd_store_cp(int argc, char **argv) {
    store_opts o;
    return wf_tool_run(&cp_spec, &o, sizeof o, argc, argv, cp_body);
}
int wf_cmd_store_cat(int argc, char **argv) {
    store_opts o;
    return wf_tool_run(&cat_spec, &o, sizeof o, argc, argv, cat_body);
}
int wf_cmd_store_rm(int argc, char **argv) {
    store_opts o;
    return wf_tool_run(&rm_spec, &o, sizeof o, argc, argv, rm_body);
}
int wf_cmd_store_stat(int argc, char **argv) {
    store_opts o;
    return wf_tool_run(&stat_spec, &o, sizeof o, argc, argv, stat_body);
}
