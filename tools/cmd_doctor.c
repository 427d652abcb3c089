/* `weft doctor`: a health check of the machines a job runs on, before
 * committing days of compute to them (docs/cluster.md, "weft doctor").
 * Started like training, under mpirun, mpiexec or srun (or alone), every
 * rank reports its host, weft's version, build and binary, the MPI, BLAS
 * and CUDA libraries it loaded, then takes part in an all-reduce of one
 * value and a barrier, and times a short sgemm, a memory copy and a
 * write/fsync/read of a file in the run directory (whose sharing between
 * ranks it also checks). Rank 0 gathers the reports and prints one table,
 * naming the ranks that fail a probe, run another binary or libraries than
 * rank 0, or are slow: a rate below the median over ranks divided by
 * --slow-factor. Every rank exits 1 when any rank failed (also when one is
 * slow, with --fail-slow), else 0.
 *
 * The probes and the verdict are the library's (weft/doctor.h,
 * src/obs/obs_doctor.c, which says what they do not do); this file parses
 * the options, runs them, prints the table or the JSON, and ends the job
 * when a collective failed. */
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/comm.h"
#include "weft/doctor.h"
#include "weft/weft.h"

typedef struct {
    char *run_dir;
    double slow_factor, timeout;
    int fail_slow, json;
    int64_t gemm_size, mem_mb, file_mb, threads;
} doctor_opts;

static const wf_opt doctor_opt_table[] = {
    {"run-dir", NULL, WF_OPT_STR, offsetof(doctor_opts, run_dir), ".", WF_NO_RANGE,
     "folder whose filesystem is probed (the training job's run directory; created if missing): each rank "
     "writes, fsyncs, reads back and removes doctor-rank-NNNNN.tmp in it, and the ranks check that they see "
     "the same folder"},
    {"slow-factor", NULL, WF_OPT_FLOAT, offsetof(doctor_opts, slow_factor), "2", 0, 1e6,
     "a rank is slow when its sgemm, memory or disk-write rate is below the median over ranks divided by this "
     "factor; 0: never"},
    {"fail-slow", NULL, WF_OPT_BOOL, offsetof(doctor_opts, fail_slow), "false", WF_NO_RANGE,
     "slow ranks make the exit status 1, as failing ones do"},
    {"gemm-size", NULL, WF_OPT_INT, offsetof(doctor_opts, gemm_size), "512", 16, 8192,
     "sgemm probe: square matrices of this size"},
    {"mem-mb", NULL, WF_OPT_INT, offsetof(doctor_opts, mem_mb), "64", 1, 65536,
     "memory probe: MiB copied (memcpy, one thread) per repetition"},
    {"file-mb", NULL, WF_OPT_INT, offsetof(doctor_opts, file_mb), "16", 1, 65536,
     "disk probe: MiB written, fsynced and read back per rank"},
    {"threads", NULL, WF_OPT_INT, offsetof(doctor_opts, threads), "0", 0, 4096,
     "threads of the sgemm probe; 0: WEFT_THREADS or every CPU, as weft train"},
    {"timeout", NULL, WF_OPT_FLOAT, offsetof(doctor_opts, timeout), "120", 1, 86400,
     "seconds a collective may block before the watchdog ends the rank (status 3), naming it: a rank that "
     "hangs or died"},
    {"json", NULL, WF_OPT_BOOL, offsetof(doctor_opts, json), "false", WF_NO_RANGE,
     "rank 0 prints one JSON object instead of the table"},
};

static const wf_cmd_spec doctor_spec = {
    "doctor",
    "weft doctor [--run-dir DIR] [options]   (under mpirun -np N, mpiexec, srun, or alone)",
    "Checks the machines of a job before it trains: every rank reports its host, weft's version, build and "
    "binary hash, the MPI, BLAS and CUDA libraries it loaded; joins an all-reduce of one value and a barrier; "
    "times a short sgemm, a memory copy, and a write/fsync/read of a file in the run directory, and checks that "
    "all ranks see the same run directory. Rank 0 prints one table and names the ranks that fail a probe, run "
    "another weft binary or other libraries than rank 0, or are slow (a rate below the median over ranks "
    "divided by --slow-factor). Exit status: 0 when every rank passed, 1 when any failed (or was slow, with "
    "--fail-slow); a rank that hangs ends the job after --timeout seconds (status 3).",
    doctor_opt_table,
    sizeof doctor_opt_table / sizeof *doctor_opt_table,
    0,
    0,
    0,
};

/* ------------------------------------------------------------ printing */

/* The ranks (numbers) whose string at `off` differs from rank 0's (for
 * the build, also the binary's hash), as "1, 3" or "". */
