/* The storage side of a checkpoint save: the layout plan (every
 * replicated tensor cut along dim 0 into one row range per writing rank,
 * every sharded tensor cut into the element ranges the ranks hold, each
 * range as the few boxes the manifest can describe; placed in the rank's
 * data file), the data files and manifest, the atomic commit (temporary
 * directory, fsyncs, rename, fsync of the parent), the scalar state store,
 * and the housekeeping of a directory of checkpoints (list, cleanup of
 * interrupted saves, retention). Formats: docs/formats/checkpoint.md. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft/buf.h"
#include "ckpt/ckpt_impl.h"
#include "weft/fileio.h"
#include "weft/store.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint data is little-endian");

/* ---- plan ---- */

void wf__ckpt_rows_of(int64_t rows, int r, int w, int64_t *begin, int64_t *end) {
    /* Near-equal split: the first rows % w ranks get one more row. */
    *begin = rows * r / w;
    *end = rows * (r + 1) / w;
}

static int64_t numel_of(const wf_ckpt_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

void wf_ckpt_tensor_range(const wf_ckpt_tensor *t, int rank, int64_t *begin, int64_t *end) {
    int64_t n = numel_of(t);
    if (t->shard_size <= 0) {
        *begin = 0;
        *end = n;
        return;
    }
    /* The rank's shard of the flat buffer, [rank * S, (rank + 1) * S),
     * clipped to the tensor's elements [base, base + n) of that buffer. */
    int64_t lo = (int64_t)rank * t->shard_size, hi = lo + t->shard_size;
    if (lo < t->shard_base) lo = t->shard_base;
    if (hi > t->shard_base + n) hi = t->shard_base + n;
    if (lo >= hi) lo = hi = t->shard_base;
    *begin = lo - t->shard_base;
    *end = hi - t->shard_base;
}

/* Elements per index of dim d (the product of the later dims). */
static int64_t inner_of(const int64_t *shape, int ndim, int d) {
    int64_t n = 1;
    for (int k = d + 1; k < ndim; k++) n *= shape[k];
    return n;
}

/* One box: dims before d at prefix[] with size 1, dim d [first, first + count), the rest whole. */
static int put_box(const int64_t *shape, int ndim, int d, const int64_t *prefix, int64_t first, int64_t count,
                   int64_t (*off)[WF_CKPT_MAX_DIMS], int64_t (*size)[WF_CKPT_MAX_DIMS], int k) {
    if (off) {
        for (int j = 0; j < ndim; j++) {
            off[k][j] = j < d ? prefix[j] : j == d ? first : 0;
            size[k][j] = j < d ? 1 : j == d ? count : shape[j];
        }
    }
    return 1;
}

/* The boxes of the flat range [begin, end) (non-empty) of the sub-tensor
 * shape[d..] at the index prefix[0..d), appended from box k on. */
static int range_boxes_at(const int64_t *shape, int ndim, int d, int64_t *prefix, int64_t begin, int64_t end,
                          int64_t (*off)[WF_CKPT_MAX_DIMS], int64_t (*size)[WF_CKPT_MAX_DIMS], int k) {
    int64_t inner = inner_of(shape, ndim, d);
    if (d == ndim - 1 || (begin % inner == 0 && end % inner == 0))
        return put_box(shape, ndim, d, prefix, begin / inner, (end - begin) / inner, off, size, k);
    int64_t r0 = begin / inner, r1 = (end - 1) / inner;
    if (r0 == r1) { /* inside one index of dim d: go down a dimension */
        prefix[d] = r0;
        return range_boxes_at(shape, ndim, d + 1, prefix, begin - r0 * inner, end - r0 * inner, off, size, k);
    }
    int got = 0;
    int64_t full0 = r0, full1 = end / inner; /* whole indices [full0, full1) */
    if (begin % inner) { /* the partial first one */
        prefix[d] = r0;
        got += range_boxes_at(shape, ndim, d + 1, prefix, begin - r0 * inner, inner, off, size, k + got);
        full0 = r0 + 1;
    }
    if (full1 > full0) got += put_box(shape, ndim, d, prefix, full0, full1 - full0, off, size, k + got);
    if (end % inner) { /* the partial last one */
        prefix[d] = full1;
        got += range_boxes_at(shape, ndim, d + 1, prefix, 0, end - full1 * inner, off, size, k + got);
    }
    return got;
}

int wf__ckpt_range_boxes(const int64_t *shape, int ndim, int64_t begin, int64_t end,
                        int64_t (*off)[WF_CKPT_MAX_DIMS], int64_t (*size)[WF_CKPT_MAX_DIMS]) {
    int64_t prefix[WF_CKPT_MAX_DIMS] = {0};
    if (begin >= end) return 0;
    return range_boxes_at(shape, ndim, 0, prefix, begin, end, off, size, 0);
}

void wf__ckpt_plan_free(wf_ckpt_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_tensors && p->tensors; i++) free((char *)(uintptr_t)p->tensors[i].name);
    free(p->tensors);
    free(p->pieces);
    free(p->rank_first);
    free(p->rank_bytes);
    memset(p, 0, sizeof *p);
}

