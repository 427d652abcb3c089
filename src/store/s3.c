/* The S3 backend: requests over libcurl, each signed (sigv4.c) with the
 * payload's SHA-256; the configuration read as the AWS tools read it
 * (environment, then ~/.aws/credentials); retries of what may pass (5xx,
 * SlowDown, broken connections) with exponential backoff and full jitter;
 * errors that name the URL, the endpoint and the access key id (never the
 * secret). Multipart uploads keep store.threads parts in flight and are
 * aborted when they fail, so an object is there complete or not at all.
 *
 * One curl easy handle per thread, reset before each request: its
 * connection to the endpoint is reused by the thread's next request (a
 * shuffled loader's ranged GETs of a few kilobytes would otherwise pay a
 * connect, and over TLS a handshake, each). Handles are never shared
 * between threads, so every call stays thread-safe; a thread's handle is
 * freed when the thread ends. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/thread.h"

/* ---- configuration ---- */

typedef struct {
    char scheme[8];        /* http or https */
    char host[256];        /* host[:port] of the endpoint */
    int aws;               /* no endpoint given: AWS, virtual-hosted addressing */
    char endpoint[272];    /* for messages: scheme://host */
    char region[64];
    char access_key[128];
    char secret_key[256];
    char session_token[2048];
    char profile[1100];    /* where the credentials came from, for messages */
    int have_creds;
    int retries;
    double timeout_s;
    size_t part_bytes;
    int threads;
} s3_config;

static s3_config g_cfg;
static wf_store_options g_opts;
static char g_opt_endpoint[300], g_opt_region[64], g_opt_cache[1024];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static wf_status g_init_status;
static char g_init_msg[512];

