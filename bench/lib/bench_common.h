/* What the benchmarks of the model share (bench/lib/, linked into every
 * bench/ program): one option parser over a table, so that each program
 * lists its options once and its usage line is made from that list; the
 * process's CPU clock; and the random batch they step on.
 *
 * Options are `--name VALUE` (or `--name` alone for a flag), in any order;
 * an unknown option, a missing value or a value that is not a number where
 * one is wanted prints the usage and makes the program exit with 2. */
#ifndef WEFT_BENCH_COMMON_H
#define WEFT_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    BENCH_OPT_INT,    /* int *        */
    BENCH_OPT_DOUBLE, /* double *     */
    BENCH_OPT_STR,    /* const char **: points into argv */
    BENCH_OPT_FLAG,   /* int *: set to 1 when the option is given */
} bench_opt_kind;

typedef struct {
    const char *name; /* "--batch" */
    const char *meta; /* the value's name in the usage line ("B"); NULL for a flag */
    bench_opt_kind kind;
    void *value;      /* where the value goes; keeps its default when absent */
} bench_opt;

/* Parses argv[1..] into the table's values. 0 on success; on an error
 * prints what was wrong and "usage: PROG [--name META] ..." to stderr,
 * preceded by `launcher` when not NULL ("[mpirun -np W --bind-to none]"),
 * and returns 2, the exit code main() should return. */
int bench_opts_parse(int argc, char **argv, const char *prog, const char *launcher, const bench_opt *opts,
                     size_t n_opts);

/* Seconds of CPU time used by all the process's threads. */
double bench_cpu_seconds(void);

/* n random tokens and targets below V: the benchmarks' batch (seed 1,
 * stream 1), the same in every program that steps the model. */
void bench_random_batch(int32_t *tokens, int32_t *targets, size_t n, int V);

#endif