static void differing(const wf_doctor_report *all, int world, size_t off, size_t len, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 1; i < world && n + 16 < cap; i++)
        if (strncmp((const char *)&all[i] + off, (const char *)&all[0] + off, len) != 0 ||
            (off == offsetof(wf_doctor_report, build) && all[i].exe_hash != all[0].exe_hash))
            n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", i);
}

static void print_fact(const wf_doctor_report *all, int world, const char *label, size_t off, size_t len,
                       const char *file) {
    char diff[256];
    differing(all, world, off, len, diff, sizeof diff);
    printf("  %-6s %s", label, (const char *)&all[0] + off);
    if (file && *file) printf(" (%s)", file);
    if (world > 1) printf(diff[0] ? "  [rank 0's; differs on ranks %s]" : "  [every rank]", diff);
    printf("\n");
}

static int count_hosts(const wf_doctor_report *all, int world) {
    int n = 0;
    for (int i = 0; i < world; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(all[i].host, all[j].host) == 0;
        n += !seen;
    }
    return n;
}

static void list_ranks(const wf_doctor_verdict *v, int world, int slow, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < world && n + 16 < cap; i++)
        if (slow ? (v[i].slow && !v[i].failing) : v[i].failing)
            n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", i);
}

static void print_table(const wf_doctor_report *all, const wf_doctor_verdict *v, int world, const doctor_opts *o,
                        const char *backend) {
    int hosts = count_hosts(all, world);
    printf("weft doctor: %d rank%s on %d host%s (%s), run directory %s\n", world, world == 1 ? "" : "s", hosts,
           hosts == 1 ? "" : "s", backend, o->run_dir);
    char hash[40];
    snprintf(hash, sizeof hash, "binary XXH3 %016" PRIx64, all[0].exe_hash);
    print_fact(all, world, "weft", offsetof(wf_doctor_report, build), sizeof all->build, hash);
    print_fact(all, world, "MPI", offsetof(wf_doctor_report, mpi), sizeof all->mpi, all[0].mpi_file);
    print_fact(all, world, "BLAS", offsetof(wf_doctor_report, blas), sizeof all->blas, all[0].blas_file);
    print_fact(all, world, "CUDA", offsetof(wf_doctor_report, cuda), sizeof all->cuda, NULL);
    printf("  probes: all-reduce of one value and a barrier; sgemm %" PRId64 "^3; memcpy %" PRId64
           " MiB (1 thread); file of %" PRId64 " MiB written, fsynced, read back\n\n",
           o->gemm_size, o->mem_mb, o->file_mb);
    int hw = 4;
    for (int i = 0; i < world; i++) {
        int l = (int)strlen(all[i].host);
        if (l > hw) hw = l;
    }
    printf("%5s  %-*s %5s %5s %4s %12s %11s %11s %12s %11s %10s  %s\n", "rank", hw, "host", "local", "cpus",
           "thr", "all-red. ms", "barrier ms", "sgemm GF/s", "memcpy GB/s", "write MB/s", "read MB/s", "status");
    for (int i = 0; i < world; i++) {
        const wf_doctor_report *r = &all[i];
        const char *status = v[i].failing ? "FAIL: " : v[i].slow ? "SLOW: " : "ok";
        printf("%5d  %-*s %5d %5d %4d %12.3f %11.3f %11.1f %12.2f %11.1f %10.1f  %s%s\n", r->rank, hw, r->host,
               r->local_rank, r->cpus, r->threads, r->allreduce_ms, r->barrier_ms, r->gemm_gflops, r->mem_gbps,
               r->write_mbps, r->read_mbps, status, v[i].failing || v[i].slow ? v[i].why : "");
    }
    char failing[512], slow[512];
    list_ranks(v, world, 0, failing, sizeof failing);
    list_ranks(v, world, 1, slow, sizeof slow);
    printf("\n");
    if (failing[0]) printf("weft doctor: FAILING ranks: %s\n", failing);
    if (slow[0]) printf("weft doctor: SLOW ranks (a rate below the median / %g): %s\n", o->slow_factor, slow);
    if (!failing[0] && !slow[0]) printf("weft doctor: every rank passed\n");
    fflush(stdout);
}

static json_t *int_list(const wf_doctor_verdict *v, int world, int slow) {
    json_t *a = json_array();
    for (int i = 0; i < world; i++)
        if (slow ? (v[i].slow && !v[i].failing) : v[i].failing) json_array_append_new(a, json_integer(i));
    return a;
}

