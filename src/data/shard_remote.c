/* A token shard in an object store (s3://), read by ranges instead of a
 * whole local copy (docs/storage.md, "Datasets").
 *
 * Open: a HEAD for the size, one ranged GET for the header and one for the
 * document index, both checked as a mapped shard's are (shard.c); with
 * verify, the payload is streamed once through the hasher.
 *
 * Reads: the token section is cut into blocks of store.read_ahead bytes.
 * A read that goes on from the last one (it starts at or after the last
 * one's start and at most 1/8 block past its end: an eval pass, the
 * validation split, a loader's rows without shuffle, other ranks' rows
 * skipped) is served from whole blocks, two of them in memory (double
 * buffering): while the caller copies from block k, block k + 1 is fetched
 * on a background thread. Any other read (a shuffled loader's sample, the
 * first read) is one ranged GET of exactly its bytes, and frees the
 * blocks: random reads never fetch more than they use.
 *
 * Cache (a directory given by store.cache_dir or WEFT_STORE_CACHE): a copy
 * there is used only when it passes the payload checksum and has the
 * object's header, and is then mapped like a local shard. Otherwise every
 * read goes by blocks, each block is also written into a partial copy
 * (<copy>.part-<pid>), and once every block is there the copy is checked
 * against the header's payload checksum and renamed into place: the cache
 * is filled by the first pass over the shard, whatever its order. A jump
 * reads a block already in the partial copy from there (its own bytes),
 * and keeps no buffers after it.
 *
 * One mutex per shard serializes its reads (the loader has one reading
 * thread; eval and the Python package read from one thread too). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shard_impl.h"
#include "weft/buf.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/store.h"

#define NONE UINT64_MAX

typedef struct {
    const char *url;
    uint64_t offset;
    size_t len;
    unsigned char *dst;
    wf_status status;
} ahead_job;

struct wf_shard_remote {
    pthread_mutex_t mu;
    uint64_t t0, t1;          /* the token section's bytes [t0, t1) */
    size_t block;             /* bytes a block (the last one may be shorter) */
    uint64_t n_blocks;
    unsigned char *index;     /* the document index (doc_starts points here) */
    unsigned char *buf[2];    /* the double buffer, allocated when reading goes forward */
    uint64_t held[2];         /* the block each buffer holds, NONE for none */
    int cur;                  /* the buffer served last */
    uint64_t prev_a, prev_b;  /* the last read's bytes [prev_a, prev_b); NONE before the first */
    /* read-ahead: one fetch at a time, into buf[ahead_slot] */
    pthread_t thread;
    int running, ahead_slot;
    uint64_t ahead_k;
    ahead_job job;
    /* the cache's partial copy */
    char *cache_path, *part_path;
    int part_fd;
    unsigned char *have;      /* (n_blocks) 1 when the block is in the partial copy */
    uint64_t n_have;
    wf_mmap done;             /* the completed copy, once it passed its checksum */
    unsigned char *whole;     /* wf_shard_load's bytes */
};

static void decode(int tb, const unsigned char *p, size_t n, int32_t *out) {
    if (tb == 2)
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)wf_le16_get_(p + 2 * i);
    else
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)wf_le32_get_(p + 4 * i);
}

static void *ahead_main(void *arg) {
    ahead_job *j = arg;
    j->status = wf_store_read_range(j->url, j->offset, j->len, j->dst);
    if (j->status != WF_OK) wf_error_clear(); /* the reader fetches the block again itself, with its own error */
    return NULL;
}

static void ahead_join(wf_shard_remote *r) {
    if (!r->running) return;
    pthread_join(r->thread, NULL);
    r->running = 0;
    if (r->job.status == WF_OK) r->held[r->ahead_slot] = r->ahead_k;
}

static void free_blocks(wf_shard_remote *r) {
    ahead_join(r);
    for (int i = 0; i < 2; i++) {
        free(r->buf[i]);
        r->buf[i] = NULL;
        r->held[i] = NONE;
    }
}

static uint64_t block_len(const wf_shard_remote *r, uint64_t k) {
    uint64_t off = r->t0 + k * r->block;
    return r->t1 - off < r->block ? r->t1 - off : r->block;
}

