/* Data-loader throughput against memcpy of the same bytes.
 *
 * Writes a dataset of random tokens (50M by default, uint16 like a GPT-2
 * vocabulary) into a temporary directory with wf_dataset_writer, then for a
 * few training-like shapes (B, T) consumes shuffled batches as fast as it
 * can, summing every token as a training step would touch it, and reports
 * tokens/s (B*T per batch). The peer, measured in the same run, is memcpy
 * of the same bytes (B*(T+1) int32 per batch) from random offsets of a
 * buffer as large as the dataset, followed by the same sum: what a loader
 * that did nothing but copy could reach. It also says what share of the
 * loader a training run at a given speed would use.
 *
 *   loader_bench [--tokens N] [--seconds S] [--dir DATASET_DIR | --write DATASET_DIR]
 *
 * --dir reads an existing dataset instead of writing one; --write writes
 * it into DATASET_DIR (a new directory) and keeps it there, so that other
 * programs can read the same tokens (bench/python_bench.py). Not a test:
 * it prints numbers and asserts nothing.
 */
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "weft/loader.h"
#include "weft/rng.h"
#include "weft/shard.h"
#include "weft/thread.h"

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int write_dataset(const char *dir, uint64_t n_tokens) {
    wf_dataset_writer *w = NULL;
    wf_dataset_writer_opts wo = {.dir = dir, .vocab_size = 50257, .shard_tokens = 1u << 24,
                                 .tokenizer_path = NULL};
    if (wf_dataset_writer_create(&w, &wo) != WF_OK) return -1;
    int32_t *doc = malloc(4096 * sizeof *doc);
    if (!doc) {
        wf_dataset_writer_destroy(w);
        return -1;
    }
    wf_rng r = wf_rng_make(2024, 0);
    /* Documents of 64..4095 tokens; 1% of the tokens go to val. */
    for (int split = 0; split < 2; split++) {
        uint64_t want = split ? n_tokens / 100 + 4096 : n_tokens;
        for (uint64_t k = 0; k < want;) {
            size_t len = 64 + (size_t)wf_rng_below(&r, 4096 - 64);
            for (size_t i = 0; i < len; i++) doc[i] = (int32_t)wf_rng_below(&r, 50257);
            if (wf_dataset_writer_add(w, split, doc, len) != WF_OK) {
                free(doc);
                wf_dataset_writer_destroy(w);
                return -1;
            }
            k += len;
        }
    }
    free(doc);
    wf_status s = wf_dataset_writer_finish(w);
    wf_dataset_writer_destroy(w);
    return s == WF_OK ? 0 : -1;
}

/* Sums every token, as a step touches them; the sum keeps it from being
 * optimised away. */
static uint64_t touch(const int32_t *t, size_t n) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += (uint32_t)t[i];
    return sum;
}

typedef struct {
    double tokens_per_s, wait_share;
    uint64_t batches;
} loader_result;

static int run_loader(const char *dir, int B, int T, int prefetch, double seconds, loader_result *res,
                      uint64_t *sink) {
    wf_loader_opts o = {.dir = dir, .split = "train", .seed = 1, .seq_len = T, .global_batch = B,
                        .rank = 0, .world_size = 1, .shuffle = 1, .prefetch = prefetch, .verify = 0};
    wf_loader *l = NULL;
    if (wf_loader_create(&l, &o) != WF_OK) return -1;
    const size_t n = (size_t)B * ((size_t)T + 1);
    /* Warm up: the first batches fault in pages and start the thread. */
    for (int i = 0; i < 4; i++) {
        const wf_batch *b = NULL;
        if (wf_loader_next(l, &b) != WF_OK) goto fail;
        *sink += touch(b->tokens, n);
    }
    uint64_t batches = 0;
    double waited = 0.0;
    const double t0 = wf_time_now();
    double now = t0;
    while (now - t0 < seconds) {
        for (int i = 0; i < 8; i++) {
            const wf_batch *b = NULL;
            if (wf_loader_next(l, &b) != WF_OK) goto fail;
            *sink += touch(b->tokens, n);
            waited += b->wait_seconds;
            batches++;
        }
        now = wf_time_now();
    }
    res->batches = batches;
    res->tokens_per_s = (double)batches * B * T / (now - t0);
    res->wait_share = waited / (now - t0);
    wf_loader_destroy(l);
    return 0;
fail:
    fprintf(stderr, "loader_bench: %s\n", wf_error_msg());
    wf_loader_destroy(l);
    return -1;
}

/* memcpy of the same bytes a batch holds, from random offsets of a buffer
 * as large as the dataset's tokens, then the same touch. */
