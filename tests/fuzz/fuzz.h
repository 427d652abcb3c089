/* weft fuzz targets: what every target shares. Each tests/fuzz/fuzz_<name>.c
 * defines LLVMFuzzerTestOneInput for one parser of outside input; built with
 * libFuzzer (make fuzz: clang, -fsanitize=fuzzer,address,undefined) or with
 * the standalone driver (driver.c) in every other build, which replays
 * files (the seed corpus and the regression inputs) through the same entry.
 *
 * Parsers that only read files get the input through a file in a private
 * temporary folder ($TMPDIR, else /dev/shm, else /tmp) made once per
 * process and removed at exit. A target's contract: any input ends in a
 * wf_status (never a crash, a leak or undefined behaviour). */
#ifndef WEFT_FUZZ_H
#define WEFT_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft/log.h"
#include "weft/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir_[4096] __attribute__((unused));

static inline void fz_rm_tree_(const char *path) {
    /* The folders the targets make are one level deep at most. */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) { /* best effort at exit */ }
}

static inline void fz_cleanup_(void) {
    if (fz_dir_[0]) fz_rm_tree_(fz_dir_);
}

/* The process's temporary folder (made on first use; warnings quiet, since
 * every malformed input would print one). */
static inline const char *fz_dir(void) {
    if (!fz_dir_[0]) {
        const char *base = getenv("TMPDIR");
        struct stat st;
        if (!base || !*base) base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(fz_dir_, sizeof fz_dir_, "%s/weft-fuzz-XXXXXX", base);
        if (!mkdtemp(fz_dir_)) {
            perror("weft fuzz: mkdtemp");
            abort();
        }
        atexit(fz_cleanup_);
        wf_log_set_level(WF_LOG_ERROR);
    }
    return fz_dir_;
}

/* buf = "<tmpdir>/<name>". */
static inline const char *fz_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", fz_dir(), name);
    return buf;
}

/* Writes `size` bytes to path (replacing it); aborts on a write failure,
 * which is the harness's fault, not the parser's. */
static inline void fz_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Reads a whole file into a malloc'ed buffer (NUL-terminated); NULL if absent. */
static inline char *fz_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!b) abort();
    b[n] = '\0';
    *len = n;
    return b;
}

/* The input as the file dir/name (replacing it), for targets whose parser
 * reads a file that sits beside others the target made once. */
static inline void fz_write_in(const char *dir, const char *name, const uint8_t *data, size_t size) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fz_write(path, data, size);
}

/* With WEFT_FUZZ_SEED_OUT=FILE, copies dir/name, the file as the target's
 * setup wrote it before any input replaced it, to FILE
 * (tests/fuzz/make_seeds.sh takes the target's seed from there). */
static inline void fz_seed_out(const char *dir, const char *name) {
    const char *seed_out = getenv("WEFT_FUZZ_SEED_OUT");
    if (!seed_out) return;
    char path[4400];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = fz_read(path, &len);
    if (!text) {
        fprintf(stderr, "weft fuzz: %s: cannot read the seed\n", path);
        abort();
    }
    fz_write(seed_out, text, len);
    free(text);
}

/* A round trip that does not give back what it wrote is a bug: report it
 * the way a sanitizer would, so that libFuzzer keeps the input. */
#define FZ_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "weft fuzz: check failed: %s: ", #cond);          \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            abort();                                                          \
        }                                                                     \
    } while (0)

#endif
