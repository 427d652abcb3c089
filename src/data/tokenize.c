/* The tokenize pipeline behind `weft tokenize` (include/weft/tokenize.h):
 * text files -> a dataset of token shards.
 *
 * Documents are read in input order in batches (a few MB of text), each
 * batch is encoded on all threads (documents are handed out one at a time
 * from a shared counter, each encoded into its own id list), then written
 * in input order. The output therefore depends only on the inputs and the
 * options, never on the thread count or scheduling. A document goes to val
 * when a draw that depends only on (seed, document number) falls below
 * --val-fraction, so the split is by document and reproducible.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/buf.h"
#include "weft/dirlock.h"
#include "weft/docs.h"
#include "weft/fileio.h"
#include "weft/progress.h"
#include "weft/rng.h"
#include "weft/shard.h"
#include "weft/store.h"
#include "weft/thread.h"
#include "weft/tokenize.h"
#include "weft/tokenizer.h"

static const wf_opt tokenize_opt_table[] = {
    {"tokenizer", NULL, WF_OPT_STR, offsetof(wf_tokenize_config, tokenizer), NULL, WF_NO_RANGE,
     "tokenizer.json to encode with (required)"},
    {"output", NULL, WF_OPT_STR, offsetof(wf_tokenize_config, output), NULL, WF_NO_RANGE,
     "dataset directory to write (required; created if missing)"},
    {"val_fraction", "val-fraction", WF_OPT_FLOAT, offsetof(wf_tokenize_config, val_fraction), "0.01", 0.0, 1.0,
     "fraction of documents put in the validation split (0 for none)"},
    {"seed", NULL, WF_OPT_INT, offsetof(wf_tokenize_config, seed), "0", 0, 9.2e18,
     "seed of the train/val assignment"},
    {"shard_tokens", "shard-tokens", WF_OPT_INT, offsetof(wf_tokenize_config, shard_tokens), "0", 0, 1e12,
     "tokens per shard; 0 picks about 100 MB of tokens (50M uint16 or 25M uint32)"},
    {"threads", NULL, WF_OPT_INT, offsetof(wf_tokenize_config, threads), "0", 0, 4096,
     "encoding threads; 0 uses WEFT_THREADS or every CPU (the output does not depend on it)"},
    {"text_mode", "text-mode", WF_OPT_STR, offsetof(wf_tokenize_config, text_mode), "file", WF_NO_RANGE,
     "plain-text inputs: one document per file, line or paragraph"},
    {"field", NULL, WF_OPT_STR, offsetof(wf_tokenize_config, field), "text", WF_NO_RANGE,
     "JSONL inputs: the string field holding the document"},
    {"eos", NULL, WF_OPT_BOOL, offsetof(wf_tokenize_config, eos), "true", WF_NO_RANGE,
     "append the tokenizer's end-of-text token after every document (--no-eos to leave it out)"},
    {"force", NULL, WF_OPT_BOOL, offsetof(wf_tokenize_config, force), "false", WF_NO_RANGE,
     "replace a dataset already in the output directory"},
    {"lock_stale_s", "lock-stale-s", WF_OPT_FLOAT, offsetof(wf_tokenize_config, lock_stale_s), "600", 1, 1e9,
     "another host's lock on the output directory whose heartbeat is older than this many seconds "
     "belongs to a job that died and is taken over (on this host a dead pid is enough)"},
};

static const wf_cmd_spec tokenize_spec = {
    "tokenize",
    "weft tokenize --tokenizer tok.json --output DATA_DIR [options] INPUT...",
    "Encodes documents (plain text or JSONL, optionally .gz/.zst) with a tokenizer and writes a "
    "dataset of token shards with a train and a validation split (docs/formats/token-shard.md). "
    "The output is the same for any number of threads.",
    tokenize_opt_table,
    sizeof tokenize_opt_table / sizeof *tokenize_opt_table,
    1,
    -1,
    0,
};

/* Batches are cut at whichever limit comes first. */
#define BATCH_BYTES ((size_t)2 << 20)
#define BATCH_DOCS 8192
/* Philox stream of the train/val draw (ASCII "split"). */
#define SPLIT_STREAM UINT64_C(0x73706c6974)

