/* The pipeline's files: the JSONL.zst output shards, the hash logs that let
 * a resumed run rebuild its dedup tables, and what is done to the output
 * directory on resume (roll back to the last checkpoint) or on --force
 * (delete the previous run's files, only those).
 *
 * A shard is written as OUT/<lang>/<bucket>_<NNNNN>.jsonl.zst.part and
 * renamed to its final name when it is full or the run ends, so a file
 * with the final name is always complete. At a checkpoint (the end of each
 * input) every open shard's zstd frame is ended and the file fsynced, so
 * its size then is a clean cut: a resumed run truncates the .part back to
 * it and appends new frames, and the bytes come out the same as in a run
 * that never stopped. Layout: docs/formats/prep-output.md. */
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

wf_status wf__prep_output_init(prep_output *o, const char *dir, uint64_t shard_bytes, int level) {
    memset(o, 0, sizeof *o);
    o->dir = strdup(dir);
    if (!o->dir) return wf_error(WF_ERR_NOMEM, "out of memory");
    o->shard_bytes = shard_bytes;
    o->level = level;
    return WF_OK;
}

static void shard_path(const prep_output *o, const prep_writer *w, int64_t shard, int part, char *out,
                       size_t cap) {
    snprintf(out, cap, "%s/%s/%s_%05lld.jsonl.zst%s", o->dir, w->lang, w->bucket, (long long)shard,
             part ? PART_SUFFIX : "");
}

static prep_writer *find_writer(prep_output *o, const char *lang, const char *bucket, int create) {
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->w[i].lang, lang) == 0 && strcmp(o->w[i].bucket, bucket) == 0) return &o->w[i];
    if (!create) return NULL;
    if (WF_GROW(o->w, o->cap, o->n + 1, 16) != WF_OK) return NULL;
    prep_writer *w = &o->w[o->n++];
    memset(w, 0, sizeof *w);
    snprintf(w->lang, sizeof w->lang, "%s", lang);
    snprintf(w->bucket, sizeof w->bucket, "%s", bucket);
    return w;
}

static wf_status open_part(prep_output *o, prep_writer *w) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", o->dir, w->lang);
    WF_TRY(wf_mkdirs(dir));
    shard_path(o, w, w->shard, 1, path, sizeof path);
    w->fp = fopen(path, "ab");
    if (!w->fp) return wf_error(WF_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (!cc) return wf_error(WF_ERR_NOMEM, "out of memory for a zstd context");
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, o->level);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    w->cctx = cc;
    return WF_OK;
}

