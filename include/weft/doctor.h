/* weft: the probes behind `weft doctor`, a health check of the machines a
 * job runs on before it trains (docs/cluster.md, "weft doctor"). Every
 * rank fills one fixed-size report (its host, weft's build and binary,
 * the MPI, BLAS and CUDA libraries it loaded, the rates of a short sgemm,
 * a memory copy and a file written to the run directory), the reports are
 * gathered to every rank, and a verdict per rank names what failed, what
 * differs from rank 0 and what is slow. The command (tools/cmd_doctor.c)
 * parses the options and prints; everything it reports comes from here.
 *
 * It does not: test the network's bandwidth (`weft bench allreduce`
 * does), run on GPUs (it only describes the CUDA driver and devices when
 * libcuda.so.1 is present), or survive a rank that dies: the others' next
 * collective then fails or times out, and wf_doctor_run returns that
 * error (the caller ends the job). */
#ifndef WEFT_DOCTOR_H
#define WEFT_DOCTOR_H

#include <stddef.h>
#include <stdint.h>

#include "weft/comm.h"
#include "weft/status.h"

/* The probes, as bits of wf_doctor_report.failed. */
enum {
    WF_DOCTOR_COMM = 1,    /* the all-reduce of one value and the barrier */
    WF_DOCTOR_GEMM = 2,    /* sgemm: its rate and 16 outputs checked */
    WF_DOCTOR_MEM = 4,     /* memcpy on one thread */
    WF_DOCTOR_FILE = 8,    /* a file in the run directory: write, fsync, read back */
    WF_DOCTOR_SHARED = 16, /* every rank sees rank 0's run directory */
};

/* What one rank found: fixed-size, gathered byte for byte to every rank
 * (wf_comm_all_gather_bytes), so every field is a number or a
 * NUL-terminated string in place. Rates are 0 when their probe did not
 * run or failed. */
typedef struct {
    int32_t rank, local_rank, cpus, threads, failed; /* failed: WF_DOCTOR_* bits */
    int32_t slow_hook;                               /* the test hook's factor on this rank, or 0 */
    uint64_t exe_hash;                               /* XXH3 of /proc/self/exe; 0: unreadable */
    double allreduce_ms, barrier_ms, gemm_gflops, mem_gbps, write_mbps, read_mbps;
    char host[64];
    char build[192];     /* WF_VERSION, the compiler and flags (wf_build_describe) */
    char mpi[256];       /* backend: library version line */
    char mpi_file[256];  /* the MPI library file loaded, or the backend's */
    char blas[160];      /* OpenBLAS's build line, core */
    char blas_file[256];
    char cuda[256];
    char error[512];     /* what failed, first failure first, "; " between */
} wf_doctor_report;

/* The verdict on one rank (wf_doctor_judge). */
typedef struct {
    int failing, slow;
    char why[768]; /* the rank's problems, "; " between; "" when none */
} wf_doctor_verdict;

typedef struct {
    const char *run_dir;     /* the folder probed (created if missing) */
    int64_t gemm_size;       /* sgemm probe: square matrices of this size */
    int64_t mem_mb;          /* memory probe: MiB copied per repetition */
    int64_t file_mb;         /* disk probe: MiB written, fsynced and read back */
    int threads;             /* threads of the sgemm probe; 0: wf_default_threads() */
    int repeat;              /* each timed probe does its work this many times, counted once
                                (the test hook WEFT_DOCTOR_SLOW; 1 otherwise) */
} wf_doctor_options;

/* The test hook WEFT_DOCTOR_SLOW=R:F: *factor is F on rank R, else 1 (also
 * when the variable is unset or empty). A malformed value is WF_ERR_CONFIG,
 * naming the variable. */
wf_status wf_doctor_slow_hook(int rank, int *factor);

/* Runs every probe on this rank and gathers the reports. Collective: every
 * rank calls it, and the collectives are the same whatever its probes
 * found. A probe that fails is recorded in the report (failed, error), not
 * returned; an error return means a collective failed (or memory for the
 * reports ran out), and the ranks should be ended. *all: world reports in
 * rank order, the caller's to free. */
wf_status wf_doctor_run(wf_comm *c, const wf_doctor_options *o, wf_doctor_report **all);

/* Each rank's verdict: its failures, differences from rank 0 (binary, MPI,
 * BLAS) and slowness: a sgemm, memory or disk-write rate below the median
 * over the ranks whose probe passed, divided by `factor` (0: never slow;
 * at least two such ranks are needed). *out: world verdicts, the caller's
 * to free. */
wf_status wf_doctor_judge(const wf_doctor_report *all, int world, double factor, wf_doctor_verdict **out);

/* The single probes, as wf_doctor_run calls them (each records a failure
 * in r->failed and r->error, and its rate in r; `repeat` as in
 * wf_doctor_options). */

/* This process's facts: rank, CPUs, threads, host, build, binary hash,
 * MPI (of c), BLAS and CUDA. */
void wf_doctor_facts(wf_doctor_report *r, wf_comm *c);
/* Square sgemm of size n through the model's kernel: the median of 5
 * timings, and 16 outputs checked against sums in double. */
void wf_doctor_probe_gemm(wf_doctor_report *r, int n, int repeat);
/* memcpy of mb MiB on one thread: bytes read plus written per second. */
void wf_doctor_probe_mem(wf_doctor_report *r, int64_t mb, int repeat);
/* dir/doctor-rank-NNNNN.tmp of mb MiB: written, fsynced, dropped from the
 * page cache, read back and compared, removed. */
void wf_doctor_probe_file(wf_doctor_report *r, const char *dir, int64_t mb, int repeat);
/* Whether every rank sees rank 0's dir: rank 0 writes doctor-shared.tmp
 * with a token, every rank reads it. Collective; returns an error only
 * when a collective failed. */
wf_status wf_doctor_probe_shared(wf_doctor_report *r, wf_comm *c, const char *dir);

/* The file of the loaded shared object whose name starts with one of
 * `prefixes` (NULL-terminated; the earliest prefix wins), resolved; ""
 * when none is loaded. */
void wf_doctor_loaded_library(const char *const *prefixes, char *out, size_t cap);
/* The CUDA driver, when libcuda.so.1 is installed: its version and every
 * device's name and memory; else why not. */
void wf_doctor_describe_cuda(char *out, size_t cap);
/* XXH3-64 of this process's binary (/proc/self/exe); 0 when unreadable. */
uint64_t wf_doctor_exe_hash(void);

#endif