static void print_json(const wf_doctor_report *all, const wf_doctor_verdict *v, int world, const doctor_opts *o,
                       const char *backend, int ok) {
    json_t *root = json_object();
    json_object_set_new(root, "ok", json_boolean(ok));
    json_object_set_new(root, "world_size", json_integer(world));
    json_object_set_new(root, "hosts", json_integer(count_hosts(all, world)));
    json_object_set_new(root, "backend", json_string(backend));
    json_object_set_new(root, "run_dir", json_string(o->run_dir));
    json_object_set_new(root, "slow_factor", json_real(o->slow_factor));
    json_object_set_new(root, "failing", int_list(v, world, 0));
    json_object_set_new(root, "slow", int_list(v, world, 1));
    json_t *ranks = json_array();
    for (int i = 0; i < world; i++) {
        const wf_doctor_report *r = &all[i];
        json_t *x = json_object();
        char hash[24];
        snprintf(hash, sizeof hash, "%016" PRIx64, r->exe_hash);
        json_object_set_new(x, "rank", json_integer(r->rank));
        json_object_set_new(x, "host", json_string(r->host));
        json_object_set_new(x, "local_rank", json_integer(r->local_rank));
        json_object_set_new(x, "cpus", json_integer(r->cpus));
        json_object_set_new(x, "threads", json_integer(r->threads));
        json_object_set_new(x, "weft", json_string(r->build));
        json_object_set_new(x, "binary_xxh3", json_string(hash));
        json_object_set_new(x, "mpi", json_string(r->mpi));
        json_object_set_new(x, "mpi_library", json_string(r->mpi_file));
        json_object_set_new(x, "blas", json_string(r->blas));
        json_object_set_new(x, "blas_library", json_string(r->blas_file));
        json_object_set_new(x, "cuda", json_string(r->cuda));
        json_object_set_new(x, "allreduce_ms", json_real(r->allreduce_ms));
        json_object_set_new(x, "barrier_ms", json_real(r->barrier_ms));
        json_object_set_new(x, "sgemm_gflops", json_real(r->gemm_gflops));
        json_object_set_new(x, "memcpy_gbps", json_real(r->mem_gbps));
        json_object_set_new(x, "write_mbps", json_real(r->write_mbps));
        json_object_set_new(x, "read_mbps", json_real(r->read_mbps));
        json_object_set_new(x, "status", json_string(v[i].failing ? "fail" : v[i].slow ? "slow" : "ok"));
        json_object_set_new(x, "problems", json_string(v[i].why));
        json_object_set_new(x, "slow_hook", json_integer(r->slow_hook));
        json_array_append_new(ranks, x);
    }
    json_object_set_new(root, "ranks", ranks);
    char *s = json_dumps(root, JSON_INDENT(2));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(root);
    fflush(stdout);
}

/* ------------------------------------------------------------ the command */

/* Every rank runs this. A failed collective is fatal: the job ends. */
static int run_doctor(const doctor_opts *o, wf_comm *c) {
    int world = wf_comm_size(c), rank = wf_comm_rank(c);
    int slow = 1;
    if (wf_doctor_slow_hook(rank, &slow) != WF_OK) return wf_tool_fail("doctor");
    wf_doctor_options dop = {.run_dir = o->run_dir, .gemm_size = o->gemm_size, .mem_mb = o->mem_mb,
                             .file_mb = o->file_mb, .threads = (int)o->threads, .repeat = slow};
    wf_doctor_report *all = NULL;
    if (wf_doctor_run(c, &dop, &all) != WF_OK) {
        wf_tool_fail("doctor");
        if (world > 1) {
            WF_ERROR("doctor: ending all %d ranks (a collective failed on rank %d)", world, rank);
            wf_comm_abort(c, 1);
        }
        return 1;
    }
    wf_doctor_verdict *v = NULL;
    if (wf_doctor_judge(all, world, o->slow_factor, &v) != WF_OK) {
        free(all);
        return wf_tool_fail("doctor");
    }
    int bad = 0;
    for (int i = 0; i < world; i++) bad |= v[i].failing || (o->fail_slow && v[i].slow);
    if (rank == 0) {
        if (o->json) print_json(all, v, world, o, wf_comm_backend(c), !bad);
        else print_table(all, v, world, o, wf_comm_backend(c));
    }
    free(v);
    free(all);
    return bad ? 1 : 0;
}

static int doctor_main(void *opts, const wf_strs *pos) {
    (void)pos; /* the doctor takes none */
    const doctor_opts *o = opts;
    wf_comm_options co = wf_comm_options_default();
    co.timeout_first_s = co.timeout_s = o->timeout;
    co.timeout_first_name = co.timeout_name = "--timeout";
    wf_comm *c = NULL;
    if (wf_comm_create(&c, &co) != WF_OK) return wf_tool_fail("doctor");
    int rc = run_doctor(o, c);
    wf_comm_destroy(c);
    return rc;
}

int wf_cmd_doctor(int argc, char **argv) {
    doctor_opts o;
    return wf_tool_run(&doctor_spec, &o, sizeof o, argc, argv, doctor_main);
}