/* The boxes rank r writes of tensor t: its row range (replicated) or
 * the boxes of its element range (sharded). Returns how many; fills
 * off/size/elem ranges when non-NULL (room for 2 * WF_CKPT_MAX_DIMS). */
static int rank_boxes(const wf_ckpt_tensor *t, int r, int w, int64_t (*off)[WF_CKPT_MAX_DIMS],
                      int64_t (*size)[WF_CKPT_MAX_DIMS], int64_t *range_begin) {
    if (t->shard_size <= 0) {
        int64_t b, e;
        wf__ckpt_rows_of(t->shape[0], r, w, &b, &e);
        *range_begin = 0;
        if (b == e) return 0; /* fewer rows than ranks: this rank has none */
        if (off) {
            for (int d = 0; d < t->ndim; d++) {
                off[0][d] = d ? 0 : b;
                size[0][d] = d ? t->shape[d] : e - b;
            }
        }
        return 1;
    }
    int64_t b, e;
    wf_ckpt_tensor_range(t, r, &b, &e);
    *range_begin = b;
    return wf__ckpt_range_boxes(t->shape, t->ndim, b, e, off, size);
}

static wf_status check_piece_follows(const wf_ckpt_plan *p, const wf_ckpt_piece *pc, int64_t expected) {
    WF_CHECK(pc->elem_begin == expected && pc->elem_end > pc->elem_begin,
             "checkpoint plan: tensor %s: rank %d's piece covers elements [%" PRId64 ", %" PRId64
             ") but the pieces before it end at %" PRId64,
             p->tensors[pc->tensor].name, pc->rank, pc->elem_begin, pc->elem_end, expected);
    return WF_OK;
}

static wf_status check_tensor_covered(const wf_ckpt_plan *p, size_t i, int64_t end) {
    WF_CHECK(end == numel_of(&p->tensors[i]), "checkpoint plan: tensor %s: the pieces cover %" PRId64 " of %" PRId64
             " elements", p->tensors[i].name, end, numel_of(&p->tensors[i]));
    return WF_OK;
}

/* The plan's pieces of each tensor, taken in rank order, must tile its
 * elements exactly: each starts where the one before ended, the first at 0
 * and the last at the tensor's end. A gap or an overlap would write a
 * checkpoint that loads with some elements silently wrong. */
static wf_status check_tiling(const wf_ckpt_plan *p) {
    int64_t *next = calloc(p->n_tensors ? p->n_tensors : 1, sizeof *next);
    if (!next) return wf_error(WF_ERR_NOMEM, "checkpoint: out of memory checking the plan");
    wf_status s = WF_OK;
    for (size_t k = 0; k < p->n_pieces && s == WF_OK; k++) {
        const wf_ckpt_piece *pc = &p->pieces[k];
        s = check_piece_follows(p, pc, next[pc->tensor]);
        next[pc->tensor] = pc->elem_end;
    }
    for (size_t i = 0; i < p->n_tensors && s == WF_OK; i++) s = check_tensor_covered(p, i, next[i]);
    free(next);
    return s;
}

/* Names, keys and strings go into the manifest as JSON strings, which must
 * be UTF-8 (jansson refuses anything else, and a silently dropped name made a
 * checkpoint that could not be read: found by the ckpt_roundtrip fuzz
 * target). */