wf_status wf_store_configure(const wf_store_options *o) {
    g_opts = *o;
    if (o->endpoint) snprintf(g_opt_endpoint, sizeof g_opt_endpoint, "%s", o->endpoint);
    if (o->region) snprintf(g_opt_region, sizeof g_opt_region, "%s", o->region);
    g_opts.endpoint = o->endpoint ? g_opt_endpoint : NULL;
    g_opts.region = o->region ? g_opt_region : NULL;
    if (o->cache_dir) snprintf(g_opt_cache, sizeof g_opt_cache, "%s", o->cache_dir);
    g_opts.cache_dir = o->cache_dir ? g_opt_cache : NULL;
    if (o->part_mb && o->part_mb < 5)
        return wf_error(WF_ERR_CONFIG, "store.part_mb = %d: S3 parts are at least 5 MiB", o->part_mb);
    if (o->retries < -1) return wf_error(WF_ERR_CONFIG, "store.retries = %d: must be >= 0", o->retries);
    if (o->timeout_s < 0) return wf_error(WF_ERR_CONFIG, "store.timeout_s = %g: must be > 0", o->timeout_s);
    if (o->read_ahead_mb < 0 || o->read_ahead_mb > 1024 || (o->read_ahead_mb > 0 && o->read_ahead_mb * 1048576 < 4096))
        return wf_error(WF_ERR_CONFIG, "store.read_ahead = %g: want 4 KiB to 1024 MiB (in MiB)", o->read_ahead_mb);
    return WF_OK;
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

size_t wf_store_read_ahead(void) {
    double mb = g_opts.read_ahead_mb;
    if (!(mb > 0) && env("WEFT_STORE_READ_AHEAD")) { /* the commands without store options (eval, data) */
        mb = strtod(env("WEFT_STORE_READ_AHEAD"), NULL);
        if (!(mb * 1048576 >= 4096 && mb <= 1024)) {
            WF_WARN("store: WEFT_STORE_READ_AHEAD=%s is not 4 KiB to 1024 MiB (in MiB): using 8",
                    env("WEFT_STORE_READ_AHEAD"));
            mb = 8;
        }
    }
    if (!(mb > 0)) mb = 8;
    return (size_t)(mb * 1048576) / 4096 * 4096; /* whole pages: whole tokens of either width */
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = 0;
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t') i++;
    memmove(s, s + i, n - i + 1);
}

/* Credentials of one profile of an AWS credentials file (INI). */
static int read_profile(const char *path, const char *profile, s3_config *c) {
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    char line[4096];
    int in = 0, found = 0;
    while (fgets(line, sizeof line, fp)) {
        trim(line);
        if (line[0] == '#' || line[0] == ';' || !line[0]) continue;
        if (line[0] == '[') {
            char *end = strchr(line, ']');
            if (end) *end = 0;
            char *name = line + 1;
            trim(name);
            if (strncmp(name, "profile ", 8) == 0) name += 8, trim(name);
            in = strcmp(name, profile) == 0;
            found |= in;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq) continue;
        *eq = 0;
        char *k = line, *v = eq + 1;
        trim(k), trim(v);
        if (strcmp(k, "aws_access_key_id") == 0) snprintf(c->access_key, sizeof c->access_key, "%s", v);
        else if (strcmp(k, "aws_secret_access_key") == 0) snprintf(c->secret_key, sizeof c->secret_key, "%s", v);
        else if (strcmp(k, "aws_session_token") == 0) snprintf(c->session_token, sizeof c->session_token, "%s", v);
        else if (strcmp(k, "region") == 0 && !c->region[0]) snprintf(c->region, sizeof c->region, "%s", v);
    }
    fclose(fp);
    return found;
}

static void config_init(void) {
    s3_config *c = &g_cfg;
    g_init_status = WF_OK;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        g_init_status = WF_ERR_INTERNAL;
        snprintf(g_init_msg, sizeof g_init_msg, "libcurl failed to initialise");
        return;
    }
    const char *region = g_opts.region ? g_opts.region : env("AWS_REGION") ? env("AWS_REGION") : env("AWS_DEFAULT_REGION");
    if (region) snprintf(c->region, sizeof c->region, "%s", region);

    const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
    if (ak && sk) {
        snprintf(c->access_key, sizeof c->access_key, "%s", ak);
        snprintf(c->secret_key, sizeof c->secret_key, "%s", sk);
        if (env("AWS_SESSION_TOKEN")) snprintf(c->session_token, sizeof c->session_token, "%s", env("AWS_SESSION_TOKEN"));
        snprintf(c->profile, sizeof c->profile, "the environment (AWS_ACCESS_KEY_ID)");
        c->have_creds = 1;
    } else {
        const char *profile = env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
        char path[1024];
        if (env("AWS_SHARED_CREDENTIALS_FILE")) snprintf(path, sizeof path, "%s", env("AWS_SHARED_CREDENTIALS_FILE"));
        else snprintf(path, sizeof path, "%s/.aws/credentials", env("HOME") ? env("HOME") : "");
        if (read_profile(path, profile, c) && c->access_key[0] && c->secret_key[0]) {
            snprintf(c->profile, sizeof c->profile, "profile '%.100s' of %.900s", profile, path);
            c->have_creds = 1;
        } else {
            snprintf(c->profile, sizeof c->profile, "profile '%.100s' of %.900s", profile, path);
        }
    }
    if (!c->region[0]) snprintf(c->region, sizeof c->region, "us-east-1");

    const char *ep = g_opts.endpoint ? g_opts.endpoint
                     : env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3") : env("AWS_ENDPOINT_URL");
    if (ep) {
        const char *rest = NULL;
        if (strncmp(ep, "http://", 7) == 0) snprintf(c->scheme, sizeof c->scheme, "http"), rest = ep + 7;
        else if (strncmp(ep, "https://", 8) == 0) snprintf(c->scheme, sizeof c->scheme, "https"), rest = ep + 8;
        size_t hn = rest ? strcspn(rest, "/") : 0;
        if (!rest || hn == 0 || hn >= sizeof c->host || (rest[hn] && strcmp(rest + hn, "/") != 0)) {
            g_init_status = WF_ERR_CONFIG;
            snprintf(g_init_msg, sizeof g_init_msg,
                     "store endpoint '%.200s' (store.endpoint or AWS_ENDPOINT_URL): want http(s)://host[:port]", ep);
            return;
        }
        memcpy(c->host, rest, hn);
        c->host[hn] = 0;
    } else {
        c->aws = 1;
        snprintf(c->scheme, sizeof c->scheme, "https");
        snprintf(c->host, sizeof c->host, "s3.%.63s.amazonaws.com", c->region);
    }
    snprintf(c->endpoint, sizeof c->endpoint, "%.7s://%.255s", c->scheme, c->host);
    c->retries = g_opts.retries == -1 ? 0 : g_opts.retries ? g_opts.retries : 5;
    c->timeout_s = g_opts.timeout_s > 0 ? g_opts.timeout_s : 30;
    c->part_bytes = (size_t)(g_opts.part_mb ? g_opts.part_mb : 16) << 20;
    c->threads = g_opts.threads > 0 ? g_opts.threads : 4;
}

static wf_status config_get(const s3_config **out) {
    pthread_once(&g_once, config_init);
    if (g_init_status != WF_OK) return wf_error(g_init_status, "%s", g_init_msg);
    if (!g_cfg.have_creds)
        return wf_error(WF_ERR_CONFIG,
                        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put them in %s "
                        "(AWS_PROFILE picks the profile)",
                        g_cfg.profile);
    *out = &g_cfg;
    return WF_OK;
}

wf_status wf__store_cache_root(char *out, size_t cap, char *host, size_t host_cap, int *given) {
    pthread_once(&g_once, config_init);
    if (g_init_status != WF_OK) return wf_error(g_init_status, "%s", g_init_msg);
    const char *dir = g_opts.cache_dir ? g_opts.cache_dir : env("WEFT_STORE_CACHE");
    if (given) *given = dir != NULL;
    if (dir) snprintf(out, cap, "%s", dir);
    else if (env("XDG_CACHE_HOME")) snprintf(out, cap, "%s/weft/store", env("XDG_CACHE_HOME"));
    else snprintf(out, cap, "%s/.cache/weft/store", env("HOME") ? env("HOME") : "/tmp");
    snprintf(host, host_cap, "%s", g_cfg.host);
    return WF_OK;
}

/* ---- URLs ---- */

