/* The store's public calls: each looks at the URL and goes to the S3
 * backend (s3.c) or does the same thing on the local file system, so that
 * callers above write one path for both (docs/storage.md). Local writes are
 * atomic (temporary file, fsync, rename); local listing walks the
 * directory tree under the prefix. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"

int wf_store_is_remote(const char *url) { return url && strncmp(url, "s3://", 5) == 0; }

wf_status wf_store_head(const char *url, wf_store_stat *st) {
    if (wf_store_is_remote(url)) return wf__s3_head(url, st);
    struct stat sb;
    if (stat(url, &sb) != 0)
        return wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO, "%s: %s", url, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return wf_error(WF_ERR_INVALID, "%s: not a regular file", url);
    st->size = (uint64_t)sb.st_size;
    st->xxh3[0] = st->etag[0] = 0;
    return WF_OK;
}

wf_status wf_store_read_range(const char *url, uint64_t offset, size_t len, void *buf) {
    if (len == 0) return WF_OK;
    if (wf_store_is_remote(url)) {
        wf_buf b = {0};
        WF_TRY(wf__s3_get(url, offset, len, 1, &b, NULL, 0));
        memcpy(buf, b.data, len);
        wf_buf_free(&b);
        return WF_OK;
    }
    int fd = open(url, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO, "%s: %s", url, strerror(errno));
    wf_status s = WF_OK;
    for (size_t got = 0; got < len;) {
        ssize_t k = pread(fd, (char *)buf + got, len - got, (off_t)(offset + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            s = k < 0 ? wf_error(WF_ERR_IO, "%s: read failed: %s", url, strerror(errno))
                      : wf_error(WF_ERR_RANGE, "%s: asked for %zu bytes at %" PRIu64 ", the file is shorter", url, len,
                                 offset);
            break;
        }
        got += (size_t)k;
    }
    close(fd);
    return s;
}

static wf_status read_remote(const char *url, char **data, size_t *len);

wf_status wf_store_read(const char *url, char **data, size_t *len) {
    if (!wf_store_is_remote(url)) return wf_file_read(url, data, len);
    /* Bytes that do not hash to what the object was written with may have
     * been damaged on the way: fetched once more before giving up. */
    wf_status s = read_remote(url, data, len);
    if (s == WF_ERR_CHECKSUM) {
        WF_WARN("store: %s; fetching it once more", wf_error_msg());
        s = read_remote(url, data, len);
    }
    return s;
}

static wf_status read_remote(const char *url, char **data, size_t *len) {
    wf_buf b = {0};
    char sum[40] = "";
    WF_TRY(wf__s3_get(url, 0, 0, 0, &b, sum, sizeof sum));
    if (sum[0]) {
        char have[17];
        snprintf(have, sizeof have, "%016" PRIx64, wf_hash64(b.data ? b.data : "", b.len));
        if (strcmp(have, sum) != 0) {
            wf_buf_free(&b);
            return wf_error(WF_ERR_CHECKSUM,
                            "GET %s: the bytes received hash to %s, the object was written with %s: "
                            "corrupted in transfer or in the store",
                            url, have, sum);
        }
    }
    if (!b.data && wf_buf_reserve(&b, 0) != WF_OK) return WF_ERR_NOMEM;
    *data = b.data;
    *len = b.len;
    return WF_OK;
}

wf_status wf_store_write(const char *url, const void *data, size_t len) {
    if (wf_store_is_remote(url)) return wf__s3_put(url, data, len);
    return wf_file_write_atomic(url, data, len);
}

wf_status wf_store_upload(const char *path, const char *url) {
    if (wf_store_is_remote(url)) return wf__s3_upload_file(url, path);
    char *data = NULL;
    size_t len = 0;
    WF_TRY(wf_file_read(path, &data, &len));
    wf_status s = wf_file_write_atomic(url, data, len);
    free(data);
    return s;
}

