/* One token shard file: the streaming writer (wf_shard_out_*, used by the
 * dataset writer in dataset.c) and the mmap reader with its checks
 * (wf_shard_*); a shard in an object store is read in shard_remote.c. The byte layout is in shard_impl.h and
 * docs/formats/token-shard.md. This file knows nothing of dataset.json,
 * splits or tokenizers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "weft/buf.h"
#include "data/shard_impl.h"
#include "weft/shard.h"
#include "weft/store.h"

/* ------------------------------------------------------------- writing */

static wf_status out_write(wf_shard_out *o, const void *data, size_t len) {
    if (len == 0) return WF_OK;
    wf_hasher_update(o->hash, data, len);
    if (fwrite(data, 1, len, o->f.fp) != len)
        return wf_error(WF_ERR_IO, "%s: write failed: %s (disk full?)", o->f.tmp_path, strerror(errno));
    return WF_OK;
}

wf_status wf__shard_out_begin(wf_shard_out *o, const char *path, int token_bytes, uint32_t vocab_size,
                             uint32_t split, uint32_t shard_index) {
    memset(o, 0, sizeof *o);
    if (token_bytes != 2 && token_bytes != 4)
        return wf_error(WF_ERR_INVALID, "%s: token_bytes must be 2 or 4, not %d", path, token_bytes);
    o->token_bytes = token_bytes;
    o->vocab_size = vocab_size;
    o->split = split;
    o->shard_index = shard_index;
    o->hash = wf_hasher_create();
    if (!o->hash) return wf_error(WF_ERR_NOMEM, "%s: out of memory", path);
    wf_status s = wf_afile_open(&o->f, path);
    if (s != WF_OK) {
        wf_hasher_destroy(o->hash);
        o->hash = NULL;
        return s;
    }
    /* Placeholder for the header and the padding up to the tokens; the
     * real header is written over it at the end (it is not in the payload
     * hash, so it goes straight to the file). */
    static const unsigned char zeros[WF_SHARD_TOKENS_OFFSET];
    if (fwrite(zeros, 1, sizeof zeros, o->f.fp) != sizeof zeros) {
        s = wf_error(WF_ERR_IO, "%s: write failed: %s", o->f.tmp_path, strerror(errno));
        wf__shard_out_abort(o);
        return s;
    }
    return WF_OK;
}

wf_status wf__shard_out_append(wf_shard_out *o, const int32_t *ids, size_t n) {
    if (n == 0) return wf_error(WF_ERR_INVALID, "%s: empty document (a document holds at least one token)", o->f.path);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= o->vocab_size)
            return wf_error(WF_ERR_RANGE,
                            "%s: document %zu: token %d at position %zu is outside the vocabulary [0, %u)",
                            o->f.path, o->n_docs, ids[i], i, o->vocab_size);
    if (WF_GROW(o->doc_starts, o->cap_docs, o->n_docs + 1, 1024) != WF_OK)
        return wf_error_wrap(WF_ERR_NOMEM, "%s: the document index: ", o->f.path);
    o->doc_starts[o->n_docs++] = o->n_tokens;
    /* Convert in chunks so a huge document needs no huge buffer. */
    const size_t chunk = 1 << 16;
    if (!o->buf) {
        o->buf = malloc(chunk * 4);
        if (!o->buf) return wf_error(WF_ERR_NOMEM, "%s: out of memory", o->f.path);
        o->buf_cap = chunk * 4;
    }
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        if (o->token_bytes == 2)
            for (size_t j = 0; j < m; j++) wf_le16_put_(o->buf + 2 * j, (uint16_t)ids[i + j]);
        else
            for (size_t j = 0; j < m; j++) wf_le32_put_(o->buf + 4 * j, (uint32_t)ids[i + j]);
        WF_TRY(out_write(o, o->buf, m * (size_t)o->token_bytes));
    }
    o->n_tokens += n;
    return WF_OK;
}

