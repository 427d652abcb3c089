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

int wf_store_is_remote(const char *url) { return url && strncmp(url, "s3://", 5) == 0; }

wf_status wf_store_head(const char *url, wf_store_stat *st) {
    if (wf_store_is_remote(url)) return wf__s3_head(url, st);
    struct stat sb;
    if (stat(url, &sb) != 0)
        return wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO, "%s: %s", url, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return wf_error(WF_ERR_INVALID, "%s: not a regular file", url);
    st->size = (uint64_t)sb.st_size;
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

wf_status wf_store_read(const char *url, char **data, size_t *len) {
    if (!wf_store_is_remote(url)) return wf_file_read(url, data, len);
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
    char *data = NULL;
    size_t len = 0;
    WF_TRY(wf_store_read(url, &data, &len));
    wf_status s = wf_file_write_atomic(path, data, len);
    free(data);
    return s;
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