wf_status wf_store_download(const char *url, const char *path) {
    if (wf_store_is_remote(url)) return wf__s3_download_file(url, path, 1);
    char *data = NULL;
    size_t len = 0;
    WF_TRY(wf_store_read(url, &data, &len));
    wf_status s = wf_file_write_atomic(path, data, len);
    free(data);
    return s;
}

/* Whether the cached copy at `path` still holds the object described by st. */
static int copy_matches(const char *path, const wf_store_stat *st) {
    struct stat sb;
    if (stat(path, &sb) != 0 || (uint64_t)sb.st_size != st->size) return 0;
    if (st->xxh3[0]) {
        wf_mmap m = {0};
        if (st->size && wf_mmap_open(&m, path) != WF_OK) {
            wf_error_clear();
            return 0;
        }
        char have[17];
        snprintf(have, sizeof have, "%016" PRIx64, wf_hash64(m.data ? (const void *)m.data : "", m.size));
        wf_mmap_close(&m);
        if (strcmp(have, st->xxh3) == 0) return 1;
        WF_WARN("store: the cached copy %s hashes to %s, the object to %s: downloading it again", path, have,
                st->xxh3);
        return 0;
    }
    wf_buf side = {0};
    wf_buf_printf(&side, "%s.weft-etag", path);
    char *etag = NULL;
    size_t n = 0;
    int ok = !side.failed && st->etag[0] && wf_file_read(side.data, &etag, &n) == WF_OK && strcmp(etag, st->etag) == 0;
    wf_error_clear();
    free(etag);
    wf_buf_free(&side);
    return ok;
}

/* The cache's path for the object `url` into *out (NULL when the cache
 * is only the default one and `given_only`). */