wf_status wf__s3_url_parse(const char *url, wf__s3_url *u) {
    memset(u, 0, sizeof *u);
    if (strncmp(url, "s3://", 5) != 0) return wf_error(WF_ERR_INVALID, "%s: not an s3:// URL", url);
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bn = slash ? (size_t)(slash - b) : strlen(b);
    if (bn < 1 || bn > 63)
        return wf_error(WF_ERR_INVALID, "%s: want s3://bucket/key (the bucket name is 1 to 63 characters)", url);
    for (size_t i = 0; i < bn; i++) {
        char ch = b[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_'))
            return wf_error(WF_ERR_INVALID, "%s: bucket name '%.*s' has '%c' (lower-case letters, digits, '-', '.')",
                            url, (int)bn, b, ch);
    }
    u->bucket = strndup(b, bn);
    u->key = strdup(slash ? slash + 1 : "");
    if (!u->bucket || !u->key) {
        wf__s3_url_free(u);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    return WF_OK;
}

void wf__s3_url_free(wf__s3_url *u) {
    free(u->bucket);
    free(u->key);
    memset(u, 0, sizeof *u);
}

/* ---- one request, with retries ---- */

typedef struct {
    const char *method;
    const char *url;             /* for messages */
    const wf__s3_url *u;
    const wf__kv *query;
    size_t n_query;
    const wf__kv *headers;       /* signed and sent */
    size_t n_headers;
    const void *body;
    size_t body_len;
    /* answer */
    long status;
    wf_buf resp;                 /* body (also of errors) */
    char etag[128];
    char meta_xxh3[40];
    uint64_t content_length;
    int have_length;
} s3_req;

typedef struct {
    const char *p;
    size_t left;
} body_reader;

static size_t read_cb(char *dst, size_t size, size_t n, void *ctx) {
    body_reader *r = ctx;
    size_t take = size * n < r->left ? size * n : r->left;
    memcpy(dst, r->p, take);
    r->p += take, r->left -= take;
    return take;
}

static size_t write_cb(char *src, size_t size, size_t n, void *ctx) {
    wf_buf *b = ctx;
    if (wf_buf_append(b, src, size * n) != WF_OK) return 0;
    return size * n;
}

static void header_value(const char *line, size_t n, char *out, size_t cap) {
    const char *v = memchr(line, ':', n);
    if (!v) return;
    v++;
    size_t len = n - (size_t)(v - line);
    while (len && (*v == ' ' || *v == '\t')) v++, len--;
    while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' ')) len--;
    if (len && v[0] == '"' && v[len - 1] == '"' && len >= 2) v++, len -= 2;  /* ETag quotes */
    if (len >= cap) len = cap - 1;
    memcpy(out, v, len);
    out[len] = 0;
}

static size_t header_cb(char *line, size_t size, size_t n, void *ctx) {
    s3_req *r = ctx;
    size_t len = size * n;
    if (len > 5 && strncasecmp(line, "HTTP/", 5) == 0) {  /* a new answer (after 100 Continue): start over */
        r->etag[0] = r->meta_xxh3[0] = 0;
        r->have_length = 0;
    } else if (len > 5 && strncasecmp(line, "etag:", 5) == 0) {
        header_value(line, len, r->etag, sizeof r->etag);
    } else if (len > 20 && strncasecmp(line, "x-amz-meta-weft-xxh3:", 21) == 0) {
        header_value(line, len, r->meta_xxh3, sizeof r->meta_xxh3);
    } else if (len > 15 && strncasecmp(line, "content-length:", 15) == 0) {
        char v[32] = "";
        header_value(line, len, v, sizeof v);
        r->content_length = strtoull(v, NULL, 10);
        r->have_length = 1;
        /* A body's room at once, not by doubling (each doubling copies
         * what came so far: 2x the bytes of a large whole GET). A failed
         * reservation is not an error: the buffer still grows. */
        if (strcmp(r->method, "GET") == 0 && r->content_length > r->resp.cap && r->content_length < ((uint64_t)1 << 34) &&
            wf_buf_reserve(&r->resp, (size_t)r->content_length) != WF_OK)
            wf_error_clear();
    }
    return len;
}

static uint64_t jitter_state(void) {
    static _Thread_local uint64_t x;
    if (!x) x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&x ^ 0x9E3779B97F4A7C15ull;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
}

/* Whether an answer may pass when sent again. */
static int retryable(CURLcode cc, long status, const char *code) {
    if (cc != CURLE_OK)
        return cc == CURLE_COULDNT_CONNECT || cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR ||
               cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_PARTIAL_FILE || cc == CURLE_GOT_NOTHING ||
               cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_HTTP2 || cc == CURLE_HTTP2_STREAM;
    return status == 500 || status == 502 || status == 503 || status == 504 || strcmp(code, "SlowDown") == 0 ||
           strcmp(code, "RequestTimeout") == 0 || strcmp(code, "InternalError") == 0;
}

/* The calling thread's curl handle, reset (its connections kept). */
static pthread_key_t g_handle_key;
static pthread_once_t g_handle_once = PTHREAD_ONCE_INIT;
static int g_handle_key_ok;

static void handle_free(void *h) { curl_easy_cleanup(h); }
static void handle_key_init(void) { g_handle_key_ok = pthread_key_create(&g_handle_key, handle_free) == 0; }

static CURL *thread_handle(void) {
    pthread_once(&g_handle_once, handle_key_init);
    CURL *h = g_handle_key_ok ? pthread_getspecific(g_handle_key) : NULL;
    if (h) {
        curl_easy_reset(h);
        return h;
    }
    h = curl_easy_init();
    if (h && (!g_handle_key_ok || pthread_setspecific(g_handle_key, h) != 0)) {
        curl_easy_cleanup(h);
        h = NULL;
    }
    return h;
}