/* One document's ids on a cache line of its own: two threads encode
 * neighbouring documents at once, and sharing the line that holds their
 * lengths made two threads slower than one. */
typedef struct {
    _Alignas(64) wf_ids v;
} doc_ids;

typedef struct {
    char *text;     /* the batch's documents back to back */
    size_t text_len, text_cap;
    size_t *off;    /* document i is text[off[i], off[i] + len[i]) */
    size_t *len;
    doc_ids *ids;   /* encoded document i; kept across batches for their capacity */
    size_t n, cap;
    atomic_size_t next; /* next document to hand out to an encoding thread */
} batch;

static void batch_free(batch *b) {
    for (size_t i = 0; i < b->cap; i++) wf_ids_free(&b->ids[i].v);
    free(b->ids);
    free(b->off);
    free(b->len);
    free(b->text);
}

static wf_status batch_push(batch *b, const char *text, size_t len) {
    if (b->n == b->cap) {
        /* Three parallel arrays with one capacity (ids is cache-line aligned). */
        size_t cap = wf_grow_cap(b->cap, b->n + 1, 256);
        size_t *no = realloc(b->off, cap * sizeof *no);
        if (no) b->off = no;
        size_t *nl = realloc(b->len, cap * sizeof *nl);
        if (nl) b->len = nl;
        doc_ids *ni = aligned_alloc(_Alignof(doc_ids), cap * sizeof *ni);
        if (ni) {
            if (b->cap) memcpy(ni, b->ids, b->cap * sizeof *ni);
            memset(ni + b->cap, 0, (cap - b->cap) * sizeof *ni);
            free(b->ids);
            b->ids = ni;
        }
        if (!no || !nl || !ni) return wf_error(WF_ERR_NOMEM, "out of memory batching documents");
        b->cap = cap;
    }
    if (WF_GROW(b->text, b->text_cap, b->text_len + len, BATCH_BYTES) != WF_OK)
        return wf_error_wrap(WF_ERR_NOMEM, "batching a document of %zu bytes: ", len);
    memcpy(b->text + b->text_len, text, len);
    b->off[b->n] = b->text_len;
    b->len[b->n] = len;
    b->text_len += len;
    b->n++;
    return WF_OK;
}

/* Reads the next batch; b->n == 0 afterwards means the input is done. */
static wf_status batch_fill(batch *b, wf_docs *docs) {
    b->n = 0;
    b->text_len = 0;
    atomic_store(&b->next, 0);
    while (b->n < BATCH_DOCS && b->text_len < BATCH_BYTES) {
        const char *text;
        size_t len;
        WF_TRY(wf_docs_next(docs, &text, &len));
        if (!text) break;
        WF_TRY(batch_push(b, text, len));
    }
    return WF_OK;
}

/* The pipeline. Threads live for the whole run (the tokenizer keeps a warm
 * cache per thread, which new threads per batch would throw away). Batch g
 * lives in slot[g % 2]. Thread 0 reads, writes and helps encode (see
 * coordinator); the other threads only encode the current batch, taking
 * documents one at a time. A slot is refilled only once its batch is
 * written and no thread is inside it any more. */
typedef struct {
    const wf_tokenize_config *o;
    const char *const *inputs;
    size_t n_inputs;
    wf_docs *docs;
    const wf_tokenizer *tok;
    int32_t eos;              /* appended when >= 0 */
    uint32_t vocab;
    uint64_t shard_tokens;
    uint64_t tok_fingerprint; /* recorded in dataset.json */
    wf_dataset_writer *w;     /* created at the first document */
    wf_progress prog;
    wf_tokenize_summary *sum;

    batch slot[2];
    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* a batch was published, or stop */
    pthread_cond_t done_cv;   /* the current batch may be finished */
    uint64_t gen;             /* batches published so far */
    uint64_t closed;          /* the last batch whose encoding thread 0 saw finished */
    int stop;
    size_t n_done;            /* documents of the current batch encoded */
    int active;               /* workers inside the current batch */
    atomic_int failed;        /* an encode failed: the failing thread returns its status */
} pipeline;