wf_status wf__shard_out_end(wf_shard_out *o, wf_shard_summary *sum) {
    if (o->n_docs == 0) return wf_error(WF_ERR_INTERNAL, "%s: a shard without documents", o->f.path);
    uint64_t tokens_end = WF_SHARD_TOKENS_OFFSET + o->n_tokens * (uint64_t)o->token_bytes;
    uint64_t index_offset = wf_shard_align64_(tokens_end);
    uint64_t file_size = index_offset + 8 * (uint64_t)o->n_docs;
    static const unsigned char zeros[WF_SHARD_SECTION_ALIGN];
    WF_TRY(out_write(o, zeros, (size_t)(index_offset - tokens_end)));
    unsigned char b[8];
    for (size_t d = 0; d < o->n_docs; d++) {
        wf_le64_put_(b, o->doc_starts[d]);
        WF_TRY(out_write(o, b, 8));
    }
    unsigned char h[WF_SHARD_HEADER_SIZE] = {0};
    memcpy(h, WF_SHARD_MAGIC, 8);
    wf_le32_put_(h + 8, WF_SHARD_VERSION);
    wf_le32_put_(h + 12, WF_SHARD_HEADER_SIZE);
    wf_le32_put_(h + 16, (uint32_t)o->token_bytes);
    wf_le32_put_(h + 20, o->vocab_size);
    wf_le64_put_(h + 24, o->n_tokens);
    wf_le64_put_(h + 32, o->n_docs);
    wf_le64_put_(h + 40, WF_SHARD_TOKENS_OFFSET);
    wf_le64_put_(h + 48, index_offset);
    wf_le64_put_(h + 56, file_size);
    uint64_t payload_hash = wf_hasher_digest(o->hash);
    wf_le64_put_(h + 64, payload_hash);
    wf_le32_put_(h + 72, o->split);
    wf_le32_put_(h + 76, o->shard_index);
    uint64_t header_hash = wf_hash64(h, WF_SHARD_HASHED_HEADER);
    wf_le64_put_(h + 120, header_hash);
    if (fseek(o->f.fp, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, o->f.fp) != sizeof h)
        return wf_error(WF_ERR_IO, "%s: cannot write the header: %s", o->f.tmp_path, strerror(errno));
    WF_TRY(wf_afile_commit(&o->f)); /* frees o->f whether or not it worked */
    *sum = (wf_shard_summary){o->n_tokens, o->n_docs, file_size, payload_hash, header_hash};
    wf__shard_out_abort(o); /* frees the rest; the file is no longer temporary */
    return WF_OK;
}

void wf__shard_out_abort(wf_shard_out *o) {
    if (o->f.path) wf_afile_abort(&o->f);
    wf_hasher_destroy(o->hash);
    free(o->doc_starts);
    free(o->buf);
    memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------- reading */

/* Checks that tokens [first, first + n) of the shard, whose bytes are at p,
 * are below the vocabulary; reports the first that is not. The common case
 * is one pass computing a maximum. */
wf_status wf__shard_check_tokens(const wf_shard *s, const unsigned char *p, uint64_t first, uint64_t n) {
    uint32_t mx = 0;
    if (s->token_bytes == 2) {
        for (uint64_t i = 0; i < n; i++) {
            uint32_t v = wf_le16_get_(p + 2 * i);
            mx = v > mx ? v : mx;
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            uint32_t v = wf_le32_get_(p + 4 * i);
            mx = v > mx ? v : mx;
        }
    }
    if (mx < s->vocab_size) return WF_OK;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = s->token_bytes == 2 ? wf_le16_get_(p + 2 * i) : wf_le32_get_(p + 4 * i);
        if (v >= s->vocab_size)
            return wf_error(WF_ERR_FORMAT,
                            "%s: token %llu is %u, outside the vocabulary [0, %u): the shard is corrupt",
                            s->path, (unsigned long long)(first + i), v, s->vocab_size);
    }
    return WF_OK;
}