/* One attempt; *cc and r->status say how it went. */
static wf_status attempt(const s3_config *c, s3_req *r, CURLcode *cc, char *curl_err) {
    wf_buf path = {0}, query = {0}, url = {0}, auth = {0}, hline = {0};
    struct curl_slist *hl = NULL;
    CURL *h = NULL;
    wf_status s = WF_OK;
    char host[400], amz_date[17], payload[65];
    unsigned char digest[32];

    if (c->aws) snprintf(host, sizeof host, "%s.%s", r->u->bucket, c->host);
    else snprintf(host, sizeof host, "%s", c->host);
    if (!c->aws) wf_buf_printf(&path, "/%s", r->u->bucket);
    wf_buf_printf(&path, "/%s", r->u->key);
    if (!c->aws && !r->u->key[0]) path.data[--path.len] = 0;  /* bucket operations: /bucket, not /bucket/ */
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    wf_sha256(r->body ? r->body : "", r->body_len, digest);
    wf_hex(digest, 32, payload);
    wf__sigv4_req sr = {r->method, host, path.data, r->query, r->n_query, r->headers, r->n_headers, payload,
                        amz_date, c->region, "s3", c->access_key, c->secret_key, c->session_token};
    s = path.failed ? wf_error(WF_ERR_NOMEM, "out of memory") : wf__sigv4_sign(&sr, &auth, NULL);
    if (s != WF_OK) goto done;
    wf_buf_printf(&url, "%s://%s", c->scheme, host);
    wf__uri_encode(&url, path.data, 1);
    wf__sigv4_query(&query, r->query, r->n_query);
    if (query.len) wf_buf_printf(&url, "?%s", query.data);

    h = thread_handle();
    if (!h || url.failed) {
        s = wf_error(WF_ERR_NOMEM, "out of memory (curl handle)");
        goto done;
    }
#define ADD_HEADER(...)                                          \
    do {                                                         \
        hline.len = 0;                                           \
        wf_buf_printf(&hline, __VA_ARGS__);                      \
        struct curl_slist *n_ = curl_slist_append(hl, hline.data); \
        if (n_) hl = n_;                                         \
    } while (0)
    ADD_HEADER("Authorization: %s", auth.data);
    ADD_HEADER("x-amz-date: %s", amz_date);
    ADD_HEADER("x-amz-content-sha256: %s", payload);
    if (c->session_token[0]) ADD_HEADER("x-amz-security-token: %s", c->session_token);
    for (size_t i = 0; i < r->n_headers; i++) ADD_HEADER("%s: %s", r->headers[i].name, r->headers[i].value);
    ADD_HEADER("Expect:");
#undef ADD_HEADER
    body_reader br = {r->body, r->body_len};
    curl_easy_setopt(h, CURLOPT_URL, url.data);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (env("AWS_CA_BUNDLE")) curl_easy_setopt(h, CURLOPT_CAINFO, env("AWS_CA_BUNDLE")); /* as the AWS tools */
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)(c->timeout_s + 0.999));
    /* Larger socket reads than libcurl's 16 KiB: fewer callbacks per
     * megabyte (bench/README.md, "Object storage"). */
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r->resp);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, &br);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
    r->resp.len = 0; /* keeps the room a caller reserved (a ranged GET's size) */
    r->resp.failed = 0;
    r->status = 0;
    r->etag[0] = r->meta_xxh3[0] = 0;
    r->have_length = 0;
    curl_err[0] = 0;
    *cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->resp.failed) s = wf_error(WF_ERR_NOMEM, "%s %s: out of memory for the answer", r->method, r->url);
done:
    curl_slist_free_all(hl);
    if (h) curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL); /* the buffer is the caller's stack */
    if (auth.data) memset(auth.data, 0, auth.len);
    wf_buf_free(&path), wf_buf_free(&query), wf_buf_free(&url), wf_buf_free(&auth), wf_buf_free(&hline);
    return s;
}