static int utf8_ok(const char *s) {
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

wf_status wf__ckpt_plan_make(wf_ckpt_plan *p, const wf_ckpt_tensor *t, size_t n, int world_size) {
    memset(p, 0, sizeof *p);
    if (world_size < 1 || world_size > 100000)
        return wf_error(WF_ERR_INVALID, "checkpoint: world_size %d is out of range [1, 100000]", world_size);
    size_t n_pieces = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !*t[i].name || strlen(t[i].name) > 256)
            return wf_error(WF_ERR_INVALID, "checkpoint: tensor %zu has an empty or too long name", i);
        if (!utf8_ok(t[i].name))
            return wf_error(WF_ERR_INVALID, "checkpoint: the name of tensor %zu is not valid UTF-8", i);
        if (t[i].ndim < 1 || t[i].ndim > WF_CKPT_MAX_DIMS)
            return wf_error(WF_ERR_INVALID, "checkpoint: tensor %s has %d dimensions (1..%d supported)", t[i].name,
                            t[i].ndim, WF_CKPT_MAX_DIMS);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 1 || t[i].shape[d] > ((int64_t)1 << 40))
                return wf_error(WF_ERR_INVALID, "checkpoint: tensor %s has dimension %d of size %" PRId64, t[i].name,
                                d, t[i].shape[d]);
        if (!t[i].data) return wf_error(WF_ERR_INVALID, "checkpoint: tensor %s has no data", t[i].name);
        if (t[i].shard_size < 0 || t[i].shard_base < 0 ||
            (t[i].shard_size > 0 && (t[i].shard_size > ((int64_t)1 << 50) ||
                                     t[i].shard_size * world_size < t[i].shard_base + numel_of(&t[i]))))
            return wf_error(WF_ERR_INVALID,
                            "checkpoint: tensor %s: sharded as elements [%" PRId64 ", +%" PRId64 ") of a buffer of "
                            "%d shards of %" PRId64 " elements, which do not hold it all",
                            t[i].name, t[i].shard_base, numel_of(&t[i]), world_size, t[i].shard_size);
        for (size_t j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return wf_error(WF_ERR_INVALID, "checkpoint: tensor name %s appears twice", t[i].name);
        for (int r = 0; r < world_size; r++) {
            int64_t rb;
            n_pieces += (size_t)rank_boxes(&t[i], r, world_size, NULL, NULL, &rb);
        }
    }
    p->world_size = world_size;
    p->n_tensors = n;
    p->tensors = calloc(n ? n : 1, sizeof *p->tensors);
    p->pieces = calloc(n_pieces + 1, sizeof *p->pieces);
    p->rank_first = calloc((size_t)world_size + 1, sizeof *p->rank_first);
    p->rank_bytes = calloc((size_t)world_size, sizeof *p->rank_bytes);
    if (!p->tensors || !p->pieces || !p->rank_first || !p->rank_bytes) {
        wf__ckpt_plan_free(p);
        return wf_error(WF_ERR_NOMEM, "checkpoint: out of memory planning %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++) {
        p->tensors[i] = t[i];
        p->tensors[i].name = strdup(t[i].name);
        if (!p->tensors[i].name) {
            p->n_tensors = i;
            wf__ckpt_plan_free(p);
            return wf_error(WF_ERR_NOMEM, "out of memory");
        }
    }
    for (int r = 0; r < world_size; r++) {
        p->rank_first[r] = p->n_pieces;
        uint64_t off = WF_CKPT_HEADER_BYTES;
        for (size_t i = 0; i < n; i++) {
            const wf_ckpt_tensor *ti = &p->tensors[i];
            int64_t boff[2 * WF_CKPT_MAX_DIMS][WF_CKPT_MAX_DIMS], bsize[2 * WF_CKPT_MAX_DIMS][WF_CKPT_MAX_DIMS];
            int64_t range_begin;
            int nb = rank_boxes(ti, r, world_size, boff, bsize, &range_begin);
            for (int k = 0; k < nb; k++) {
                wf_ckpt_piece *pc = &p->pieces[p->n_pieces++];
                pc->tensor = i;
                pc->rank = r;
                int64_t first = 0, vol = 1;
                for (int d = 0; d < ti->ndim; d++) {
                    pc->off[d] = boff[k][d];
                    pc->size[d] = bsize[k][d];
                    first = first * ti->shape[d] + boff[k][d];
                    vol *= bsize[k][d];
                }
                pc->row_begin = boff[k][0];
                pc->row_end = boff[k][0] + bsize[k][0];
                pc->elem_begin = first;
                pc->elem_end = first + vol;
                pc->src = first - range_begin;
                pc->offset = off;
                pc->length = (uint64_t)vol * 4;
                off = (off + pc->length + WF_CKPT_ALIGN - 1) / WF_CKPT_ALIGN * WF_CKPT_ALIGN;
            }
        }
        p->rank_bytes[r] = off;
    }
    p->rank_first[world_size] = p->n_pieces;
    wf_status s = check_tiling(p);
    if (s != WF_OK) wf__ckpt_plan_free(p);
    return s;
}

void wf__ckpt_data_name(char *buf, size_t n, int rank, int world_size) {
    snprintf(buf, n, "data-%05d-of-%05d.bin", rank, world_size);
}