/* Feeds data (or, with end, the end of the frame) through zstd to the file. */
static wf_status zwrite(prep_output *o, prep_writer *w, const char *data, size_t len, int end) {
    char buf[1 << 16];
    ZSTD_inBuffer in = {data, len, 0};
    for (;;) {
        ZSTD_outBuffer ob = {buf, sizeof buf, 0};
        size_t r = ZSTD_compressStream2(w->cctx, &ob, &in, end ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(r)) return wf_error(WF_ERR_INTERNAL, "zstd: %s", ZSTD_getErrorName(r));
        if (ob.pos && fwrite(buf, 1, ob.pos, w->fp) != ob.pos) {
            char path[4200];
            shard_path(o, w, w->shard, 1, path, sizeof path);
            return wf_error(WF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        if (end ? r == 0 : in.pos == in.size) return WF_OK;
    }
}

static wf_status sync_file(prep_output *o, prep_writer *w) {
    char path[4200];
    shard_path(o, w, w->shard, 1, path, sizeof path);
    if (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0)
        return wf_error(WF_ERR_IO, "%s: cannot flush to disk: %s", path, strerror(errno));
    return WF_OK;
}

/* Ends the open shard of w and gives it its final name. */
static wf_status close_shard(prep_output *o, prep_writer *w, prep_stats *st) {
    char part[4200], final[4200], dir[4096];
    shard_path(o, w, w->shard, 1, part, sizeof part);
    shard_path(o, w, w->shard, 0, final, sizeof final);
    int exists = w->fp || w->part_bytes; /* open now, or resumed with nothing written since */
    if (w->fp) {
        if (w->dirty) WF_TRY(zwrite(o, w, NULL, 0, 1));
        WF_TRY(sync_file(o, w));
        fclose(w->fp);
        w->fp = NULL;
        ZSTD_freeCCtx(w->cctx);
        w->cctx = NULL;
        w->dirty = 0;
    }
    if (exists) {
        if (rename(part, final) != 0)
            return wf_error(WF_ERR_IO, "cannot rename %s to %s: %s", part, final, strerror(errno));
        snprintf(dir, sizeof dir, "%s/%s", o->dir, w->lang);
        WF_TRY(wf_fsync_dir(dir));
        if (st) st->extra[E_SHARDS]++;
    }
    w->shard++;
    w->raw_bytes = 0;
    w->part_bytes = 0;
    return WF_OK;
}

wf_status wf__prep_output_write(prep_output *o, const char *lang, const char *bucket, const char *line,
                            size_t len, prep_stats *st) {
    prep_writer *w = find_writer(o, lang, bucket, 1);
    if (!w) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (!w->fp) WF_TRY(open_part(o, w));
    WF_TRY(zwrite(o, w, line, len, 0));
    w->dirty = 1;
    w->raw_bytes += len;
    if (w->raw_bytes >= o->shard_bytes) WF_TRY(close_shard(o, w, st));
    return WF_OK;
}

wf_status wf__prep_output_checkpoint(prep_output *o) {
    for (size_t i = 0; i < o->n; i++) {
        prep_writer *w = &o->w[i];
        if (!w->fp || !w->dirty) continue;
        WF_TRY(zwrite(o, w, NULL, 0, 1));
        w->dirty = 0;
        WF_TRY(sync_file(o, w));
        long pos = ftell(w->fp);
        if (pos < 0) return wf_error(WF_ERR_IO, "cannot tell the size of a shard of %s/%s", w->lang, w->bucket);
        w->part_bytes = (uint64_t)pos;
    }
    /* New language folders must survive a crash too. */
    return wf_fsync_dir(o->dir);
}

wf_status wf__prep_output_finish(prep_output *o, prep_stats *st) {
    for (size_t i = 0; i < o->n; i++) {
        prep_writer *w = &o->w[i];
        if (w->fp || w->part_bytes) WF_TRY(close_shard(o, w, st));
    }
    return WF_OK;
}

void wf__prep_output_close(prep_output *o) {
    for (size_t i = 0; i < o->n; i++) {
        if (o->w[i].fp) fclose(o->w[i].fp);
        ZSTD_freeCCtx(o->w[i].cctx);
    }
    free(o->w);
    free(o->dir);
    memset(o, 0, sizeof *o);
}

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
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        if (!wf_path_is_dir(sub)) continue;
        DIR *sd = opendir(sub);
        if (!sd) continue;
        struct dirent *f;
        while (s == WF_OK && (f = readdir(sd)) != NULL) {
            char bucket[8];
            int64_t shard;
            int part;
            if (!parse_shard_name(f->d_name, bucket, &shard, &part)) continue;
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
            s = fn(ctx, e->d_name, bucket, shard, part, path);
        }
        closedir(sd);
    }
    closedir(d);
    return s;
}

static wf_status rollback_one(void *ctx, const char *lang, const char *bucket, int64_t shard, int part,
                              const char *path) {
    prep_output *o = ctx;
    prep_writer *w = find_writer(o, lang, bucket, 0);
    if (!w || shard > w->shard || (shard == w->shard && w->part_bytes == 0)) {
        /* Written after the checkpoint. */
        if (unlink(path) != 0) return wf_error(WF_ERR_IO, "%s: cannot delete: %s", path, strerror(errno));
        return WF_OK;
    }
    if (shard < w->shard) {
        if (part)
            return wf_error(WF_ERR_FORMAT,
                            "%s: a shard the state file records as finished is still a .part: the output "
                            "directory is damaged; rerun with --force to start over",
                            path);
        return WF_OK;
    }
    /* The open shard: back to .part, cut to the checkpoint. */
    char want[4200];
    shard_path(o, w, shard, 1, want, sizeof want);
    if (!part && rename(path, want) != 0)
        return wf_error(WF_ERR_IO, "cannot rename %s to %s: %s", path, want, strerror(errno));
    struct stat stt;
    if (stat(want, &stt) != 0 || (uint64_t)stt.st_size < w->part_bytes)
        return wf_error(WF_ERR_FORMAT,
                        "%s is shorter (%lld bytes) than the state file records (%llu): the output "
                        "directory is damaged; rerun with --force to start over",
                        want, (long long)stt.st_size, (unsigned long long)w->part_bytes);
    if (truncate(want, (off_t)w->part_bytes) != 0)
        return wf_error(WF_ERR_IO, "%s: cannot truncate: %s", want, strerror(errno));
    return WF_OK;
}

static wf_status remove_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return WF_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, ".tmp.")) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    return WF_OK;
}