/* The final error of a request that did not succeed. */
static wf_status request_error(const s3_config *c, const s3_req *r, CURLcode cc, const char *curl_err,
                               const char *code, const char *msg, int attempts) {
    if (cc != CURLE_OK)
        return wf_error(WF_ERR_IO, "%s %s: no answer from %s after %d attempt%s: %s; check that the server is up "
                        "(store.endpoint, AWS_ENDPOINT_URL) or raise store.retries / store.timeout_s",
                        r->method, r->url, c->endpoint, attempts, attempts == 1 ? "" : "s",
                        curl_err[0] ? curl_err : curl_easy_strerror(cc));
    if (r->status == 404 || strcmp(code, "NoSuchBucket") == 0 || strcmp(code, "NoSuchKey") == 0 ||
        strcmp(code, "NoSuchUpload") == 0) {
        if (strcmp(code, "NoSuchBucket") == 0)
            return wf_error(WF_ERR_NOTFOUND, "%s: no bucket '%s' at %s", r->url, r->u->bucket, c->endpoint);
        if (strcmp(code, "NoSuchUpload") == 0)
            return wf_error(WF_ERR_NOTFOUND, "%s: the multipart upload is gone (aborted?) at %s", r->url, c->endpoint);
        return wf_error(WF_ERR_NOTFOUND, "%s: no object '%s' in bucket '%s' at %s", r->url, r->u->key, r->u->bucket,
                        c->endpoint);
    }
    if (r->status == 403 || r->status == 401)
        return wf_error(WF_ERR_CONFIG,
                        "%s %s: refused by %s (HTTP %ld %s%s%s) for access key id '%s' (from %s): check the key id, "
                        "the secret key and the region (%s)",
                        r->method, r->url, c->endpoint, r->status, code[0] ? code : "Forbidden", msg[0] ? ": " : "",
                        msg, c->access_key, c->profile, c->region);
    if (r->status == 416)
        return wf_error(WF_ERR_RANGE, "%s %s: the range asked for is past the object's end", r->method, r->url);
    return wf_error(WF_ERR_IO, "%s %s: HTTP %ld from %s%s%s%s%s%s after %d attempt%s%s", r->method, r->url, r->status,
                    c->endpoint, code[0] ? " (" : "", code, msg[0] ? ": " : "", msg, code[0] ? ")" : "", attempts,
                    attempts == 1 ? "" : "s",
                    retryable(CURLE_OK, r->status, code) ? "; raise store.retries if the server is busy" : "");
}

static wf_status s3_request(s3_req *r) {
    const s3_config *c;
    WF_TRY(config_get(&c));
    double delay = 0.1;
    for (int a = 0;; a++) {
        CURLcode cc = CURLE_OK;
        char curl_err[CURL_ERROR_SIZE] = "", code[64] = "", msg[256] = "";
        WF_TRY(attempt(c, r, &cc, curl_err));
        if (cc == CURLE_OK && r->status >= 200 && r->status < 300) {
            /* CompleteMultipartUpload may answer 200 with an <Error> body. */
            if (!(strcmp(r->method, "POST") == 0 && wf__s3_parse_error(r->resp.data, r->resp.len, code, sizeof code,
                                                                        msg, sizeof msg)))
                return WF_OK;
        } else if (cc == CURLE_OK) {
            wf__s3_parse_error(r->resp.data, r->resp.len, code, sizeof code, msg, sizeof msg);
        }
        if (!retryable(cc, r->status, code) || a >= c->retries)
            return request_error(c, r, cc, curl_err, code, msg, a + 1);
        /* Full jitter: a uniform wait in [0, delay], delay doubling up to 20 s. */
        double wait = delay * (double)(jitter_state() % 1000000) / 1e6;
        if (cc != CURLE_OK)
            WF_WARN("s3: %s %s: %s; retry %d of %d in %.2f s", r->method, r->url,
                    curl_err[0] ? curl_err : curl_easy_strerror(cc), a + 1, c->retries, wait);
        else
            WF_WARN("s3: %s %s: HTTP %ld%s%s; retry %d of %d in %.2f s", r->method, r->url, r->status,
                    code[0] ? " " : "", code, a + 1, c->retries, wait);
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
        delay = delay * 2 > 20 ? 20 : delay * 2;
    }
}

static void req_free(s3_req *r) { wf_buf_free(&r->resp); }

/* ---- operations ---- */

wf_status wf__s3_head(const char *url, wf_store_stat *st) {
    wf__s3_url u;
    WF_TRY(wf__s3_url_parse(url, &u));
    s3_req r = {.method = "HEAD", .url = url, .u = &u};
    wf_status s = s3_request(&r);
    if (s == WF_ERR_NOTFOUND && u.key[0]) {
        /* A HEAD answer has no body to say whether the bucket or the key
         * is missing: ask about the bucket. */
        char none[1] = "";
        wf__s3_url b = {u.bucket, none};
        s3_req rb = {.method = "HEAD", .url = url, .u = &b};
        const s3_config *c;
        if (s3_request(&rb) == WF_ERR_NOTFOUND && config_get(&c) == WF_OK)
            wf_error(WF_ERR_NOTFOUND, "%s: no bucket '%s' at %s", url, u.bucket, c->endpoint);
        else
            wf_error(WF_ERR_NOTFOUND, "%s: no object '%s' in bucket '%s' at %s", url, u.key, u.bucket,
                     g_cfg.endpoint);
        req_free(&rb);
    }
    if (s == WF_OK && !r.have_length) s = wf_error(WF_ERR_FORMAT, "HEAD %s: the answer has no Content-Length", url);
    if (s == WF_OK) {
        st->size = r.content_length;
        snprintf(st->xxh3, sizeof st->xxh3, "%.16s", strlen(r.meta_xxh3) == 16 ? r.meta_xxh3 : "");
        snprintf(st->etag, sizeof st->etag, "%s", r.etag);
    }
    req_free(&r);
    wf__s3_url_free(&u);
    return s;
}