/* Drops the partial copy (a failed write, a copy that fails its checksum):
 * the cache is optional, the shard is still read from the store. */
static void cache_drop(wf_shard_remote *r) {
    if (r->part_fd >= 0) close(r->part_fd);
    r->part_fd = -1;
    if (r->part_path) unlink(r->part_path);
}

/* Block k (in buf[slot]) into the partial copy; the last one completes it. */
static void cache_put(wf_shard *s, wf_shard_remote *r, uint64_t k, int slot) {
    if (r->part_fd < 0 || r->have[k]) return;
    size_t len = (size_t)block_len(r, k);
    for (size_t done = 0; done < len;) {
        ssize_t w = pwrite(r->part_fd, r->buf[slot] + done, len - done, (off_t)(r->t0 + k * r->block + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            WF_WARN("store: writing the cached copy %s failed (%s): reading %s from the store only", r->part_path,
                    w < 0 ? strerror(errno) : "no room", s->path);
            cache_drop(r);
            return;
        }
        done += (size_t)w;
    }
    r->have[k] = 1;
    if (++r->n_have < r->n_blocks) return;
    close(r->part_fd);
    r->part_fd = -1;
    wf_mmap m = {0};
    uint64_t got = 0;
    if (wf_mmap_open(&m, r->part_path) == WF_OK && m.size == s->size)
        got = wf_hash64(m.data + r->t0, (size_t)(s->size - r->t0));
    else
        wf_error_clear();
    if (got != s->payload_hash || !m.data) {
        WF_WARN("store: the copy of %s read into %s hashes to %016" PRIx64 ", its header says %016" PRIx64
                ": not kept (the object changed while read?)",
                s->path, r->part_path, got, s->payload_hash);
        wf_mmap_close(&m);
        cache_drop(r);
        return;
    }
    if (rename(r->part_path, r->cache_path) != 0) {
        WF_WARN("store: cannot rename %s to %s: %s", r->part_path, r->cache_path, strerror(errno));
        wf_mmap_close(&m);
        cache_drop(r);
        return;
    }
    WF_INFO("store: %s is now cached in %s", s->path, r->cache_path);
    r->done = m; /* from now on the shard is read from the copy */
}

/* Makes buf[slot] hold block k: from the partial copy when it is there,
 * else by a ranged GET (and then into the partial copy). */
static wf_status fetch_block(wf_shard *s, wf_shard_remote *r, uint64_t k, int slot) {
    if (!r->buf[slot] && !(r->buf[slot] = malloc(r->block)))
        return wf_error(WF_ERR_NOMEM, "%s: out of memory for a read block of %zu bytes", s->path, r->block);
    r->held[slot] = NONE;
    uint64_t off = r->t0 + k * r->block;
    size_t len = (size_t)block_len(r, k);
    if (r->part_fd >= 0 && r->have[k]) {
        for (size_t got = 0; got < len;) {
            ssize_t n = pread(r->part_fd, r->buf[slot] + got, len - got, (off_t)(off + got));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0)
                return wf_error(WF_ERR_IO, "%s: reading the cached copy %s: %s", s->path, r->part_path,
                                n < 0 ? strerror(errno) : "it got shorter");
            got += (size_t)n;
        }
    } else {
        WF_TRY(wf_store_read_range(s->path, off, len, r->buf[slot]));
        cache_put(s, r, k, slot);
    }
    r->held[slot] = k;
    return WF_OK;
}

/* The buffer holding block k, fetching it (or waiting for the read-ahead
 * that fetches it) when none does. */
static wf_status get_block(wf_shard *s, wf_shard_remote *r, uint64_t k, int *slot) {
    for (int i = 0; i < 2; i++)
        if (r->held[i] == k && !(r->running && r->ahead_slot == i)) {
            *slot = i;
            return WF_OK;
        }
    if (r->running) {
        ahead_join(r);
        if (r->held[r->ahead_slot] == k) {
            *slot = r->ahead_slot;
            cache_put(s, r, k, *slot);
            return WF_OK;
        }
    }
    *slot = 1 - r->cur;
    return fetch_block(s, r, k, *slot);
}

