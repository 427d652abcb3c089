/* Internal interface of the store layer: the AWS
 * Signature Version 4 signer (sigv4.c), the S3 XML answers (s3_xml.c) and
 * the S3 backend (s3.c) behind the public calls of store.c. */
#ifndef WEFT_STORE_IMPL_H
#define WEFT_STORE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/buf.h"
#include "weft/sha256.h"
#include "weft/status.h"
#include "weft/store.h"

/* ---- Signature Version 4 ---- */
typedef struct {
    const char *name;   /* header: lower case; query: raw (not encoded) */
    const char *value;  /* raw */
} wf__kv;

typedef struct {
    const char *method;          /* GET, PUT, POST, HEAD, DELETE */
    const char *host;            /* host[:port], as sent in the Host header */
    const char *path;            /* raw path, starting with '/' (/bucket/key with path style) */
    const wf__kv *query;         /* raw names and values, any order */
    size_t n_query;
    const wf__kv *headers;       /* other headers to sign (range, content-type, x-amz-meta-...) */
    size_t n_headers;
    const char *payload_sha256;  /* hex of the body's SHA-256 (sent as x-amz-content-sha256) */
    const char *amz_date;        /* YYYYMMDDTHHMMSSZ */
    const char *region;
    const char *service;         /* "s3" */
    const char *access_key;
    const char *secret_key;
    const char *session_token;   /* NULL or "" when none */
} wf__sigv4_req;

/* Appends to `out` the percent-encoding of `s` as SigV4 wants it: every
 * byte but A-Z a-z 0-9 - _ . ~ as %XX (upper-case hex), and '/' kept when
 * keep_slash (object paths) or encoded (query names and values). */
wf_status wf__uri_encode(wf_buf *out, const char *s, int keep_slash);

/* Appends the canonical query string (names and values encoded, sorted by
 * name then value, joined with '&'). Used both for the signature and the URL,
 * so that the server sees exactly what was signed. */
wf_status wf__sigv4_query(wf_buf *out, const wf__kv *q, size_t n);

/* The Authorization header's value for the request. Also returns, in
 * canonical (optional, may be NULL), the canonical request, for tests and
 * WEFT_LOG=debug; never the key. */
wf_status wf__sigv4_sign(const wf__sigv4_req *r, wf_buf *authorization, wf_buf *canonical);

/* ---- S3 XML answers ---- */
typedef struct {
    char *key;      /* object key, entities decoded */
    uint64_t size;
} wf__s3_object;

typedef struct {
    wf__s3_object *objects;
    size_t n, cap;
    char *next_token;  /* NextContinuationToken when IsTruncated, else NULL */
    int truncated;
} wf__s3_listing;

/* Parses a ListObjectsV2 answer, appending its objects to l (so pages
 * accumulate) and replacing next_token. WF_ERR_FORMAT on a malformed body. */
wf_status wf__s3_parse_list(const char *xml, size_t len, wf__s3_listing *l);
void wf__s3_listing_free(wf__s3_listing *l);

/* An S3 error answer's <Code> and <Message> (entities decoded, bounded,
 * empty when absent). Returns 1 when the body looked like an <Error>. */
int wf__s3_parse_error(const char *xml, size_t len, char *code, size_t code_cap, char *msg, size_t msg_cap);

/* The text of the first <tag>...</tag> at or after *pos, entities decoded,
 * malloc'ed into *text; *pos moves past the closing tag. Returns 1 if
 * found, 0 if not, -1 on a malformed element or no memory. */
int wf__xml_next(const char *xml, size_t len, size_t *pos, const char *tag, char **text);

/* ---- S3 backend (s3.c) ---- */
typedef struct {
    char *bucket;
    char *key;   /* may be "" (the bucket itself, or a listing of it) */
} wf__s3_url;
wf_status wf__s3_url_parse(const char *url, wf__s3_url *u);
void wf__s3_url_free(wf__s3_url *u);

/* The cache directory's root and the endpoint's host[:port] (copies of
 * objects live under <root>/<host>/<bucket>/<key>); *given (may be NULL)
 * says whether the directory was given (store.cache_dir, WEFT_STORE_CACHE)
 * rather than the default. */
wf_status wf__store_cache_root(char *root, size_t cap, char *host, size_t host_cap, int *given);

wf_status wf__s3_head(const char *url, wf_store_stat *st);
wf_status wf__s3_get(const char *url, uint64_t offset, uint64_t len, int ranged, wf_buf *out, char *meta_xxh3,
                     size_t meta_cap);
wf_status wf__s3_put(const char *url, const void *data, size_t len);
wf_status wf__s3_upload_file(const char *url, const char *path);
/* Object to local file: 10 ranged GETs of 8 MiB in flight (s3transfer's
 * defaults), written in place into a temporary file, checked against the
 * object's XXH3 metadata, renamed into place; with `durable`, fsync'ed
 * first (a cache copy is not: it is checked at every use instead). */
wf_status wf__s3_download_file(const char *url, const char *path, int durable);
wf_status wf__s3_delete(const char *url);
wf_status wf__s3_list(const char *prefix_url, wf_store_entry **out, size_t *n);

#endif