wf_status wf__prep_output_rollback(prep_output *o) {
    WF_TRY(each_shard(o->dir, rollback_one, o));
    for (size_t i = 0; i < o->n; i++) {
        prep_writer *w = &o->w[i];
        if (!w->part_bytes) continue;
        char path[4200];
        shard_path(o, w, w->shard, 1, path, sizeof path);
        if (!wf_path_exists(path))
            return wf_error(WF_ERR_FORMAT,
                            "%s is missing but the state file records %llu bytes in it: the output "
                            "directory is damaged; rerun with --force to start over",
                            path, (unsigned long long)w->part_bytes);
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/_prep", o->dir);
    remove_tmp_files(p);
    snprintf(p, sizeof p, "%s/_prep/hashes", o->dir);
    remove_tmp_files(p);
    return remove_tmp_files(o->dir);
}

static wf_status wipe_one(void *ctx, const char *lang, const char *bucket, int64_t shard, int part,
                          const char *path) {
    (void)ctx, (void)lang, (void)bucket, (void)shard, (void)part;
    if (unlink(path) != 0) return wf_error(WF_ERR_IO, "%s: cannot delete: %s", path, strerror(errno));
    return WF_OK;
}

wf_status wf__prep_output_wipe(const char *dir) {
    WF_TRY(each_shard(dir, wipe_one, NULL));
    char p[4200];
    snprintf(p, sizeof p, "%s/_prep", dir);
    if (wf_path_is_dir(p)) WF_TRY(wf_remove_tree(p));
    snprintf(p, sizeof p, "%s/stats.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/stats.txt", dir);
    unlink(p);
    /* Language folders left empty go too. */
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (wf_path_is_dir(p)) rmdir(p); /* fails, harmlessly, unless empty */
        }
        closedir(d);
    }
    return WF_OK;
}

/* ---- hash logs ---- */

wf_status wf__prep_u64vec_push(u64vec *v, uint64_t x) {
    WF_TRY(WF_GROW(v->v, v->cap, v->n + 1, 1024));
    v->v[v->n++] = x;
    return WF_OK;
}

void wf__prep_u64vec_free(u64vec *v) {
    free(v->v);
    memset(v, 0, sizeof *v);
}

#define HASHLOG_MAGIC "WFPRPHL1"

static void put_le64(unsigned char *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> (8 * i));
}
static uint64_t get_le64(const unsigned char *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static void hashlog_path(const char *dir, size_t input, char *out, size_t cap) {
    snprintf(out, cap, "%s/_prep/hashes/%05zu.bin", dir, input);
}

wf_status wf__prep_hashlog_write(const char *dir, size_t input, const u64vec *par, const u64vec *lsh) {
    char path[4200], d[4200];
    snprintf(d, sizeof d, "%s/_prep/hashes", dir);
    WF_TRY(wf_mkdirs(d));
    hashlog_path(dir, input, path, sizeof path);
    size_t n = 32 + 8 * (par->n + lsh->n);
    unsigned char *buf = malloc(n);
    if (!buf) return wf_error(WF_ERR_NOMEM, "out of memory writing %s", path);
    memcpy(buf, HASHLOG_MAGIC, 8);
    put_le64(buf + 8, par->n);
    put_le64(buf + 16, lsh->n);
    unsigned char *p = buf + 32;
    for (size_t i = 0; i < par->n; i++, p += 8) put_le64(p, par->v[i]);
    for (size_t i = 0; i < lsh->n; i++, p += 8) put_le64(p, lsh->v[i]);
    put_le64(buf + 24, wf_hash64(buf + 32, n - 32));
    wf_status s = wf_file_write_atomic(path, buf, n);
    free(buf);
    return s;
}

wf_status wf__prep_hashlog_read(const char *dir, size_t input, u64vec *par, u64vec *lsh) {
    char path[4200];
    hashlog_path(dir, input, path, sizeof path);
    char *data;
    size_t len;
    wf_status s = wf_file_read(path, &data, &len);
    if (s != WF_OK)
        return wf_error(s, "%s: cannot read the dedup hashes of finished input %zu (%s); rerun with "
                           "--force to start over", path, input, wf_error_msg());
    const unsigned char *u = (const unsigned char *)data;
    s = WF_OK;
    if (len < 32 || memcmp(u, HASHLOG_MAGIC, 8) != 0) {
        s = wf_error(WF_ERR_FORMAT, "%s: not a weft prep hash log; rerun with --force", path);
    } else {
        uint64_t np = get_le64(u + 8), nl = get_le64(u + 16);
        if (np > len / 8 || nl > len / 8 || 32 + 8 * (np + nl) != len)
            s = wf_error(WF_ERR_FORMAT, "%s: %zu bytes do not hold the %llu + %llu hashes the header "
                         "says; rerun with --force", path, len, (unsigned long long)np, (unsigned long long)nl);
        else if (wf_hash64(u + 32, len - 32) != get_le64(u + 24))
            s = wf_error(WF_ERR_CHECKSUM, "%s: checksum mismatch; rerun with --force", path);
        for (uint64_t i = 0; s == WF_OK && i < np; i++) s = wf__prep_u64vec_push(par, get_le64(u + 32 + 8 * i));
        for (uint64_t i = 0; s == WF_OK && i < nl; i++) s = wf__prep_u64vec_push(lsh, get_le64(u + 32 + 8 * (np + i)));
    }
    free(data);
    return s;
}
