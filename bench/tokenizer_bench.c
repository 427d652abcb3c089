/* Tokenizer encode throughput.
 *
 *   tokenizer_bench TOKENIZER_JSON TEXT_FILE [--threads 1,2] [--repeat 3]
 *                   [--doc line|paragraph|file]
 *
 * Splits the text into documents (non-empty lines by default), gives each
 * of N threads a contiguous share of them (by bytes) and times how long the
 * threads take to encode everything on one shared tokenizer
 * (wf_tokenizer_encode, parse_special off). For each thread count it runs
 * once cold (fresh thread states: empty piece caches) and `repeat` more
 * times warm, and prints one line per thread count:
 *
 *   threads 2 bytes 4013442 tokens 1001234 cold_s 0.30 best_s 0.20 cold_mbps 13.4 mbps 20.1
 *   cold_cpu_s 0.29 best_cpu_s 0.19
 *
 * (the *_cpu_s figures: the process's CPU time over the run divided by the
 * thread count, which on a busy machine leaves out the time other jobs
 * held the cores; MB = 1e6 bytes of input text). bench/tokenizer_bench.py runs this next
 * to `tokenizers` and `tiktoken` on the same text. Not a test: it prints
 * numbers and asserts nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/fileio.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"

typedef struct {
    const char *s;
    size_t n;
} doc;

typedef struct {
    const wf_tokenizer *tok;
    const doc *docs;
    size_t n_docs;
    size_t *split; /* thread t encodes docs [split[t], split[t+1]) */
    uint64_t *tokens;
} run_ctx;

/* CPU time of the whole process, in seconds: on a shared machine it
 * leaves out the time other jobs held the cores. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static wf_status encode_task(void *arg, int tid, int n_threads) {
    (void)n_threads;
    run_ctx *c = arg;
    wf_ids ids = {0};
    uint64_t n_tok = 0;
    for (size_t i = c->split[tid]; i < c->split[tid + 1]; i++) {
        ids.n = 0;
        wf_status s = wf_tokenizer_encode(c->tok, c->docs[i].s, c->docs[i].n, 0, &ids);
        if (s != WF_OK) {
            wf_ids_free(&ids);
            return s;
        }
        n_tok += ids.n;
    }
    c->tokens[tid] = n_tok;
    wf_ids_free(&ids);
    return WF_OK;
}

/* Documents of the text: non-empty lines, paragraphs, or the whole file. */
static doc *split_docs(const char *text, size_t len, const char *mode, size_t *n_out) {
    size_t cap = 1024, n = 0;
    doc *d = malloc(cap * sizeof *d);
    if (!d) return NULL;
    size_t at = 0;
    while (at < len) {
        size_t end;
        if (strcmp(mode, "file") == 0) {
            end = len;
        } else if (strcmp(mode, "paragraph") == 0) {
            const char *p = text + at;
            const char *q = NULL;
            for (const char *x = p; x + 1 < text + len; x++)
                if (x[0] == '\n' && x[1] == '\n') {
                    q = x;
                    break;
                }
            end = q ? (size_t)(q - text) + 2 : len;
        } else {
            const char *nl = memchr(text + at, '\n', len - at);
            end = nl ? (size_t)(nl - text) + 1 : len;
        }
        size_t dl = end - at;
        if (strcmp(mode, "line") == 0 && dl > 0 && text[end - 1] == '\n') dl--;
        if (dl > 0) {
            if (n == cap) {
                doc *nd = realloc(d, (cap *= 2) * sizeof *d);
                if (!nd) {
                    free(d);
                    return NULL;
                }
                d = nd;
            }
            d[n++] = (doc){text + at, dl};
        }
        at = end;
    }
    *n_out = n;
    return d;
}

static int usage(void) {
    fprintf(stderr, "usage: tokenizer_bench TOKENIZER_JSON TEXT_FILE [--threads 1,2] [--repeat 3] "
                    "[--doc line|paragraph|file]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *tok_path = argv[1], *text_path = argv[2], *threads = "1,2", *mode = "line";
    int repeat = 3;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = argv[++i];
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--doc") == 0 && i + 1 < argc) mode = argv[++i];
        else return usage();
    }
    char *text = NULL;
    size_t len = 0, n_docs = 0;
    if (wf_file_read(text_path, &text, &len) != WF_OK) {
        fprintf(stderr, "tokenizer_bench: %s\n", wf_error_msg());
        return 1;
    }
    doc *docs = split_docs(text, len, mode, &n_docs);
    if (!docs) {
        fprintf(stderr, "tokenizer_bench: out of memory\n");
        return 1;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < n_docs; i++) bytes += docs[i].n;
    fprintf(stderr, "tokenizer_bench: %s, %zu documents (%s), %.2f MB\n", text_path, n_docs, mode,
            (double)bytes / 1e6);

    for (const char *p = threads; *p;) {
        int nt = atoi(p);
        if (nt < 1) return usage();
        /* A fresh tokenizer per thread count: its thread states start cold. */
        wf_tokenizer *tok = NULL;
        if (wf_tokenizer_load(&tok, tok_path) != WF_OK) {
            fprintf(stderr, "tokenizer_bench: %s\n", wf_error_msg());
            return 1;
        }
        size_t *split = calloc((size_t)nt + 1, sizeof *split);
        uint64_t *tokens = calloc((size_t)nt, sizeof *tokens);
        if (!split || !tokens) return 1;
        size_t acc = 0, k = 0;
        for (int t = 1; t <= nt; t++) {
            size_t goal = bytes * (size_t)t / (size_t)nt;
            while (k < n_docs && acc < goal) acc += docs[k++].n;
            split[t] = k;
        }
        split[nt] = n_docs;
        run_ctx c = {tok, docs, n_docs, split, tokens};
        /* The first run is cold. Later runs start new threads, which take
         * over the exited threads' states (caches included): warm. */
        double best = 1e30, cold = 0, best_cpu = 1e30, cold_cpu = 0;
        uint64_t n_tok = 0;
        for (int r = 0; r <= repeat; r++) {
            double c0 = cpu_now(), t0 = wf_time_now();
            if (wf_parallel_run(nt, encode_task, &c) != WF_OK) {
                fprintf(stderr, "tokenizer_bench: %s\n", wf_error_msg());
                return 1;
            }
            double dt = wf_time_now() - t0, dc = (cpu_now() - c0) / nt;
            if (r == 0) {
                cold = dt;
                cold_cpu = dc;
            } else {
                if (dt < best) best = dt;
                if (dc < best_cpu) best_cpu = dc;
            }
            n_tok = 0;
            for (int t = 0; t < nt; t++) n_tok += tokens[t];
        }
        if (repeat == 0) {
            best = cold;
            best_cpu = cold_cpu;
        }
        printf("threads %d bytes %zu tokens %llu cold_s %.4f best_s %.4f cold_mbps %.2f mbps %.2f "
               "cold_cpu_s %.4f best_cpu_s %.4f\n",
               nt, bytes, (unsigned long long)n_tok, cold, best, (double)bytes / cold / 1e6,
               (double)bytes / best / 1e6, cold_cpu, best_cpu);
        fflush(stdout);
        free(split);
        free(tokens);
        wf_tokenizer_destroy(tok);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    free(docs);
    free(text);
    return 0;
}
