/* weft: one interface over where files live, a local path or an object in
 * an S3-compatible store (`s3://bucket/key`), so that the layers above
 * (data, ckpt, prep) never ask which one they have (docs/storage.md).
 *
 * S3 requests go through libcurl, signed with weft's own AWS Signature
 * Version 4 signer. Configuration is read as the AWS tools read it:
 * AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (or store.endpoint), AWS_REGION /
 * AWS_DEFAULT_REGION, credentials from AWS_ACCESS_KEY_ID /
 * AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or the profile AWS_PROFILE of
 * ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE). Secrets are never
 * logged nor written into messages; the access key id is, so that a
 * refused request says which key was refused.
 *
 * Failures that may pass (HTTP 500, 502, 503, 504, SlowDown, a reset or
 * timed-out connection) are retried with exponential backoff and jitter,
 * store.retries times at most, each retry logged at warn level with the
 * URL. Every call is thread-safe.
 */
#ifndef WEFT_STORE_H
#define WEFT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

/* 1 if `url` names an object store location (s3://), 0 for a local path. */
int wf_store_is_remote(const char *url);

/* Process-wide settings; zero fields keep the defaults (or the environment). */
typedef struct {
    const char *endpoint;  /* http(s)://host[:port]; NULL: AWS_ENDPOINT_URL(_S3), else AWS's */
    const char *region;    /* NULL: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1 */
    int retries;           /* attempts after the first; 0: default 5; -1: none */
    double timeout_s;      /* connect timeout and the longest stall of a transfer; 0: 30 */
    int part_mb;           /* multipart part size in MiB (>= 5); 0: 16 */
    int threads;           /* parts in flight at once; 0: 4 */
    const char *cache_dir; /* local copies of objects (wf_store_local_copy); NULL: WEFT_STORE_CACHE,
                              else $XDG_CACHE_HOME/weft/store, else ~/.cache/weft/store */
    double read_ahead_mb;  /* a shard's ranged reads: block size in MiB, two in memory; 0: 8 */
} wf_store_options;

/* Sets the options (copied). Call before any transfer, from one thread. */
wf_status wf_store_configure(const wf_store_options *o);

typedef struct {
    uint64_t size;
    char xxh3[17];   /* the XXH3-64 weft wrote it with (16 hex digits), "" when unknown */
    char etag[128];  /* S3's ETag (quotes removed), "" for a local file */
} wf_store_stat;

/* Size of an object or file. WF_ERR_NOTFOUND (naming bucket and key, or
 * the path) when it does not exist. */
wf_status wf_store_head(const char *url, wf_store_stat *st);

/* Exactly `len` bytes at `offset` into buf (a ranged GET on S3). Reading
 * past the end is an error naming the object and its size. */
wf_status wf_store_read_range(const char *url, uint64_t offset, size_t len, void *buf);

/* The whole object or file, malloc'ed into *data (NUL-terminated, the NUL
 * not counted in *len); the caller frees it. An object weft wrote carries
 * its XXH3-64 (metadata x-amz-meta-weft-xxh3), checked here. */
wf_status wf_store_read(const char *url, char **data, size_t *len);

/* Writes a whole object or file, complete or absent: an atomic rename
 * locally, one PUT on S3 (whose payload SHA-256 the server checks). */
wf_status wf_store_write(const char *url, const void *data, size_t len);

/* Copies the local file `path` to `url`: a multipart upload with parts in
 * flight concurrently when it is larger than one part. The object appears
 * only when complete; a failed upload is aborted. */
wf_status wf_store_upload(const char *path, const char *url);

/* Copies `url` to the local file `path` (atomically): from S3, ranged GETs
 * of 8 MiB with 10 in flight (s3transfer's defaults), the whole file then
 * checked against the XXH3 the object was written with. */
wf_status wf_store_download(const char *url, const char *path);

/* A local file with the bytes of `url`, malloc'ed into *local (the
 * caller frees it): for a local path, a copy of the path itself; for an
 * object, its copy in the cache directory (<cache>/<host>/<bucket>/<key>),
 * downloaded atomically when absent. A copy already there is used only
 * when it still matches the object: the same size and the XXH3 the object
 * was written with (recomputed over the copy), or for an object weft did
 * not write, the same ETag as when it was downloaded; otherwise it is
 * downloaded again. Ranks and processes may share one cache directory. */
wf_status wf_store_local_copy(const char *url, char **local);

/* The block size of a shard's ranged reads in bytes: store.read_ahead,
 * else WEFT_STORE_READ_AHEAD (MiB), else 8 MiB; whole 4 KiB pages. */
size_t wf_store_read_ahead(void);

/* Where the optional cache keeps its copy of `url`, malloc'ed into *path:
 * <cache>/<host>/<bucket>/<key> when a cache directory was given
 * (store.cache_dir or WEFT_STORE_CACHE), else *path is NULL (no cache).
 * Shards read by ranges fill it as they are read (docs/storage.md). */
wf_status wf_store_cache_path(const char *url, char **path);

/* Removes an object or file; one that is not there is not an error. */
wf_status wf_store_delete(const char *url);

typedef struct {
    char *url;      /* full URL (s3://bucket/key) or path */
    uint64_t size;
} wf_store_entry;

/* Every object (file) whose URL starts with `prefix`, sorted by URL;
 * locally, a prefix that is a directory lists the files below it. The
 * caller frees the array with wf_store_list_free. */
wf_status wf_store_list(const char *prefix, wf_store_entry **entries, size_t *n);
void wf_store_list_free(wf_store_entry *entries, size_t n);

#endif