/* Starts fetching block k into the buffer not served last. */
static void start_ahead(wf_shard *s, wf_shard_remote *r, uint64_t k) {
    if (k >= r->n_blocks || r->running || r->held[0] == k || r->held[1] == k) return;
    if (r->part_fd >= 0 && r->have[k]) return; /* a pread away */
    int slot = 1 - r->cur;
    if (!r->buf[slot] && !(r->buf[slot] = malloc(r->block))) return; /* read-ahead is only an optimisation */
    r->held[slot] = NONE;
    r->job = (ahead_job){s->path, r->t0 + k * r->block, (size_t)block_len(r, k), r->buf[slot], WF_OK};
    r->ahead_slot = slot;
    r->ahead_k = k;
    if (pthread_create(&r->thread, NULL, ahead_main, &r->job) == 0) r->running = 1;
}

/* `len` bytes at `off` of the partial copy, decoded into out. */
static wf_status pread_part(wf_shard *s, wf_shard_remote *r, uint64_t off, size_t len, int32_t *out) {
    unsigned char *tmp = malloc(len);
    if (!tmp) return wf_error(WF_ERR_NOMEM, "%s: out of memory", s->path);
    wf_status st = WF_OK;
    for (size_t got = 0; got < len;) {
        ssize_t k = pread(r->part_fd, tmp + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            st = wf_error(WF_ERR_IO, "%s: reading the cached copy %s: %s", s->path, r->part_path,
                          k < 0 ? strerror(errno) : "it got shorter");
            break;
        }
        got += (size_t)k;
    }
    if (st == WF_OK) decode(s->token_bytes, tmp, len / (size_t)s->token_bytes, out);
    free(tmp);
    return st;
}

static wf_status fetch_locked(wf_shard *s, wf_shard_remote *r, uint64_t start, size_t n, int32_t *out) {
    const int tb = s->token_bytes;
    const uint64_t a = r->t0 + start * (uint64_t)tb, b = a + (uint64_t)n * (uint64_t)tb;
    if (r->done.data) {
        decode(tb, r->done.data + a, n, out);
        return WF_OK;
    }
    const uint64_t k0 = (a - r->t0) / r->block, k1 = (b - 1 - r->t0) / r->block;
    const int forward = r->prev_a != NONE && a >= r->prev_a && a <= r->prev_b + r->block / 8;
    r->prev_a = a, r->prev_b = b;
    if (!forward && r->part_fd < 0) { /* a jump: exactly the bytes asked for */
        free_blocks(r);
        unsigned char *tmp = malloc((size_t)(b - a));
        if (!tmp) return wf_error(WF_ERR_NOMEM, "%s: out of memory", s->path);
        wf_status st = wf_store_read_range(s->path, a, (size_t)(b - a), tmp);
        if (st == WF_OK) decode(tb, tmp, n, out);
        free(tmp);
        return st;
    }
    /* Reading in order, or a jump while the cache fills: by whole blocks
     * (a jump's block goes into the partial copy, and one already there
     * is read from it, exactly the bytes asked for). */
    if (!forward) free_blocks(r);
    size_t done = 0;
    for (uint64_t k = k0; k <= k1; k++) {
        uint64_t boff = r->t0 + k * r->block;
        uint64_t from = a + (uint64_t)done * (uint64_t)tb - boff;
        uint64_t avail = (block_len(r, k) - from) / (uint64_t)tb;
        size_t m = n - done < avail ? n - done : (size_t)avail;
        if (!forward && r->part_fd >= 0 && r->have[k]) {
            WF_TRY(pread_part(s, r, boff + from, m * (size_t)tb, out + done));
            done += m;
            continue;
        }
        int slot;
        WF_TRY(get_block(s, r, k, &slot));
        r->cur = slot;
        decode(tb, r->buf[slot] + from, m, out + done);
        done += m;
        if (r->done.data) { /* that block completed the cached copy */
            free_blocks(r);
            if (done < n) decode(tb, r->done.data + a + (uint64_t)done * (uint64_t)tb, n - done, out + done);
            return WF_OK;
        }
    }
    if (forward) start_ahead(s, r, k1 + 1);
    else free_blocks(r); /* a jump keeps no buffers: many shards filling at once stay small */
    return WF_OK;
}