wf_status wf__s3_get(const char *url, uint64_t offset, uint64_t len, int ranged, wf_buf *out, char *meta_xxh3,
                     size_t meta_cap) {
    wf__s3_url u;
    WF_TRY(wf__s3_url_parse(url, &u));
    char range[64];
    wf__kv hdr = {"range", range};
    snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, offset, offset + len - 1);
    s3_req r = {.method = "GET", .url = url, .u = &u, .headers = &hdr, .n_headers = ranged ? 1 : 0};
    wf_status s = ranged && len ? wf_buf_reserve(&r.resp, (size_t)len) : WF_OK;
    if (s == WF_OK) s = s3_request(&r);
    if (s == WF_OK && ranged && r.resp.len != len)
        s = wf_error(WF_ERR_RANGE, "GET %s: asked for %" PRIu64 " bytes at %" PRIu64 ", got %zu: the object is shorter",
                     url, len, offset, r.resp.len);
    if (s == WF_OK) {
        *out = r.resp;
        memset(&r.resp, 0, sizeof r.resp);
        if (meta_xxh3) snprintf(meta_xxh3, meta_cap, "%s", r.meta_xxh3);
    }
    req_free(&r);
    wf__s3_url_free(&u);
    return s;
}

static void xxh3_hex(const void *data, size_t len, char out[17]) {
    snprintf(out, 17, "%016" PRIx64, wf_hash64(data, len));
}

wf_status wf__s3_put(const char *url, const void *data, size_t len) {
    wf__s3_url u;
    WF_TRY(wf__s3_url_parse(url, &u));
    char sum[17];
    xxh3_hex(data, len, sum);
    wf__kv hdr = {"x-amz-meta-weft-xxh3", sum};
    s3_req r = {.method = "PUT", .url = url, .u = &u, .headers = &hdr, .n_headers = 1, .body = data, .body_len = len};
    wf_status s = u.key[0] ? s3_request(&r) : wf_error(WF_ERR_INVALID, "%s: no key after the bucket", url);
    req_free(&r);
    wf__s3_url_free(&u);
    return s;
}

wf_status wf__s3_delete(const char *url) {
    wf__s3_url u;
    WF_TRY(wf__s3_url_parse(url, &u));
    s3_req r = {.method = "DELETE", .url = url, .u = &u};
    wf_status s = u.key[0] ? s3_request(&r) : wf_error(WF_ERR_INVALID, "%s: no key after the bucket", url);
    if (s == WF_ERR_NOTFOUND && r.status == 404) {  /* gone already; a missing bucket stays an error */
        char code[64], msg[8];
        wf__s3_parse_error(r.resp.data, r.resp.len, code, sizeof code, msg, sizeof msg);
        if (strcmp(code, "NoSuchBucket") != 0) s = WF_OK, wf_error_clear();
    }
    req_free(&r);
    wf__s3_url_free(&u);
    return s;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const wf_store_entry *)a)->url, ((const wf_store_entry *)b)->url);
}

