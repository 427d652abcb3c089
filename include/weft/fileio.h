/* weft: files. Whole-file reads, read-only mappings, directory creation,
 * checksums, and atomic writes (temporary file, fsync, rename, fsync of the
 * directory) so that an output is either complete or absent. */
#ifndef WEFT_FILEIO_H
#define WEFT_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/status.h"

/* Reads a whole file into a malloc'd buffer with a terminating NUL (not
 * counted in *len). The caller frees *data. */
wf_status wf_file_read(const char *path, char **data, size_t *len);
/* The same for an open stream (stdin, /proc files whose size is unknown),
 * read to its end; `what` names it in errors. */
wf_status wf_stream_read(FILE *fp, const char *what, char **data, size_t *len);

/* A read-only, shared mapping of a whole file. An empty file maps to
 * data == NULL, size == 0. */
typedef struct {
    const unsigned char *data;
    size_t size;
} wf_mmap;
wf_status wf_mmap_open(wf_mmap *m, const char *path);
void wf_mmap_close(wf_mmap *m); /* accepts a zeroed or closed mapping */

/* rm -r: removes `path` and everything under it, without following
 * symbolic links; a path that does not exist is not an error. */
wf_status wf_remove_tree(const char *path);

/* The longest path weft builds, with its NUL: Linux's PATH_MAX. Buffers for
 * paths are this size; a path that does not fit is an error, never cut. */
#define WF_PATH_MAX 4096

/* dir + "/" + name (just name when dir is "" or NULL) into buf (size
 * bytes). A result that does not fit is not cut: buf is set to "" and the
 * error (WF_ERR_RANGE) says how many bytes the path needs; *needed, when
 * not NULL, gets that number (with the NUL) either way. */
wf_status wf_path_join(char *buf, size_t size, const char *dir, const char *name, size_t *needed);
/* The same with name made from a printf format ("rank-%05d.txt"). */
wf_status wf_path_joinf(char *buf, size_t size, const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* mkdir -p. */
wf_status wf_mkdirs(const char *path);
int wf_path_exists(const char *path);
int wf_path_is_dir(const char *path);

/* Atomic file output. wf_afile_open creates `<path>.tmp.<pid>` beside the
 * target; wf_afile_commit flushes, fsyncs, renames it over `path` and fsyncs
 * the directory; wf_afile_abort removes it. Exactly one of commit or abort
 * must be called. */
typedef struct {
    FILE *fp;
    char *path;
    char *tmp_path;
} wf_afile;
wf_status wf_afile_open(wf_afile *f, const char *path);
wf_status wf_afile_commit(wf_afile *f);
void wf_afile_abort(wf_afile *f);

/* Writes `len` bytes to `path` atomically. */
wf_status wf_file_write_atomic(const char *path, const void *data, size_t len);

/* Free space of the filesystem that holds `path`: bytes and inodes an
 * unprivileged process may still use (statvfs's f_bavail and f_favail);
 * *inodes is UINT64_MAX where the filesystem has no inode limit. */
wf_status wf_fs_free(const char *path, uint64_t *bytes, uint64_t *inodes);

/* fsyncs a directory (after a rename into it). */
wf_status wf_fsync_dir(const char *dir);

/* 64-bit XXH3 of a buffer, and a streaming form for large files. */
uint64_t wf_hash64(const void *data, size_t len);
typedef struct wf_hasher wf_hasher;
wf_hasher *wf_hasher_create(void);
void wf_hasher_update(wf_hasher *h, const void *data, size_t len);
uint64_t wf_hasher_digest(const wf_hasher *h);
void wf_hasher_destroy(wf_hasher *h);

#endif
