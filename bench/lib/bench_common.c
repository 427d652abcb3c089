/* The benchmarks' shared options, clock and batch (bench_common.h). */
#include "bench_common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/rng.h"

static void usage(const char *prog, const char *launcher, const bench_opt *opts, size_t n) {
    fprintf(stderr, "usage: %s%s%s", launcher ? launcher : "", launcher ? " " : "", prog);
    for (size_t i = 0; i < n; i++) {
        if (opts[i].kind == BENCH_OPT_FLAG) fprintf(stderr, " [%s]", opts[i].name);
        else fprintf(stderr, " [%s %s]", opts[i].name, opts[i].meta ? opts[i].meta : "X");
    }
    fputc('\n', stderr);
}

/* Stores text into o's value; 0, or -1 when it is not a number o takes. */
static int store(const bench_opt *o, const char *text) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case BENCH_OPT_INT: {
        long v = strtol(text, &end, 10);
        if (end == text || *end || errno || v < INT_MIN || v > INT_MAX) return -1;
        *(int *)o->value = (int)v;
        return 0;
    }
    case BENCH_OPT_DOUBLE: {
        double v = strtod(text, &end);
        if (end == text || *end || errno) return -1;
        *(double *)o->value = v;
        return 0;
    }
    case BENCH_OPT_STR: *(const char **)o->value = text; return 0;
    case BENCH_OPT_FLAG: *(int *)o->value = 1; return 0;
    }
    return -1;
}

int bench_opts_parse(int argc, char **argv, const char *prog, const char *launcher, const bench_opt *opts,
                     size_t n_opts) {
    for (int i = 1; i < argc; i++) {
        const bench_opt *o = NULL;
        for (size_t k = 0; k < n_opts && !o; k++)
            if (strcmp(argv[i], opts[k].name) == 0) o = &opts[k];
        if (!o) {
            fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[i]);
        } else if (o->kind == BENCH_OPT_FLAG) {
            store(o, NULL);
            continue;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", prog, o->name);
        } else if (store(o, argv[i + 1]) != 0) {
            fprintf(stderr, "%s: %s %s: not a number\n", prog, o->name, argv[i + 1]);
        } else {
            i++;
            continue;
        }
        usage(prog, launcher, opts, n_opts);
        return 2;
    }
    return 0;
}

double bench_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_random_batch(int32_t *tokens, int32_t *targets, size_t n, int V) {
    wf_rng r = wf_rng_make(1, 1);
    for (size_t i = 0; i < n; i++) {
        tokens[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
        targets[i] = (int32_t)wf_rng_below(&r, (uint64_t)V);
    }
}