wf_status wf__s3_list(const char *prefix_url, wf_store_entry **out, size_t *n_out) {
    *out = NULL, *n_out = 0;
    wf__s3_url u;
    WF_TRY(wf__s3_url_parse(prefix_url, &u));
    wf__s3_listing l = {0};
    wf_status s = WF_OK;
    int page = 0;
    do {
        wf__kv q[3] = {{"list-type", "2"}, {"prefix", u.key}, {"continuation-token", l.next_token}};
        char none[1] = "";
        wf__s3_url bucket = {u.bucket, none};
        s3_req r = {.method = "GET", .url = prefix_url, .u = &bucket, .query = q, .n_query = l.next_token ? 3 : 2};
        s = s3_request(&r);
        if (s == WF_OK) {
            s = wf__s3_parse_list(r.resp.data ? r.resp.data : "", r.resp.len, &l);
            if (s != WF_OK) wf_error_wrap(s, "listing %s (page %d): ", prefix_url, page + 1);
        }
        req_free(&r);
        page++;
    } while (s == WF_OK && l.truncated);
    wf_store_entry *e = NULL;
    if (s == WF_OK && l.n) {
        e = calloc(l.n, sizeof *e);
        if (!e) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; s == WF_OK && i < l.n; i++, k++) {
        wf_buf b = {0};
        wf_buf_printf(&b, "s3://%s/%s", u.bucket, l.objects[i].key);
        if (b.failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
        e[k] = (wf_store_entry){b.data, l.objects[i].size};
    }
    if (s == WF_OK) {
        if (k) qsort(e, k, sizeof *e, cmp_entry);
        *out = e, *n_out = k;
    } else {
        wf_store_list_free(e, k);
    }
    wf__s3_listing_free(&l);
    wf__s3_url_free(&u);
    return s;
}

/* ---- multipart upload ---- */

typedef struct {
    const s3_config *c;
    const char *url;
    const wf__s3_url *u;
    const char *upload_id;
    int fd;
    uint64_t size;
    size_t part_bytes;
    int n_parts;
    char (*etags)[128];
    int next;                 /* next part to take (atomic) */
    int failed;               /* a part failed: the others stop (atomic) */
} mp_ctx;

static wf_status mp_worker(void *arg, int tid, int n_threads) {
    mp_ctx *m = arg;
    char *buf = malloc(m->part_bytes);
    if (!buf) return wf_error(WF_ERR_NOMEM, "out of memory for an upload part of %zu bytes", m->part_bytes);
    wf_status s = WF_OK;
    for (;;) {
        int p = __atomic_fetch_add(&m->next, 1, __ATOMIC_RELAXED);
        if (p >= m->n_parts || __atomic_load_n(&m->failed, __ATOMIC_RELAXED)) break;
        uint64_t off = (uint64_t)p * m->part_bytes;
        size_t n = (size_t)(m->size - off < m->part_bytes ? m->size - off : m->part_bytes);
        for (size_t got = 0; got < n;) {
            ssize_t k = pread(m->fd, buf + got, n - got, (off_t)(off + got));
            if (k <= 0) {
                s = wf_error(WF_ERR_IO, "uploading to %s: reading part %d: %s", m->url, p + 1,
                             k < 0 ? strerror(errno) : "the file got shorter");
                break;
            }
            got += (size_t)k;
        }
        if (s != WF_OK) break;
        char num[16];
        snprintf(num, sizeof num, "%d", p + 1);
        wf__kv q[2] = {{"partNumber", num}, {"uploadId", m->upload_id}};
        s3_req r = {.method = "PUT", .url = m->url, .u = m->u, .query = q, .n_query = 2, .body = buf, .body_len = n};
        s = s3_request(&r);
        if (s == WF_OK && !r.etag[0]) s = wf_error(WF_ERR_FORMAT, "PUT %s part %d: the answer has no ETag", m->url, p + 1);
        if (s == WF_OK) memcpy(m->etags[p], r.etag, sizeof m->etags[p]);
        req_free(&r);
        if (s != WF_OK) break;
    }
    if (s != WF_OK) __atomic_store_n(&m->failed, 1, __ATOMIC_RELAXED);
    free(buf);
    (void)tid, (void)n_threads;
    return s;
}

/* Hash of the file, for the metadata that readers check. */
static wf_status file_xxh3(int fd, const char *path, uint64_t size, char out[17]) {
    wf_hasher *h = wf_hasher_create();
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    wf_status s = h && buf ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    for (uint64_t off = 0; s == WF_OK && off < size;) {
        ssize_t k = pread(fd, buf, cap, (off_t)off);
        if (k <= 0) s = wf_error(WF_ERR_IO, "%s: read failed: %s", path, k < 0 ? strerror(errno) : "short file");
        else wf_hasher_update(h, buf, (size_t)k), off += (uint64_t)k;
    }
    if (s == WF_OK) snprintf(out, 17, "%016" PRIx64, wf_hasher_digest(h));
    wf_hasher_destroy(h);
    free(buf);
    return s;
}

wf_status wf__s3_upload_file(const char *url, const char *path) {
    const s3_config *c;
    WF_TRY(config_get(&c));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wf_error(WF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return wf_error(WF_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    uint64_t size = (uint64_t)sb.st_size;
    wf_status s = WF_OK;
    if (size <= c->part_bytes) {  /* one PUT */
        char *data = NULL;
        size_t len = 0;
        close(fd);
        WF_TRY(wf_file_read(path, &data, &len));
        s = wf__s3_put(url, data, len);
        free(data);
        return s;
    }
    wf__s3_url u;
    s = wf__s3_url_parse(url, &u);
    if (s != WF_OK) {
        close(fd);
        return s;
    }
    char sum[17];
    char *upload_id = NULL;
    mp_ctx m = {0};
    s = file_xxh3(fd, path, size, sum);
    if (s == WF_OK) {
        wf__kv q = {"uploads", ""};
        wf__kv hdr = {"x-amz-meta-weft-xxh3", sum};
        s3_req r = {.method = "POST", .url = url, .u = &u, .query = &q, .n_query = 1, .headers = &hdr, .n_headers = 1};
        s = s3_request(&r);
        size_t pos = 0;
        if (s == WF_OK && (wf__xml_next(r.resp.data ? r.resp.data : "", r.resp.len, &pos, "UploadId", &upload_id) != 1 ||
                           !upload_id || !*upload_id))
            s = wf_error(WF_ERR_FORMAT, "POST %s?uploads: the answer has no UploadId", url);
        req_free(&r);
    }
    if (s == WF_OK) {
        m = (mp_ctx){c, url, &u, upload_id, fd, size, c->part_bytes,
                     (int)((size + c->part_bytes - 1) / c->part_bytes), NULL, 0, 0};
        if (m.n_parts > 10000)
            s = wf_error(WF_ERR_RANGE, "%s: %" PRIu64 " bytes need %d parts of store.part_mb; S3 allows 10000: raise it",
                         path, size, m.n_parts);
        else if (!(m.etags = calloc((size_t)m.n_parts, sizeof *m.etags)))
            s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    if (s == WF_OK) {
        int threads = c->threads < m.n_parts ? c->threads : m.n_parts;
        s = wf_parallel_run(threads, mp_worker, &m);
    }
    if (s == WF_OK) {
        wf_buf x = {0};
        wf_buf_puts(&x, "<CompleteMultipartUpload>");
        for (int p = 0; p < m.n_parts; p++)
            wf_buf_printf(&x, "<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag></Part>", p + 1, m.etags[p]);
        wf_buf_puts(&x, "</CompleteMultipartUpload>");
        wf__kv q = {"uploadId", upload_id};
        wf__kv hdr = {"content-type", "application/xml"};
        s3_req r = {.method = "POST", .url = url, .u = &u, .query = &q, .n_query = 1, .headers = &hdr, .n_headers = 1,
                    .body = x.data, .body_len = x.len};
        s = x.failed ? wf_error(WF_ERR_NOMEM, "out of memory") : s3_request(&r);
        req_free(&r);
        wf_buf_free(&x);
    }
    if (s != WF_OK && upload_id) {  /* abort, so that no parts linger; the first error stays */
        wf_error_keep k = WF_ERROR_KEEP_INIT;
        wf_error_keep_note(&k, s);
        wf__kv q = {"uploadId", upload_id};
        s3_req r = {.method = "DELETE", .url = url, .u = &u, .query = &q, .n_query = 1};
        if (s3_request(&r) != WF_OK) WF_WARN("s3: aborting the upload to %s failed: %s", url, wf_error_msg());
        req_free(&r);
        s = wf_error_keep_restore(&k);
    }
    free(m.etags);
    free(upload_id);
    close(fd);
    wf__s3_url_free(&u);
    return s;
}

/* ---- parallel download ---- */

/* Whole-object downloads: s3transfer's defaults (boto3's download_file),
 * 8 MiB ranged GETs, 10 in flight. store.part_mb and store.threads size
 * uploads, whose parts S3 bounds (5 MiB at least, 10000 at most). */
#define DOWNLOAD_PART_BYTES ((size_t)8 << 20)
#define DOWNLOAD_THREADS 10

typedef struct {
    const char *url;
    int fd;
    uint64_t size;
    size_t part_bytes;
    int n_parts;
    int next, failed;  /* atomic */
} dl_ctx;

static wf_status dl_worker(void *arg, int tid, int n_threads) {
    dl_ctx *d = arg;
    wf_status s = WF_OK;
    (void)tid, (void)n_threads;
    for (;;) {
        int p = __atomic_fetch_add(&d->next, 1, __ATOMIC_RELAXED);
        if (p >= d->n_parts || __atomic_load_n(&d->failed, __ATOMIC_RELAXED)) break;
        uint64_t off = (uint64_t)p * d->part_bytes;
        uint64_t n = d->size - off < d->part_bytes ? d->size - off : d->part_bytes;
        wf_buf b = {0};
        s = wf__s3_get(d->url, off, n, 1, &b, NULL, 0);
        for (size_t done = 0; s == WF_OK && done < n;) {
            ssize_t k = pwrite(d->fd, b.data + done, n - done, (off_t)(off + done));
            if (k < 0) s = wf_error(WF_ERR_IO, "downloading %s: write failed: %s", d->url, strerror(errno));
            else done += (size_t)k;
        }
        wf_buf_free(&b);
        if (s != WF_OK) break;
    }
    if (s != WF_OK) __atomic_store_n(&d->failed, 1, __ATOMIC_RELAXED);
    return s;
}

static wf_status download_once(const char *url, const char *path, int durable);

wf_status wf__s3_download_file(const char *url, const char *path, int durable) {
    wf_status s = download_once(url, path, durable);
    if (s == WF_ERR_CHECKSUM) { /* damaged on the way? once more before giving up */
        WF_WARN("store: %s; fetching it once more", wf_error_msg());
        s = download_once(url, path, durable);
    }
    return s;
}

static wf_status download_once(const char *url, const char *path, int durable) {
    wf_store_stat st;
    WF_TRY(wf__s3_head(url, &st));
    wf_buf tmp = {0};
    wf_buf_printf(&tmp, "%s.tmp.%ld", path, (long)getpid());
    if (tmp.failed) return wf_error(WF_ERR_NOMEM, "out of memory");
    int fd = open(tmp.data, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    wf_status s = fd >= 0 ? WF_OK : wf_error(WF_ERR_IO, "%s: cannot create: %s", tmp.data, strerror(errno));
    if (s == WF_OK && st.size) {
        const size_t part = DOWNLOAD_PART_BYTES;
        dl_ctx d = {url, fd, st.size, part, (int)((st.size + part - 1) / part), 0, 0};
        int threads = DOWNLOAD_THREADS < d.n_parts ? DOWNLOAD_THREADS : d.n_parts;
        s = wf_parallel_run(threads, dl_worker, &d);
    }
    if (s == WF_OK && st.xxh3[0]) {  /* the whole file against the hash it was written with */
        wf_mmap m = {0};
        s = st.size ? wf_mmap_open(&m, tmp.data) : WF_OK;
        char have[17];
        if (s == WF_OK) {
            snprintf(have, sizeof have, "%016" PRIx64, wf_hash64(m.data ? (const void *)m.data : "", m.size));
            if (strcmp(have, st.xxh3) != 0)
                s = wf_error(WF_ERR_CHECKSUM,
                             "GET %s: the bytes received hash to %s, the object was written with %s: "
                             "corrupted in transfer or in the store",
                             url, have, st.xxh3);
        }
        wf_mmap_close(&m);
    }
    if (s == WF_OK && durable && fsync(fd) != 0)
        s = wf_error(WF_ERR_IO, "%s: fsync failed: %s", tmp.data, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && s == WF_OK) s = wf_error(WF_ERR_IO, "%s: close failed: %s", tmp.data, strerror(errno));
    if (s == WF_OK && rename(tmp.data, path) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp.data, strerror(errno));
    if (s != WF_OK) unlink(tmp.data);
    wf_buf_free(&tmp);
    return s;
}