wf_status wf__shard_check_header(wf_shard *s, const unsigned char *h, uint64_t size, uint64_t *tokens_offset_out,
                                 uint64_t *index_offset_out) {
    const char *p = s->path;
    if (size < WF_SHARD_HEADER_SIZE)
        return wf_error(WF_ERR_FORMAT,
                        "%s: truncated: %llu bytes, shorter than the %u-byte shard header (an interrupted copy?)",
                        p, (unsigned long long)size, WF_SHARD_HEADER_SIZE);
    if (memcmp(h, WF_SHARD_MAGIC, 8) != 0)
        return wf_error(WF_ERR_FORMAT, "%s: not a weft token shard (bad magic; expected \"%s\")", p,
                        WF_SHARD_MAGIC);
    uint32_t version = wf_le32_get_(h + 8);
    if (version != WF_SHARD_VERSION)
        return wf_error(WF_ERR_UNSUPPORTED,
                        "%s: shard format version %u is not supported (this weft reads version %u); "
                        "re-run `weft tokenize` with this weft",
                        p, version, WF_SHARD_VERSION);
    uint64_t want_hash = wf_le64_get_(h + 120), got_hash = wf_hash64(h, WF_SHARD_HASHED_HEADER);
    if (want_hash != got_hash)
        return wf_error(WF_ERR_CHECKSUM,
                        "%s: header checksum mismatch (stored %016llx, computed %016llx): the header is corrupt",
                        p, (unsigned long long)want_hash, (unsigned long long)got_hash);
    uint32_t header_size = wf_le32_get_(h + 12);
    uint32_t tb = wf_le32_get_(h + 16);
    s->vocab_size = wf_le32_get_(h + 20);
    s->n_tokens = wf_le64_get_(h + 24);
    s->n_docs = wf_le64_get_(h + 32);
    uint64_t tokens_offset = wf_le64_get_(h + 40), index_offset = wf_le64_get_(h + 48);
    uint64_t file_size = wf_le64_get_(h + 56);
    s->size = size;
    s->payload_hash = wf_le64_get_(h + 64);
    s->header_hash = want_hash;
    if (header_size != WF_SHARD_HEADER_SIZE)
        return wf_error(WF_ERR_FORMAT, "%s: header_size is %u, expected %u", p, header_size,
                        WF_SHARD_HEADER_SIZE);
    if (tb != 2 && tb != 4)
        return wf_error(WF_ERR_FORMAT, "%s: token_bytes is %u, expected 2 or 4", p, tb);
    if (s->vocab_size == 0 || (tb == 2 && s->vocab_size > 65536))
        return wf_error(WF_ERR_FORMAT, "%s: vocab_size %u does not fit %u-byte tokens", p, s->vocab_size, tb);
    s->token_bytes = (int)tb;
    if (file_size != size)
        return wf_error(WF_ERR_FORMAT,
                        "%s: truncated or padded: the header says %llu bytes, the file has %llu",
                        p, (unsigned long long)file_size, (unsigned long long)size);
    if (s->n_tokens == 0 || s->n_docs == 0 || s->n_docs > s->n_tokens)
        return wf_error(WF_ERR_FORMAT, "%s: %llu tokens in %llu documents: a shard holds at least one "
                        "token and one document, and no empty documents",
                        p, (unsigned long long)s->n_tokens, (unsigned long long)s->n_docs);
    if (tokens_offset < WF_SHARD_HEADER_SIZE || tokens_offset % WF_SHARD_SECTION_ALIGN || tokens_offset > size)
        return wf_error(WF_ERR_FORMAT, "%s: tokens_offset %llu is not a multiple of %u in [%u, %llu]", p,
                        (unsigned long long)tokens_offset, WF_SHARD_SECTION_ALIGN, WF_SHARD_HEADER_SIZE,
                        (unsigned long long)size);
    /* Bound the counts by the file size before multiplying, so nothing
     * below can overflow. */
    if (s->n_tokens > (size - tokens_offset) / tb || s->n_docs > size / 8 ||
        index_offset != wf_shard_align64_(tokens_offset + s->n_tokens * tb) ||
        file_size != index_offset + 8 * s->n_docs)
        return wf_error(WF_ERR_FORMAT,
                        "%s: sections do not add up: %llu tokens of %u bytes at %llu, %llu documents at "
                        "%llu, in %llu bytes",
                        p, (unsigned long long)s->n_tokens, tb, (unsigned long long)tokens_offset,
                        (unsigned long long)s->n_docs, (unsigned long long)index_offset,
                        (unsigned long long)size);
    *tokens_offset_out = tokens_offset;
    *index_offset_out = index_offset;
    return WF_OK;
}