static double run_memcpy(const int32_t *src, size_t src_n, int B, int T, double seconds, uint64_t *sink) {
    const size_t row = (size_t)T + 1, n = (size_t)B * row;
    int32_t *dst = malloc(n * sizeof *dst);
    if (!dst) return 0.0;
    wf_rng r = wf_rng_make(7, 0);
    uint64_t batches = 0;
    const double t0 = wf_time_now();
    double now = t0;
    while (now - t0 < seconds) {
        for (int i = 0; i < 8; i++) {
            for (int b = 0; b < B; b++)
                memcpy(dst + (size_t)b * row, src + wf_rng_below(&r, src_n - row), row * sizeof *dst);
            *sink += touch(dst, n);
            batches++;
        }
        now = wf_time_now();
    }
    free(dst);
    return (double)batches * B * T / (now - t0);
}

int main(int argc, char **argv) {
    uint64_t n_tokens = 50000000;
    double seconds = 2.0;
    const char *dir = NULL, *keep = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            n_tokens = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--write") && i + 1 < argc) {
            keep = argv[++i];
        } else {
            fprintf(stderr, "usage: loader_bench [--tokens N] [--seconds S] [--dir DATASET_DIR | --write "
                            "DATASET_DIR]\n");
            return 2;
        }
    }
    if (dir && keep) {
        fprintf(stderr, "loader_bench: --dir reads a dataset, --write writes one: give one of them\n");
        return 2;
    }
    if (n_tokens < 100000) n_tokens = 100000;

    char tmp[512] = {0};
    if (keep) {
        if (mkdir(keep, 0777) != 0) {
            fprintf(stderr, "loader_bench: --write %s: %s (give a new directory)\n", keep, strerror(errno));
            return 1;
        }
        dir = keep;
        double t0 = wf_time_now();
        if (write_dataset(dir, n_tokens) != 0) {
            fprintf(stderr, "loader_bench: writing the dataset into %s: %s\n", dir, wf_error_msg());
            return 1;
        }
        printf("dataset: %llu random uint16 tokens written to %s in %.1f s (kept)\n",
               (unsigned long long)n_tokens, dir, wf_time_now() - t0);
    } else if (!dir) {
        const char *base = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/weft-loader-bench-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmp)) {
            perror("loader_bench: mkdtemp");
            return 1;
        }
        dir = tmp;
        double t0 = wf_time_now();
        if (write_dataset(dir, n_tokens) != 0) {
            fprintf(stderr, "loader_bench: writing the dataset: %s\n", wf_error_msg());
            nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            return 1;
        }
        printf("dataset: %llu random uint16 tokens written to %s in %.1f s\n",
               (unsigned long long)n_tokens, dir, wf_time_now() - t0);
    }

    wf_dataset ds;
    memset(&ds, 0, sizeof ds);
    if (wf_dataset_open(&ds, dir, "train", 0) != WF_OK) {
        fprintf(stderr, "loader_bench: %s\n", wf_error_msg());
        return 1;
    }
    const size_t src_n = (size_t)ds.n_tokens;
    wf_dataset_close(&ds);
    int32_t *src = malloc(src_n * sizeof *src);
    if (!src) {
        fprintf(stderr, "loader_bench: out of memory for %zu tokens\n", src_n);
        return 1;
    }
    for (size_t i = 0; i < src_n; i++) src[i] = (int32_t)(i * 2654435761u % 50257u);

    static const int shapes[][2] = {{8, 256}, {32, 1024}};
    uint64_t sink = 0;
    int rc = 0;
    printf("%-12s %-9s %14s %14s %8s %10s\n", "B x T", "prefetch", "loader tok/s", "memcpy tok/s",
           "ratio", "wait share");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes && rc == 0; si++) {
        const int B = shapes[si][0], T = shapes[si][1];
        const double mem = run_memcpy(src, src_n, B, T, seconds, &sink);
        for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
            loader_result res;
            if (run_loader(dir, B, T, prefetch, seconds, &res, &sink) != 0) {
                rc = 1;
                break;
            }
            char shape[32];
            snprintf(shape, sizeof shape, "%d x %d", B, T);
            printf("%-12s %-9d %14.3e %14.3e %8.2f %9.1f%%\n", shape, prefetch, res.tokens_per_s, mem,
                   res.tokens_per_s / mem, 100.0 * res.wait_share);
            if (prefetch == 2) {
                static const double train[] = {1e4, 1e5, 1e6};
                for (int k = 0; k < 3; k++)
                    printf("    training at %.0e tokens/s uses %.3f%% of the loader\n", train[k],
                           100.0 * train[k] / res.tokens_per_s);
            }
        }
    }
    printf("(checksum %llu)\n", (unsigned long long)(sink & 0xffff));
    free(src);
    if (tmp[0]) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