/* ---- checkpoints in an object store ----
 *
 * A save to `s3://...` is staged in a local temporary folder whose name
 * carries the destination, percent-encoded: <TMPDIR>/weft-remote-<dest>.tmp-<pid>.
 * Every rank makes it where it runs (the name is the same on every rank,
 * rank 0's) and uploads its own data file from it as soon as the file is
 * written (a multipart upload when large; on the writer thread for an
 * asynchronous save); the commit uploads the manifest last. A checkpoint
 * without its manifest is invisible to list, resume and verify, as a
 * temporary folder is on disk. */
#define REMOTE_TAG "weft-remote-"

static char *remote_tmp_path(const char *dir) {
    const char *root = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    wf_buf b = {0};
    wf_buf_printf(&b, "%s/" REMOTE_TAG, root);
    for (const unsigned char *c = (const unsigned char *)dir; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
            *c == '_')
            wf_buf_append(&b, c, 1);
        else
            wf_buf_printf(&b, "%%%02X", *c);
    }
    wf_buf_printf(&b, ".tmp-%ld", (long)getpid());
    if (b.failed) {
        wf_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* The destination of a staging folder made by remote_tmp_path, malloc'ed;
 * NULL when `tmp` is a local checkpoint's temporary folder. */
static char *remote_dest(const char *tmp) {
    const char *base = strrchr(tmp, '/');
    base = base ? base + 1 : tmp;
    if (strncmp(base, REMOTE_TAG, strlen(REMOTE_TAG)) != 0) return NULL;
    const char *enc = base + strlen(REMOTE_TAG), *end = strstr(enc, ".tmp-");
    if (!end) return NULL;
    char *out = malloc((size_t)(end - enc) + 1), *o = out;
    if (!out) return NULL;
    for (const char *c = enc; c < end; c++) {
        unsigned v;
        if (*c == '%' && end - c >= 3 && sscanf(c + 1, "%2X", &v) == 1) *o++ = (char)v, c += 2;
        else *o++ = *c;
    }
    *o = 0;
    return out;
}

/* Uploads `name` of the staging folder `tmp` to its place below `dest`. */
static wf_status upload_one(const char *tmp, const char *dest, const char *name) {
    char src[WF_PATH_MAX];
    wf_buf url = {0};
    wf_status s = wf_path_join(src, sizeof src, tmp, name, NULL);
    wf_buf_printf(&url, "%s/%s", dest, name);
    if (s == WF_OK) s = url.failed ? wf_error(WF_ERR_NOMEM, "out of memory") : wf_store_upload(src, url.data);
    if (s != WF_OK) wf_error_wrap(s, "checkpoint upload: ");
    wf_buf_free(&url);
    return s;
}

char *wf__ckpt_tmp_path(const char *dir) {
    if (wf_store_is_remote(dir)) return remote_tmp_path(dir);
    const char *slash = strrchr(dir, '/');
    size_t plen = slash ? (size_t)(slash - dir + 1) : 0;
    size_t n = strlen(dir) + 48;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%.*s.tmp-%s.%ld", (int)plen, dir, dir + plen, (long)getpid());
    return out;
}

/* ---- data files ---- */

static void put_u32(unsigned char *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* The 64-byte header: magic, version, rank, world size, header size, step,
 * file size; the rest zero. */
static void make_header(unsigned char h[WF_CKPT_HEADER_BYTES], const wf_ckpt_plan *p, int rank, uint64_t step) {
    memset(h, 0, WF_CKPT_HEADER_BYTES);
    memcpy(h, WF_CKPT_DATA_MAGIC, 8);
    put_u32(h + 8, WF_CKPT_FORMAT_VERSION);
    put_u32(h + 12, (uint32_t)rank);
    put_u32(h + 16, (uint32_t)p->world_size);
    put_u32(h + 20, WF_CKPT_HEADER_BYTES);
    put_u64(h + 24, step);
    put_u64(h + 32, p->rank_bytes[rank]);
}

static const unsigned char *piece_src(const wf_ckpt_plan *p, const wf_ckpt_piece *pc) {
    return (const unsigned char *)(p->tensors[pc->tensor].data + pc->src);
}

wf_status wf__ckpt_stage(const wf_ckpt_plan *p, int rank, uint64_t step, unsigned char *image) {
    make_header(image, p, rank, step);
    for (size_t k = p->rank_first[rank]; k < p->rank_first[rank + 1]; k++) {
        const wf_ckpt_piece *pc = &p->pieces[k];
        wf_backend *be = p->tensors[pc->tensor].be; /* a backend's memory comes down through it */
        if (be)
            WF_TRY(wf_backend_download(be, image + pc->offset, piece_src(p, pc), pc->length));
        else
            memcpy(image + pc->offset, piece_src(p, pc), pc->length);
    }
    return WF_OK;
}

/* write() all of buf, in chunks (Linux moves at most ~2 GiB per call),
 * retrying after signals. */
static int write_all(int fd, const unsigned char *buf, uint64_t len) {
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)len;
        ssize_t w = write(fd, buf, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        len -= (uint64_t)w;
    }
    return 0;
}

wf_status wf__ckpt_write_data(const wf_ckpt_plan *p, int rank, const char *tmp_dir, uint64_t step,
                             const unsigned char *image, uint64_t *sums) {
    char name[64], path[WF_PATH_MAX];
    wf__ckpt_data_name(name, sizeof name, rank, p->world_size);
    WF_TRY(wf_path_join(path, sizeof path, tmp_dir, name, NULL));
    char *dest = remote_dest(tmp_dir);
    int made = 0;
    if (dest) {  /* every rank stages in a folder of its own machine */
        made = !wf_path_is_dir(tmp_dir);
        wf_status m = wf_mkdirs(tmp_dir);
        if (m != WF_OK) {
            free(dest);
            return m;
        }
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && dest && wf_mkdirs(tmp_dir) == WF_OK) /* another rank's rmdir came between */
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return wf_error(WF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int ok = 1;
    if (image) {
        for (size_t k = p->rank_first[rank]; k < p->rank_first[rank + 1]; k++)
            sums[k] = wf_hash64(image + p->pieces[k].offset, p->pieces[k].length);
        ok = write_all(fd, image, p->rank_bytes[rank]) == 0;
    } else {
        unsigned char h[WF_CKPT_HEADER_BYTES], zeros[WF_CKPT_ALIGN] = {0};
        make_header(h, p, rank, step);
        ok = write_all(fd, h, sizeof h) == 0;
        uint64_t pos = sizeof h;
        for (size_t k = p->rank_first[rank]; ok && k < p->rank_first[rank + 1]; k++) {
            const wf_ckpt_piece *pc = &p->pieces[k];
            ok = write_all(fd, zeros, pc->offset - pos) == 0;
            const unsigned char *src = piece_src(p, pc);
            sums[k] = wf_hash64(src, pc->length);
            ok = ok && write_all(fd, src, pc->length) == 0;
            pos = pc->offset + pc->length;
        }
        if (ok) ok = write_all(fd, zeros, p->rank_bytes[rank] - pos) == 0;
    }
    wf_status s = WF_OK;
    if (!ok) s = wf_error(WF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    else if (fsync(fd) != 0) s = wf_error(WF_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && s == WF_OK) s = wf_error(WF_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (dest) {
        if (s == WF_OK) s = upload_one(tmp_dir, dest, name);
        unlink(path); /* uploaded, or failed: the local copy is not needed either way */
        /* A folder this rank made on a machine without rank 0 goes when
         * empty (rmdir removes nothing else); rank 0's commit removes its
         * own, which ranks on its machine share. */
        if (made && rank != 0) rmdir(tmp_dir);
        free(dest);
    }
    return s;
}

/* ---- manifest ---- */

static json_t *int_array(const int64_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

wf_status wf__ckpt_write_manifest(const wf_ckpt_plan *p, const char *tmp_dir, uint64_t step,
                                 const json_t *state, const uint64_t *sums) {
    json_t *m = json_object();
    json_object_set_new(m, "format", json_string("weft-checkpoint"));
    json_object_set_new(m, "version", json_integer(WF_CKPT_FORMAT_VERSION));
    json_object_set_new(m, "step", json_integer((json_int_t)step));
    json_object_set_new(m, "world_size", json_integer(p->world_size));
    json_object_set_new(m, "byte_order", json_string("little"));
    json_t *files = json_array();
    for (int r = 0; r < p->world_size; r++) {
        char name[64];
        wf__ckpt_data_name(name, sizeof name, r, p->world_size);
        json_t *f = json_object();
        json_object_set_new(f, "name", json_string(name));
        json_object_set_new(f, "rank", json_integer(r));
        json_object_set_new(f, "bytes", json_integer((json_int_t)p->rank_bytes[r]));
        json_array_append_new(files, f);
    }
    json_object_set_new(m, "files", files);
    json_object_set_new(m, "state", state ? json_deep_copy(state) : json_object());
    json_t *tensors = json_array();
    for (size_t i = 0; i < p->n_tensors; i++) {
        const wf_ckpt_tensor *t = &p->tensors[i];
        json_t *e = json_object(), *pieces = json_array();
        json_object_set_new(e, "name", json_string(t->name));
        json_object_set_new(e, "dtype", json_string("F32"));
        json_object_set_new(e, "shape", int_array(t->shape, t->ndim));
        for (size_t k = 0; k < p->n_pieces; k++) {
            const wf_ckpt_piece *pc = &p->pieces[k];
            if (pc->tensor != i) continue;
            char hex[17];
            snprintf(hex, sizeof hex, "%016" PRIx64, sums[k]);
            json_t *je = json_object();
            json_object_set_new(je, "file", json_integer(pc->rank));
            json_object_set_new(je, "offsets", int_array(pc->off, t->ndim));
            json_object_set_new(je, "sizes", int_array(pc->size, t->ndim));
            json_object_set_new(je, "offset", json_integer((json_int_t)pc->offset));
            json_object_set_new(je, "length", json_integer((json_int_t)pc->length));
            json_object_set_new(je, "xxh3", json_string(hex));
            json_array_append_new(pieces, je);
        }
        json_object_set_new(e, "pieces", pieces);
        json_array_append_new(tensors, e);
    }
    json_object_set_new(m, "tensors", tensors);
    char *text = json_dumps(m, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(m);
    char path[WF_PATH_MAX];
    wf_status ps = wf_path_join(path, sizeof path, tmp_dir, WF_CKPT_MANIFEST, NULL);
    if (ps != WF_OK) {
        free(text);
        return ps;
    }
    if (!text) return wf_error(WF_ERR_NOMEM, "%s: cannot build the manifest", path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(text);
        return wf_error(WF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* the NUL becomes a final newline */
    wf_status s = WF_OK;
    if (write_all(fd, (const unsigned char *)text, len + 1) != 0)
        s = wf_error(WF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    else if (fsync(fd) != 0)
        s = wf_error(WF_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && s == WF_OK) s = wf_error(WF_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    free(text);
    return s;
}

/* ---- commit and directory housekeeping ---- */

static char *parent_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* `root/.trash-<name>.<pid>` for root/name. */
static char *trash_path(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path + 1) : 0;
    size_t n = strlen(path) + 48;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%.*s.trash-%s.%ld", (int)plen, path, path + plen, (long)getpid());
    return out;
}

wf_status wf__ckpt_commit(const char *tmp_dir, const char *dir) {
    if (wf_store_is_remote(dir)) { /* the manifest, last: the commit */
        wf_status s = upload_one(tmp_dir, dir, WF_CKPT_MANIFEST);
        wf_error_keep k = WF_ERROR_KEEP_INIT;
        wf_error_keep_note(&k, s);
        wf_status r = wf_remove_tree(tmp_dir);
        return s != WF_OK ? wf_error_keep_restore(&k) : r;
    }
    WF_TRY(wf_fsync_dir(tmp_dir));
    char *parent = parent_of(dir), *trash = NULL;
    if (!parent) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = WF_OK;
    if (wf_path_exists(dir)) {
        /* Replacing a checkpoint of the same step (e.g. after falling back
         * past a corrupt one): move it aside first, so that the name never
         * holds a mix of the two. */
        trash = trash_path(dir);
        if (!trash) s = wf_error(WF_ERR_NOMEM, "out of memory");
        else if (rename(dir, trash) != 0)
            s = wf_error(WF_ERR_IO, "%s: cannot move the old checkpoint aside: %s", dir, strerror(errno));
    }
    if (s == WF_OK && rename(tmp_dir, dir) != 0)
        s = wf_error(WF_ERR_IO, "%s: cannot rename %s into place: %s", dir, tmp_dir, strerror(errno));
    if (s == WF_OK) s = wf_fsync_dir(parent);
    if (s == WF_OK && trash) s = wf_remove_tree(trash);
    free(trash);
    free(parent);
    return s;
}

void wf_ckpt_step_dir(char *buf, size_t n, const char *root, uint64_t step) {
    snprintf(buf, n, "%s/step-%07" PRIu64, root, step);
}

/* Parses "step-<digits>" exactly; -1 if the name is something else. */
static int parse_step_name(const char *name, uint64_t *step) {
    if (strncmp(name, "step-", 5) != 0 || !name[5]) return -1;
    uint64_t v = 0;
    for (const char *c = name + 5; *c; c++) {
        if (*c < '0' || *c > '9' || v > UINT64_MAX / 10 - 1) return -1;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    *step = v;
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The committed checkpoints below an object-store root: the step-N
 * prefixes that hold a manifest. */
static wf_status list_remote(const char *root, uint64_t **steps, size_t *n) {
    wf_buf prefix = {0};
    wf_buf_printf(&prefix, "%s/", root);
    if (prefix.failed) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_store_entry *e = NULL;
    size_t ne = 0, cap = 0;
    wf_status s = wf_store_list(prefix.data, &e, &ne);
    for (size_t i = 0; s == WF_OK && i < ne; i++) {
        const char *rest = e[i].url + prefix.len, *slash = strchr(rest, '/');
        if (!slash || strcmp(slash + 1, WF_CKPT_MANIFEST) != 0) continue;
        char name[64];
        if ((size_t)(slash - rest) >= sizeof name) continue;
        memcpy(name, rest, (size_t)(slash - rest));
        name[slash - rest] = 0;
        uint64_t step;
        if (parse_step_name(name, &step) != 0) continue;
        s = WF_GROW(*steps, cap, *n + 1, 16);
        if (s == WF_OK) (*steps)[(*n)++] = step;
    }
    wf_store_list_free(e, ne);
    wf_buf_free(&prefix);
    if (s != WF_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return s;
    }
    if (*n) qsort(*steps, *n, sizeof **steps, cmp_u64);
    return WF_OK;
}

/* Removes a checkpoint from an object store: its manifest first, so that
 * it is invisible before any data file goes. */
static wf_status remove_remote(const char *dir) {
    wf_buf b = {0};
    wf_buf_printf(&b, "%s/%s", dir, WF_CKPT_MANIFEST);
    wf_status s = b.failed ? wf_error(WF_ERR_NOMEM, "out of memory") : wf_store_delete(b.data);
    wf_store_entry *e = NULL;
    size_t ne = 0;
    b.len = 0;
    wf_buf_printf(&b, "%s/", dir);
    if (s == WF_OK) s = wf_store_list(b.data, &e, &ne);
    for (size_t i = 0; s == WF_OK && i < ne; i++) s = wf_store_delete(e[i].url);
    wf_store_list_free(e, ne);
    wf_buf_free(&b);
    return s;
}

wf_status wf_ckpt_list(const char *root, uint64_t **steps, size_t *n) {
    *steps = NULL;
    *n = 0;
    if (wf_store_is_remote(root)) return list_remote(root, steps, n);
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return WF_OK;
        return wf_error(WF_ERR_IO, "%s: cannot list: %s", root, strerror(errno));
    }
    size_t cap = 0;
    wf_status s = WF_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint64_t step;
        if (parse_step_name(e->d_name, &step) != 0) continue;
        char path[WF_PATH_MAX];
        if (wf_path_join(path, sizeof path, root, e->d_name, NULL) != WF_OK || !wf_path_is_dir(path)) {
            wf_error_clear(); /* not a checkpoint of ours */
            continue;
        }
        s = WF_GROW(*steps, cap, *n + 1, 16);
        if (s != WF_OK) break;
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (s != WF_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return s;
    }
    if (*n) qsort(*steps, *n, sizeof **steps, cmp_u64);
    return WF_OK;
}

wf_status wf_ckpt_cleanup(const char *root, int *removed) {
    if (removed) *removed = 0;
    /* In an object store an interrupted save left data objects without a
     * manifest: invisible, and replaced by the next save of that step. */
    if (wf_store_is_remote(root)) return WF_OK;
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return WF_OK;
        return wf_error(WF_ERR_IO, "%s: cannot list: %s", root, strerror(errno));
    }
    wf_status s = WF_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && s == WF_OK) {
        if (strncmp(e->d_name, ".tmp-", 5) != 0 && strncmp(e->d_name, ".trash-", 7) != 0) continue;
        char path[WF_PATH_MAX];
        s = wf_path_join(path, sizeof path, root, e->d_name, NULL); /* never a cut path to remove */
        if (s == WF_OK) s = wf_remove_tree(path);
        if (s == WF_OK && removed) (*removed)++;
    }
    closedir(d);
    return s;
}

wf_status wf_ckpt_prune(const char *root, int keep_last, uint64_t keep_every, int *removed) {
    if (removed) *removed = 0;
    if (keep_last <= 0) return WF_OK;
    uint64_t *steps;
    size_t n;
    WF_TRY(wf_ckpt_list(root, &steps, &n));
    wf_status s = WF_OK;
    for (size_t i = 0; i + (size_t)keep_last < n && s == WF_OK; i++) {
        if (keep_every > 0 && steps[i] % keep_every == 0) continue;
        char path[4096];
        wf_ckpt_step_dir(path, sizeof path, root, steps[i]);
        if (wf_store_is_remote(root)) {
            s = remove_remote(path);
            if (s == WF_OK && removed) (*removed)++;
            continue;
        }
        char *trash = trash_path(path);
        if (!trash) {
            s = wf_error(WF_ERR_NOMEM, "out of memory");
            break;
        }
        if (rename(path, trash) != 0)
            s = wf_error(WF_ERR_IO, "%s: cannot remove an old checkpoint: %s", path, strerror(errno));
        else s = wf_remove_tree(trash);
        free(trash);
        if (s == WF_OK && removed) (*removed)++;
    }
    free(steps);
    if (s == WF_OK && removed && *removed && !wf_store_is_remote(root)) s = wf_fsync_dir(root);
    return s;
}

/* ---- scalar state ---- */

struct wf_ckpt_meta {
    json_t *state;
};

wf_ckpt_meta *wf_ckpt_meta_create(void) {
    wf_ckpt_meta *m = calloc(1, sizeof *m);
    if (m && !(m->state = json_object())) {
        free(m);
        m = NULL;
    }
    return m;
}

void wf_ckpt_meta_destroy(wf_ckpt_meta *m) {
    if (!m) return;
    json_decref(m->state);
    free(m);
}

const json_t *wf__ckpt_meta_json(const wf_ckpt_meta *m) { return m ? m->state : NULL; }

/* Stores v (stolen) at "section.name" or "name". */
static wf_status meta_put(wf_ckpt_meta *m, const char *key, json_t *v) {
    if (!v) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (!utf8_ok(key)) {
        json_decref(v);
        return wf_error(WF_ERR_INVALID, "checkpoint state key '%s' is not valid UTF-8", key);
    }
    const char *dot = strchr(key, '.');
    if (!*key || dot == key || (dot && !dot[1])) {
        json_decref(v);
        return wf_error(WF_ERR_INVALID, "checkpoint state key '%s' is not 'name' or 'section.name'", key);
    }
    if (!dot) {
        if (json_is_object(json_object_get(m->state, key))) {
            /* Replacing it would drop every "key.name" set before. */
            json_decref(v);
            return wf_error(WF_ERR_INVALID, "checkpoint state key '%s' is already a section ('%s.name')", key, key);
        }
        return json_object_set_new(m->state, key, v) == 0 ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    }
    char section[128];
    if ((size_t)(dot - key) >= sizeof section) {
        json_decref(v);
        return wf_error(WF_ERR_INVALID, "checkpoint state key '%s': section name too long", key);
    }
    memcpy(section, key, (size_t)(dot - key));
    section[dot - key] = '\0';
    json_t *sec = json_object_get(m->state, section);
    if (!sec) {
        sec = json_object();
        json_object_set_new(m->state, section, sec);
    } else if (!json_is_object(sec)) {
        json_decref(v);
        return wf_error(WF_ERR_INVALID, "checkpoint state key '%s': '%s' is already a value", key, section);
    }
    return json_object_set_new(sec, dot + 1, v) == 0 ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
}

wf_status wf_ckpt_meta_set_u64(wf_ckpt_meta *m, const char *key, uint64_t v) {
    if (v > (uint64_t)INT64_MAX)
        return wf_error(WF_ERR_RANGE, "checkpoint state %s = %" PRIu64 " is above 2^63 - 1", key, v);
    return meta_put(m, key, json_integer((json_int_t)v));
}

wf_status wf_ckpt_meta_set_f64(wf_ckpt_meta *m, const char *key, double v) {
    return meta_put(m, key, json_real(v));
}

wf_status wf_ckpt_meta_set_str(wf_ckpt_meta *m, const char *key, const char *v) {
    if (v && !utf8_ok(v)) return wf_error(WF_ERR_INVALID, "checkpoint state %s: the value is not valid UTF-8", key);
    return meta_put(m, key, json_string(v ? v : ""));
}

wf_status wf_ckpt_meta_set_model_config(wf_ckpt_meta *m, const wf_model_config *c) {
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.dim", (uint64_t)c->dim));
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.n_layers", (uint64_t)c->n_layers));
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.n_heads", (uint64_t)c->n_heads));
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.n_kv_heads", (uint64_t)c->n_kv_heads));
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.vocab_size", (uint64_t)c->vocab_size));
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.ffn_hidden_dim", (uint64_t)wf_model_config_hidden_dim(c)));
    WF_TRY(wf_ckpt_meta_set_u64(m, "model.max_seq_len", (uint64_t)c->max_seq_len));
    WF_TRY(wf_ckpt_meta_set_f64(m, "model.norm_eps", c->norm_eps));
    WF_TRY(wf_ckpt_meta_set_f64(m, "model.rope_theta", c->rope_theta));
    WF_TRY(wf_ckpt_meta_set_f64(m, "model.init_std", c->init_std));
    return wf_ckpt_meta_set_u64(m, "model.tied_embeddings", (uint64_t)(c->tied_embeddings != 0));
}