static wf_status cache_file(const char *url, int given_only, wf_buf *out, int *none) {
    wf__s3_url u;
    WF_TRY(wf__s3_url_parse(url, &u));
    /* The key becomes a path below the cache: no "." or ".." segment may
     * lead it elsewhere, and no empty one. */
    wf_status s = WF_OK;
    for (const char *seg = u.key; s == WF_OK;) {
        size_t n = strcspn(seg, "/");
        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            s = wf_error(WF_ERR_INVALID, "%s: a key with an empty, '.' or '..' part has no local copy", url);
        if (!seg[n]) break;
        seg += n + 1;
    }
    char root[1024], host[256];
    int given = 0;
    if (s == WF_OK) s = wf__store_cache_root(root, sizeof root, host, sizeof host, &given);
    *none = s == WF_OK && given_only && !given;
    if (s == WF_OK && !*none) {
        wf_buf_printf(out, "%s/%s/%s/%s", root, host, u.bucket, u.key);
        if (out->failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
    }
    wf__s3_url_free(&u);
    return s;
}

wf_status wf_store_cache_path(const char *url, char **path) {
    *path = NULL;
    if (!wf_store_is_remote(url)) return wf_error(WF_ERR_INVALID, "%s: not an s3:// URL", url);
    wf_buf b = {0};
    int none = 0;
    wf_status s = cache_file(url, 1, &b, &none);
    if (s != WF_OK || none) {
        wf_buf_free(&b);
        return s;
    }
    *path = b.data;
    return WF_OK;
}

wf_status wf_store_local_copy(const char *url, char **local) {
    *local = NULL;
    if (!wf_store_is_remote(url)) {
        *local = strdup(url);
        return *local ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    }
    wf_buf path = {0};
    int none = 0;
    wf_status s = cache_file(url, 0, &path, &none);
    wf_store_stat st;
    if (s == WF_OK) s = wf_store_head(url, &st);
    if (s == WF_OK && !copy_matches(path.data, &st)) {
        char *dir = strdup(path.data);
        if (!dir) s = wf_error(WF_ERR_NOMEM, "out of memory");
        if (s == WF_OK) {
            *strrchr(dir, '/') = 0;
            s = wf_mkdirs(dir);
        }
        free(dir);
        WF_INFO("store: copying %s (%" PRIu64 " bytes) to %s", url, st.size, path.data);
        /* No fsync: a copy torn by a crash fails the check above next time
         * and is fetched again. */
        if (s == WF_OK) s = wf__s3_download_file(url, path.data, 0);
        wf_store_stat got;
        if (s == WF_OK && wf_store_head(path.data, &got) == WF_OK && got.size != st.size)
            s = wf_error(WF_ERR_IO, "%s: the copy in %s has %" PRIu64 " bytes, the object %" PRIu64
                         " (it changed while read?)", url, path.data, got.size, st.size);
        if (s == WF_OK && !st.xxh3[0] && st.etag[0]) {
            wf_buf side = {0};
            wf_buf_printf(&side, "%s.weft-etag", path.data);
            s = side.failed ? wf_error(WF_ERR_NOMEM, "out of memory")
                            : wf_file_write_atomic(side.data, st.etag, strlen(st.etag));
            wf_buf_free(&side);
        }
    }
    if (s != WF_OK) {
        wf_buf_free(&path);
        return s;
    }
    *local = path.data;
    return WF_OK;
}

wf_status wf_store_delete(const char *url) {
    if (wf_store_is_remote(url)) return wf__s3_delete(url);
    if (unlink(url) != 0 && errno != ENOENT) return wf_error(WF_ERR_IO, "%s: cannot remove: %s", url, strerror(errno));
    return WF_OK;
}

void wf_store_list_free(wf_store_entry *entries, size_t n) {
    for (size_t i = 0; entries && i < n; i++) free(entries[i].url);
    free(entries);
}

typedef struct {
    wf_store_entry *e;
    size_t n, cap;
} list_acc;

static wf_status walk(const char *dir, const char *prefix, list_acc *acc) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR) return WF_OK;
        return wf_error(WF_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    }
    wf_status s = WF_OK;
    struct dirent *de;
    while (s == WF_OK && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        wf_buf p = {0};
        wf_buf_printf(&p, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", de->d_name);
        struct stat sb;
        if (p.failed) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else if (strncmp(p.data, prefix, strlen(p.data) < strlen(prefix) ? strlen(p.data) : strlen(prefix)) != 0) {
            /* neither under the prefix nor a directory leading to it */
        } else if (lstat(p.data, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            s = walk(p.data, prefix, acc);
        } else if (S_ISREG(sb.st_mode) && strncmp(p.data, prefix, strlen(prefix)) == 0) {
            s = WF_GROW(acc->e, acc->cap, acc->n + 1, 64);
            if (s == WF_OK) {
                acc->e[acc->n++] = (wf_store_entry){p.data, (uint64_t)sb.st_size};
                p.data = NULL;
            }
        }
        wf_buf_free(&p);
    }
    closedir(d);
    return s;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const wf_store_entry *)a)->url, ((const wf_store_entry *)b)->url);
}

wf_status wf_store_list(const char *prefix, wf_store_entry **entries, size_t *n) {
    if (wf_store_is_remote(prefix)) return wf__s3_list(prefix, entries, n);
    *entries = NULL, *n = 0;
    /* Walk from the directory that holds the prefix ("a/b/c" -> "a/b"); a
     * bare name is looked for in "./" and reported without it. */
    int dot = strchr(prefix, '/') == NULL;
    wf_buf full = {0};
    wf_buf_printf(&full, "%s%s", dot ? "./" : "", prefix);
    char *dir = full.data ? strdup(full.data) : NULL;
    if (!dir) {
        wf_buf_free(&full);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (!wf_path_is_dir(dir) && slash) slash[slash == dir ? 1 : 0] = 0;
    list_acc acc = {0};
    wf_status s = walk(dir, full.data, &acc);
    free(dir);
    wf_buf_free(&full);
    if (s != WF_OK) {
        wf_store_list_free(acc.e, acc.n);
        return s;
    }
    for (size_t i = 0; dot && i < acc.n; i++) memmove(acc.e[i].url, acc.e[i].url + 2, strlen(acc.e[i].url + 2) + 1);
    if (acc.n) qsort(acc.e, acc.n, sizeof *acc.e, cmp_entry);
    *entries = acc.e, *n = acc.n;
    return WF_OK;
}