wf_status wf__shard_fetch_remote(const wf_shard *cs, uint64_t start, size_t n, int32_t *out) {
    if (n == 0) return WF_OK;
    wf_shard *s = (wf_shard *)cs; /* the shard's read state changes; its contents do not */
    wf_shard_remote *r = s->remote;
    if (!r) return wf_error(WF_ERR_INTERNAL, "%s: not an open shard", s->path);
    pthread_mutex_lock(&r->mu);
    wf_status st = fetch_locked(s, r, start, n, out);
    pthread_mutex_unlock(&r->mu);
    return st;
}

/* The payload [t0, size) streamed once through the hasher and the
 * vocabulary check (verify on open). */
static wf_status verify_remote(wf_shard *s, wf_shard_remote *r) {
    size_t cap = r->block;
    unsigned char *buf = malloc(cap);
    wf_hasher *h = wf_hasher_create();
    wf_status st = buf && h ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
    const int tb = s->token_bytes;
    for (uint64_t off = r->t0; st == WF_OK && off < s->size;) {
        size_t len = s->size - off < cap ? (size_t)(s->size - off) : cap;
        st = wf_store_read_range(s->path, off, len, buf);
        if (st != WF_OK) break;
        wf_hasher_update(h, buf, len);
        if (off < r->t1) {
            uint64_t end = off + len < r->t1 ? off + len : r->t1;
            st = wf__shard_check_tokens(s, buf, (off - r->t0) / (uint64_t)tb, (end - off) / (uint64_t)tb);
        }
        off += len;
    }
    if (st == WF_OK) {
        uint64_t got = wf_hasher_digest(h);
        if (got != s->payload_hash)
            st = wf_error(WF_ERR_CHECKSUM,
                          "%s: payload checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                          "): the tokens or document index are corrupt; re-run `weft tokenize`",
                          s->path, s->payload_hash, got);
    }
    wf_hasher_destroy(h);
    free(buf);
    return st;
}

/* A complete copy in the cache, used when it passes its checksums and has
 * the object's header (so it is this object's copy, not an older one's). */
static int use_cached(wf_shard *s, const char *cpath, const unsigned char *header) {
    struct stat sb;
    if (stat(cpath, &sb) != 0) return 0;
    wf_shard c = {0};
    c.path = (char *)cpath;
    wf_status st = wf__shard_open_mapped(&c, cpath, 1);
    if (st == WF_OK && c.map.size == s->size && memcmp(c.map.data, header, WF_SHARD_HEADER_SIZE) == 0) {
        char *url = s->path;
        *s = c;
        s->path = url;
        return 1;
    }
    WF_WARN("store: the cached copy %s %s: reading %s from the store again", cpath,
            st != WF_OK ? wf_error_msg() : "is of another version of the object", s->path);
    wf_error_clear();
    wf_mmap_close(&c.map);
    unlink(cpath);
    return 0;
}

/* The partial copy that the reads fill; on any failure the shard is read
 * without one (with a warning). */