wf_status wf__shard_check_index(const wf_shard *s) {
    /* The document index is small (8 bytes a document): always checked, so
     * document lookups never leave the shard. */
    uint64_t prev = 0;
    for (uint64_t d = 0; d < s->n_docs; d++) {
        uint64_t st = wf_le64_get_(s->doc_starts + 8 * d);
        if ((d == 0 && st != 0) || (d > 0 && st <= prev) || st >= s->n_tokens)
            return wf_error(WF_ERR_FORMAT,
                            "%s: document index entry %llu is %llu (previous %llu, %llu tokens): entries start "
                            "at 0 and increase strictly below n_tokens",
                            s->path, (unsigned long long)d, (unsigned long long)st, (unsigned long long)prev,
                            (unsigned long long)s->n_tokens);
        prev = st;
    }
    return WF_OK;
}

static wf_status shard_check(wf_shard *s, int verify) {
    const unsigned char *h = s->map.data;
    uint64_t size = s->map.size, tokens_offset = 0, index_offset = 0;
    WF_TRY(wf__shard_check_header(s, h, size, &tokens_offset, &index_offset));
    s->tokens = h + tokens_offset;
    s->doc_starts = h + index_offset;
    WF_TRY(wf__shard_check_index(s));
    if (verify) {
        uint64_t got = wf_hash64(s->tokens, (size_t)(size - tokens_offset));
        if (s->payload_hash != got)
            return wf_error(WF_ERR_CHECKSUM,
                            "%s: payload checksum mismatch (stored %016llx, computed %016llx): the tokens "
                            "or document index are corrupt; re-run `weft tokenize`",
                            s->path, (unsigned long long)s->payload_hash, (unsigned long long)got);
        WF_TRY(wf__shard_check_tokens(s, s->tokens, 0, s->n_tokens));
    }
    return WF_OK;
}

/* Maps a local shard file (also a complete copy in the store cache). */
wf_status wf__shard_open_mapped(wf_shard *s, const char *path, int verify) {
    wf_status st = wf_mmap_open(&s->map, path);
    if (st == WF_OK) st = shard_check(s, verify);
    return st;
}

wf_status wf_shard_open(wf_shard *s, const char *path, int verify) {
    memset(s, 0, sizeof *s);
    s->path = strdup(path);
    if (!s->path) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status st = wf_store_is_remote(path) ? wf__shard_open_remote(s, verify) : wf__shard_open_mapped(s, path, verify);
    if (st != WF_OK) wf_shard_close(s);
    return st;
}

void wf_shard_close(wf_shard *s) {
    wf__shard_close_remote(s);
    wf_mmap_close(&s->map);
    free(s->path);
    memset(s, 0, sizeof *s);
}

wf_status wf_shard_fetch(const wf_shard *s, uint64_t start, size_t n, int32_t *out) {
    if (s->tokens) {
        wf_shard_read(s, start, n, out);
        return WF_OK;
    }
    return wf__shard_fetch_remote(s, start, n, out);
}

void wf_shard_read(const wf_shard *s, uint64_t start, size_t n, int32_t *out) {
    if (s->token_bytes == 2) {
        const unsigned char *p = s->tokens + 2 * start;
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)wf_le16_get_(p + 2 * i);
    } else {
        const unsigned char *p = s->tokens + 4 * start;
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)wf_le32_get_(p + 4 * i);
    }
}

uint64_t wf_shard_doc_start(const wf_shard *s, uint64_t doc) {
    if (doc >= s->n_docs) return s->n_tokens;
    return wf_le64_get_(s->doc_starts + 8 * doc);
}
