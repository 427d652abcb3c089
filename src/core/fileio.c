/* File helpers. The atomic-write sequence follows the durable pattern of
 * databases: write a temporary file in the same directory, fsync it, rename
 * it over the target, then fsync the directory so the rename itself is on
 * disk. A crash at any point leaves either the old file or the new one. */
#include "weft/fileio.h"

#include "weft/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <ftw.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

wf_status wf_stream_read(FILE *fp, const char *what, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    wf_buf b = {0};
    for (;;) {
        if (wf_buf_reserve(&b, 1 << 16) != WF_OK) {
            wf_buf_free(&b);
            return wf_error_wrap(WF_ERR_NOMEM, "%s: ", what);
        }
        size_t got = fread(b.data + b.len, 1, b.cap - 1 - b.len, fp);
        b.len += got;
        if (got == 0) break;
    }
    if (ferror(fp)) {
        wf_buf_free(&b);
        return wf_error(WF_ERR_IO, "%s: read error: %s", what, strerror(errno));
    }
    b.data[b.len] = '\0';
    *data = b.data;
    *len = b.len;
    return WF_OK;
}

wf_status wf_file_read(const char *path, char **data, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO,
                             "%s: cannot open: %s", path, strerror(errno));
    wf_status s = wf_stream_read(fp, path, data, len);
    fclose(fp);
    return s;
}

wf_status wf_mmap_open(wf_mmap *m, const char *path) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return wf_error(errno == ENOENT ? WF_ERR_NOTFOUND : WF_ERR_IO,
                                "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return wf_error(WF_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return wf_error(WF_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return WF_OK;
}

void wf_mmap_close(wf_mmap *m) {
    if (m->data) munmap((void *)(uintptr_t)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int wf_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int wf_path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

wf_status wf_path_join(char *buf, size_t size, const char *dir, const char *name, size_t *needed) {
    size_t nd = dir ? strlen(dir) : 0, nn = strlen(name);
    int slash = nd > 0 && dir[nd - 1] != '/';
    size_t need = nd + (size_t)slash + nn + 1;
    if (needed) *needed = need;
    if (need > size) {
        if (size) buf[0] = '\0';
        return wf_error(WF_ERR_RANGE, "%s%s%s: the path is %zu bytes, longer than the %zu this place allows",
                        nd ? dir : "", slash ? "/" : "", name, need - 1, size ? size - 1 : 0);
    }
    if (nd) memmove(buf, dir, nd);
    if (slash) buf[nd] = '/';
    memmove(buf + nd + (size_t)slash, name, nn + 1);
    return WF_OK;
}

wf_status wf_path_joinf(char *buf, size_t size, const char *dir, const char *fmt, ...) {
    char name[WF_PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof name)
        return wf_error(WF_ERR_RANGE, "%s/%s...: the path is longer than %d bytes", dir ? dir : "", name,
                        WF_PATH_MAX - 1);
    return wf_path_join(buf, size, dir, name, NULL);
}

wf_status wf_mkdirs(const char *path) {
    /* Most calls find the directory there: one stat instead of a mkdir of
     * every component (a metadata round trip each on NFS or Lustre). */
    if (wf_path_is_dir(path)) return WF_OK;
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (!p) return wf_error(WF_ERR_NOMEM, "out of memory");
    memcpy(p, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            wf_status s = wf_error(WF_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
            free(p);
            return s;
        }
        p[i] = c;
    }
    free(p);
    if (!wf_path_is_dir(path)) return wf_error(WF_ERR_IO, "%s: exists and is not a directory", path);
    return WF_OK;
}

wf_status wf_fs_free(const char *path, uint64_t *bytes, uint64_t *inodes) {
    struct statvfs v;
    if (statvfs(path, &v) != 0) return wf_error(WF_ERR_IO, "%s: cannot read the filesystem's free space: %s", path, strerror(errno));
    *bytes = (uint64_t)v.f_bavail * (uint64_t)(v.f_frsize ? v.f_frsize : v.f_bsize);
    *inodes = v.f_files == 0 ? UINT64_MAX : (uint64_t)v.f_favail;
    return WF_OK;
}

wf_status wf_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return wf_error(WF_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return wf_error(WF_ERR_IO, "%s: fsync failed: %s", dir, strerror(errno));
    return WF_OK;
}

wf_status wf_afile_open(wf_afile *f, const char *path) {
    memset(f, 0, sizeof *f);
    size_t n = strlen(path) + 32;
    f->path = strdup(path);
    f->tmp_path = malloc(n);
    if (!f->path || !f->tmp_path) {
        free(f->path);
        free(f->tmp_path);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        wf_status s = wf_error(WF_ERR_IO, "%s: cannot create: %s", f->tmp_path, strerror(errno));
        free(f->path);
        free(f->tmp_path);
        memset(f, 0, sizeof *f);
        return s;
    }
    return WF_OK;
}

static void afile_free(wf_afile *f) {
    free(f->path);
    free(f->tmp_path);
    memset(f, 0, sizeof *f);
}

wf_status wf_afile_commit(wf_afile *f) {
    wf_status s = WF_OK;
    if (fflush(f->fp) != 0 || ferror(f->fp))
        s = wf_error(WF_ERR_IO, "%s: write failed: %s", f->tmp_path, strerror(errno));
    else if (fsync(fileno(f->fp)) != 0)
        s = wf_error(WF_ERR_IO, "%s: fsync failed: %s", f->tmp_path, strerror(errno));
    if (fclose(f->fp) != 0 && s == WF_OK)
        s = wf_error(WF_ERR_IO, "%s: close failed: %s", f->tmp_path, strerror(errno));
    f->fp = NULL;
    if (s == WF_OK && rename(f->tmp_path, f->path) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
    if (s != WF_OK) {
        unlink(f->tmp_path);
        afile_free(f);
        return s;
    }
    char *dir = strdup(f->path);
    if (!dir) {
        afile_free(f);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    s = wf_fsync_dir(dirname(dir));
    free(dir);
    afile_free(f);
    return s;
}

void wf_afile_abort(wf_afile *f) {
    if (f->fp) fclose(f->fp);
    if (f->tmp_path) unlink(f->tmp_path);
    afile_free(f);
}

wf_status wf_file_write_atomic(const char *path, const void *data, size_t len) {
    wf_afile f;
    WF_TRY(wf_afile_open(&f, path));
    if (len && fwrite(data, 1, len, f.fp) != len) {
        wf_status s = wf_error(WF_ERR_IO, "%s: write failed: %s", f.tmp_path, strerror(errno));
        wf_afile_abort(&f);
        return s;
    }
    return wf_afile_commit(&f);
}

uint64_t wf_hash64(const void *data, size_t len) { return XXH3_64bits(data, len); }

struct wf_hasher { XXH3_state_t *st; };

wf_hasher *wf_hasher_create(void) {
    wf_hasher *h = malloc(sizeof *h);
    if (!h) return NULL;
    h->st = XXH3_createState();
    if (!h->st) {
        free(h);
        return NULL;
    }
    XXH3_64bits_reset(h->st);
    return h;
}

void wf_hasher_update(wf_hasher *h, const void *data, size_t len) {
    XXH3_64bits_update(h->st, data, len);
}

uint64_t wf_hasher_digest(const wf_hasher *h) { return XXH3_64bits_digest(h->st); }

void wf_hasher_destroy(wf_hasher *h) {
    if (!h) return;
    XXH3_freeState(h->st);
    free(h);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

wf_status wf_remove_tree(const char *path) {
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return wf_error(WF_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return WF_OK;
}