/* Encodes documents of b until none is left to take; adds them to n_done. */
static wf_status encode_some(pipeline *p, batch *b) {
    wf_status st = WF_OK;
    size_t mine = 0;
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n) break;
        mine++;
        if (atomic_load(&p->failed)) continue;
        wf_ids *out = &b->ids[i].v;
        out->n = 0;
        st = wf_tokenizer_encode(p->tok, b->text + b->off[i], b->len[i], 0, out);
        if (st == WF_OK && p->eos >= 0) st = wf_ids_push(out, p->eos);
        if (st != WF_OK) atomic_store(&p->failed, 1);
    }
    pthread_mutex_lock(&p->mu);
    p->n_done += mine;
    if (p->n_done == b->n) pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
    return st;
}

static wf_status worker(pipeline *p) {
    wf_status ret = WF_OK;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->gen == seen) { /* stopped */
            pthread_mutex_unlock(&p->mu);
            return ret;
        }
        seen = p->gen;
        if (p->closed == seen) { /* woke too late: the batch is done, its slot about to be reused */
            pthread_mutex_unlock(&p->mu);
            continue;
        }
        batch *b = &p->slot[seen % 2];
        p->active++;
        pthread_mutex_unlock(&p->mu);
        wf_status st = encode_some(p, b);
        if (st != WF_OK && ret == WF_OK) ret = st;
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_broadcast(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static int is_val(uint64_t seed, uint64_t doc, double fraction) {
    double u = (double)(wf_rng_at(seed, SPLIT_STREAM, doc) >> 11) * 0x1p-53;
    return u < fraction;
}

static wf_status write_batch(pipeline *p, const batch *b, uint64_t *doc_index) {
    if (!p->w) { /* created at the first document, so empty input leaves nothing behind */
        wf_dataset_writer_opts wo = {p->o->output, p->vocab, p->shard_tokens, p->o->tokenizer, p->tok_fingerprint,
                                     1};
        WF_TRY(wf_dataset_writer_create(&p->w, &wo));
    }
    for (size_t i = 0; i < b->n; i++, (*doc_index)++) {
        const wf_ids *ids = &b->ids[i].v;
        if (ids->n == 0) continue; /* only with --no-eos and text that encodes to nothing */
        int split = is_val((uint64_t)p->o->seed, *doc_index, p->o->val_fraction);
        WF_TRY(wf_dataset_writer_add(p->w, split, ids->ids, ids->n));
        p->sum->docs[split]++;
        p->sum->tokens[split] += ids->n;
    }
    return WF_OK;
}

static void publish(pipeline *p, uint64_t g) {
    pthread_mutex_lock(&p->mu);
    p->gen = g;
    p->n_done = 0;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

/* Thread 0. While the workers encode batch g+1 it writes batch g and reads
 * batch g+2, then joins in encoding g+1; so with two or more threads only
 * the first read is not overlapped with encoding. */
static wf_status coordinator(pipeline *p) {
    uint64_t doc_index = 0, g = 1;
    wf_status s = batch_fill(&p->slot[1], p->docs), rs = WF_OK;
    if (s == WF_OK && p->slot[1].n > 0) {
        publish(p, 1);
        rs = batch_fill(&p->slot[0], p->docs);
        for (;;) {
            batch *b = &p->slot[g % 2], *nb = &p->slot[(g + 1) % 2]; /* nb: batch g+1, read */
            s = encode_some(p, b);
            pthread_mutex_lock(&p->mu);
            while (p->n_done < b->n || p->active > 0) pthread_cond_wait(&p->done_cv, &p->mu);
            p->closed = g; /* from here no worker enters batch g, so its slot can be refilled */
            pthread_mutex_unlock(&p->mu);
            if (s != WF_OK || atomic_load(&p->failed)) break; /* a failed worker returns its own error */
            if (rs == WF_OK && nb->n > 0) publish(p, g + 1);
            s = write_batch(p, b, &doc_index);
            if (s == WF_OK) s = rs;
            if (s != WF_OK || nb->n == 0) break;
            wf_progress_update(&p->prog, wf_docs_progress(p->docs));
            rs = batch_fill(b, p->docs); /* batch g+2 */
            g++;
        }
    }
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    return s;
}

static wf_status pipeline_task(void *ctx, int tid, int n_threads) {
    (void)n_threads;
    return tid == 0 ? coordinator(ctx) : worker(ctx);
}

const wf_cmd_spec *wf_tokenize_spec(void) { return &tokenize_spec; }

wf_status wf_tokenize_config_default(wf_tokenize_config *c) {
    memset(c, 0, sizeof *c);
    return wf_opts_defaults(&tokenize_spec, c);
}

void wf_tokenize_config_free(wf_tokenize_config *c) { wf_opts_free(&tokenize_spec, c); }

static wf_status tokenize_local(const wf_tokenize_config *o, const char *const *inputs, size_t n_inputs,
                                wf_tokenize_summary *sum) {
    memset(sum, 0, sizeof *sum);
    double t0 = wf_time_now();
    if (!o->tokenizer) return wf_error(WF_ERR_CONFIG, "--tokenizer is required (a tokenizer.json)");
    if (!o->output) return wf_error(WF_ERR_CONFIG, "--output is required (the dataset directory to write)");
    int mode = wf_docs_parse_mode(o->text_mode);
    if (mode < 0)
        return wf_error(WF_ERR_CONFIG, "--text-mode '%s': expected file, line or paragraph", o->text_mode);
    if (!o->force) {
        size_t n = strlen(o->output) + 16;
        char *json = malloc(n);
        if (!json) return wf_error(WF_ERR_NOMEM, "out of memory");
        snprintf(json, n, "%s/dataset.json", o->output);
        int exists = wf_path_exists(json);
        free(json);
        if (exists)
            return wf_error(WF_ERR_INVALID, "%s already holds a dataset: pass --force to replace it", o->output);
    }
    int n_threads = o->threads > 0 ? (int)o->threads : wf_default_threads();
    sum->threads = n_threads;

    pipeline p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.sum = sum;
    p.eos = -1;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work_cv, NULL);
    pthread_cond_init(&p.done_cv, NULL);
    wf_tokenizer *tok = NULL;
    wf_dirlock *lock = NULL;
    int prog_on = 0, made_dir = 0;
    /* Inputs are checked before anything is loaded or created. */
    wf_docs_opts dopts = {(wf_text_doc_mode)mode, o->field};
    wf_status s = wf_docs_open(&p.docs, inputs, n_inputs, &dopts);
    if (s != WF_OK) goto done;
    s = wf_tokenizer_load(&tok, o->tokenizer);
    if (s != WF_OK) goto done;
    /* One job per output directory, from here until the dataset is
     * complete or removed. */
    wf_dirlock_opts lo = {.command = "weft tokenize", .what = "output directory", .stale_seconds = o->lock_stale_s};
    made_dir = !wf_path_exists(o->output);
    s = wf_mkdirs(o->output);
    if (s == WF_OK) s = wf_dirlock_acquire(&lock, o->output, &lo);
    if (s != WF_OK) goto done;
    p.tok = tok;
    if (o->eos) {
        p.eos = wf_tokenizer_eos(tok);
        if (p.eos < 0) {
            s = wf_error(WF_ERR_INVALID,
                         "%s: the tokenizer has no end-of-text token to put between documents; add one "
                         "(weft tokenizer train does) or pass --no-eos",
                         o->tokenizer);
            goto done;
        }
    }
    size_t vocab = wf_tokenizer_vocab_size(tok);
    if (vocab == 0 || vocab > INT32_MAX) {
        s = wf_error(WF_ERR_UNSUPPORTED, "%s: vocabulary size %zu is out of range", o->tokenizer, vocab);
        goto done;
    }
    p.vocab = (uint32_t)vocab;
    s = wf_tokenizer_fingerprint(tok, &p.tok_fingerprint);
    if (s != WF_OK) goto done;
    p.shard_tokens = (uint64_t)o->shard_tokens;
    if (p.shard_tokens == 0) p.shard_tokens = (100u << 20) / (vocab <= 65536 ? 2 : 4);

    wf_progress_init(&p.prog, "tokenize", "B", wf_docs_total(p.docs));
    prog_on = 1;
    s = wf_parallel_run(n_threads, pipeline_task, &p);
    if (s != WF_OK) goto done;
    if (!p.w) {
        s = wf_error(WF_ERR_EMPTY, "no documents in the input (%zu file%s, %" PRIu64 " bytes): nothing to tokenize",
                     n_inputs, n_inputs == 1 ? "" : "s", wf_docs_total(p.docs));
        goto done;
    }
    s = wf_dataset_writer_finish(p.w);
    if (s != WF_OK) goto done;
    sum->bytes = wf_docs_total(p.docs);
    sum->seconds = wf_time_now() - t0;
done:
    if (prog_on) {
        wf_progress_update(&p.prog, wf_docs_progress(p.docs));
        wf_progress_done(&p.prog);
    }
    if (s == WF_OK) {
        wf_dataset_info info;
        if (wf_dataset_info_load(&info, o->output) == WF_OK) {
            for (size_t i = 0; i < info.n_splits; i++)
                sum->shards[strcmp(info.splits[i].name, "val") == 0] = info.splits[i].n_shards;
            wf_dataset_info_free(&info);
        }
    }
    wf_dataset_writer_destroy(p.w); /* removes the shards of an unfinished dataset */
    wf_dirlock_release(lock);
    if (s != WF_OK && made_dir) rmdir(o->output); /* a failed run leaves no folder it made (if empty) */
    batch_free(&p.slot[0]);
    batch_free(&p.slot[1]);
    pthread_cond_destroy(&p.done_cv);
    pthread_cond_destroy(&p.work_cv);
    pthread_mutex_destroy(&p.mu);
    wf_tokenizer_destroy(tok);
    wf_docs_destroy(p.docs);
    return s;
}

/* A dataset for an object store (--output s3://...) is written to a local
 * staging folder, then uploaded file by file with dataset.json last: as on
 * disk, where dataset.json's atomic rename completes a dataset, a reader
 * sees the dataset only once every shard it lists is there. The staging
 * folder is removed either way. */
wf_status wf_tokenize_run(const wf_tokenize_config *o, const char *const *inputs, size_t n_inputs,
                          wf_tokenize_summary *sum) {
    if (!o->output || !wf_store_is_remote(o->output)) return tokenize_local(o, inputs, n_inputs, sum);
    memset(sum, 0, sizeof *sum);
    wf_buf url = {0};
    wf_buf_printf(&url, "%s%sdataset.json", o->output, o->output[strlen(o->output) - 1] == '/' ? "" : "/");
    if (url.failed) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_store_stat st;
    wf_status s = o->force ? WF_ERR_NOTFOUND : wf_store_head(url.data, &st);
    if (s == WF_OK) s = wf_error(WF_ERR_INVALID, "%s already holds a dataset: pass --force to replace it", o->output);
    else if (s == WF_ERR_NOTFOUND) wf_error_clear(), s = WF_OK;
    char stage[4096] = "";
    if (s == WF_OK) {
        const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(stage, sizeof stage, "%s/weft-tokenize-XXXXXX", tmp);
        if (!mkdtemp(stage)) s = wf_error(WF_ERR_IO, "%s: cannot make a staging folder: %s", stage, strerror(errno));
    }
    wf_store_entry *files = NULL;
    size_t n_files = 0;
    if (s == WF_OK) {
        wf_tokenize_config lo = *o;  /* shallow: only the output differs */
        char out[4200];
        snprintf(out, sizeof out, "%s/data", stage);
        lo.output = out;
        s = tokenize_local(&lo, inputs, n_inputs, sum);
        if (s == WF_OK) s = wf_store_list(out, &files, &n_files);
        /* Shards first, the index last. */
        for (int last = 0; s == WF_OK && last < 2; last++)
            for (size_t i = 0; s == WF_OK && i < n_files; i++) {
                const char *name = files[i].url + strlen(out) + 1;
                if ((strcmp(name, "dataset.json") == 0) != last) continue;
                wf_buf dst = {0};
                wf_buf_printf(&dst, "%.*s%s", (int)(strlen(url.data) - strlen("dataset.json")), url.data, name);
                s = dst.failed ? wf_error(WF_ERR_NOMEM, "out of memory") : wf_store_upload(files[i].url, dst.data);
                wf_buf_free(&dst);
            }
    }
    wf_store_list_free(files, n_files);
    if (stage[0]) {
        wf_error_keep k = WF_ERROR_KEEP_INIT;
        wf_error_keep_note(&k, s);
        wf_status r = wf_remove_tree(stage);
        s = k.status != WF_OK ? wf_error_keep_restore(&k) : r;
    }
    wf_buf_free(&url);
    return s;
}