static void cache_begin(wf_shard *s, wf_shard_remote *r, const unsigned char *header, uint64_t index_offset) {
    wf_buf part = {0};
    wf_buf_printf(&part, "%s.part-%ld", r->cache_path, (long)getpid());
    char *dir = strdup(r->cache_path);
    wf_status st = part.failed || !dir ? wf_error(WF_ERR_NOMEM, "out of memory") : WF_OK;
    if (st == WF_OK) {
        *strrchr(dir, '/') = 0;
        st = wf_mkdirs(dir);
    }
    free(dir);
    r->have = st == WF_OK ? calloc(r->n_blocks, 1) : NULL;
    if (st == WF_OK && !r->have) st = wf_error(WF_ERR_NOMEM, "out of memory");
    int fd = st == WF_OK ? open(part.data, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    size_t ilen = (size_t)(s->size - index_offset);
    if (st == WF_OK &&
        (fd < 0 || ftruncate(fd, (off_t)s->size) != 0 ||
         pwrite(fd, header, WF_SHARD_HEADER_SIZE, 0) != (ssize_t)WF_SHARD_HEADER_SIZE ||
         pwrite(fd, r->index, ilen, (off_t)index_offset) != (ssize_t)ilen))
        st = wf_error(WF_ERR_IO, "%s: %s", part.data, strerror(errno));
    if (st != WF_OK) {
        WF_WARN("store: no cached copy of %s: %s", s->path, wf_error_msg());
        wf_error_clear();
        if (fd >= 0) close(fd), unlink(part.data);
        wf_buf_free(&part);
        return;
    }
    r->part_fd = fd;
    r->part_path = part.data;
}

wf_status wf__shard_open_remote(wf_shard *s, int verify) {
    wf_store_stat ost;
    WF_TRY(wf_store_head(s->path, &ost));
    unsigned char h[WF_SHARD_HEADER_SIZE];
    uint64_t tokens_offset = 0, index_offset = 0;
    if (ost.size >= WF_SHARD_HEADER_SIZE) WF_TRY(wf_store_read_range(s->path, 0, sizeof h, h));
    WF_TRY(wf__shard_check_header(s, h, ost.size, &tokens_offset, &index_offset));
    char *cpath = NULL;
    WF_TRY(wf_store_cache_path(s->path, &cpath));
    if (cpath && use_cached(s, cpath, h)) {
        WF_INFO("store: %s from its cached copy %s", s->path, cpath);
        free(cpath);
        return WF_OK;
    }
    wf_shard_remote *r = calloc(1, sizeof *r);
    if (!r) {
        free(cpath);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&r->mu, NULL);
    s->remote = r;
    r->cache_path = cpath;
    r->part_fd = -1;
    r->held[0] = r->held[1] = r->prev_a = r->prev_b = NONE;
    r->t0 = tokens_offset;
    r->t1 = tokens_offset + s->n_tokens * (uint64_t)s->token_bytes;
    r->block = wf_store_read_ahead();
    if (r->block > r->t1 - r->t0) r->block = (size_t)(r->t1 - r->t0); /* a whole multiple of the token size */
    r->n_blocks = (r->t1 - r->t0 + r->block - 1) / r->block;
    r->index = malloc((size_t)(s->size - index_offset));
    if (!r->index) return wf_error(WF_ERR_NOMEM, "%s: out of memory for the document index", s->path);
    WF_TRY(wf_store_read_range(s->path, index_offset, (size_t)(s->size - index_offset), r->index));
    s->doc_starts = r->index;
    WF_TRY(wf__shard_check_index(s));
    if (verify) WF_TRY(verify_remote(s, r));
    if (cpath) cache_begin(s, r, h, index_offset);
    return WF_OK;
}

void wf__shard_close_remote(wf_shard *s) {
    wf_shard_remote *r = s->remote;
    if (!r) return;
    free_blocks(r);
    if (r->part_fd >= 0) cache_drop(r); /* unfinished: a later open starts over */
    wf_mmap_close(&r->done);
    if (r->whole && s->map.data == r->whole) s->map = (wf_mmap){0};
    free(r->whole);
    free(r->have);
    free(r->part_path);
    free(r->cache_path);
    free(r->index);
    pthread_mutex_destroy(&r->mu);
    free(r);
    s->remote = NULL;
}

wf_status wf_shard_load(wf_shard *s) {
    wf_shard_remote *r = s->remote;
    if (s->tokens || !r) return WF_OK;
    unsigned char *w = malloc((size_t)s->size);
    if (!w) return wf_error(WF_ERR_NOMEM, "%s: out of memory for %" PRIu64 " bytes", s->path, s->size);
    pthread_mutex_lock(&r->mu);
    wf_status st = r->done.data ? (memcpy(w, r->done.data, (size_t)s->size), WF_OK)
                                : wf_store_read_range(s->path, 0, (size_t)s->size, w);
    pthread_mutex_unlock(&r->mu);
    uint64_t got = st == WF_OK ? wf_hash64(w + r->t0, (size_t)(s->size - r->t0)) : 0;
    if (st == WF_OK && got != s->payload_hash)
        st = wf_error(WF_ERR_CHECKSUM, "%s: payload checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                      "): corrupted in transfer or in the store", s->path, s->payload_hash, got);
    if (st != WF_OK) {
        free(w);
        return st;
    }
    r->whole = w;
    s->map = (wf_mmap){w, (size_t)s->size};
    s->tokens = w + r->t0;
    s->doc_starts = w + (s->size - 8 * s->n_docs);
    return WF_OK;
}
