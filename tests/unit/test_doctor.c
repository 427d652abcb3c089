/* Unit tests for the probes of `weft doctor` (weft/doctor.h) that do not
 * depend on what this machine has: the verdict over made-up reports
 * (failures, differences from rank 0, slowness against the median), the
 * memory and disk probes (rates, the probe file removed, a missing run
 * directory named), the shared-directory probe and a whole run on one
 * process, the test hook's parsing, finding a loaded library and hashing
 * the binary. The MPI runs, a broken BLAS, another binary and the CUDA
 * description are tests/py/test_doctor.py's. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "weft/comm.h"
#include "weft/doctor.h"
#include "weft/fileio.h"

/* A healthy report of rank i: every rate `rate`. */
static wf_doctor_report healthy(int i, double rate) {
    wf_doctor_report r;
    memset(&r, 0, sizeof r);
    r.rank = i;
    r.exe_hash = 0x1234;
    snprintf(r.build, sizeof r.build, "0.1.0, gcc 12, -O2");
    snprintf(r.mpi, sizeof r.mpi, "openmpi: Open MPI v4.1");
    snprintf(r.blas, sizeof r.blas, "OpenBLAS 0.3.21, core Haswell");
    r.gemm_gflops = r.mem_gbps = r.write_mbps = r.read_mbps = rate;
    return r;
}

/* One process, whatever launcher the tests run under. */
static wf_comm *single_comm(void) {
    wf_comm *c = NULL;
    wf_comm_options o = wf_comm_options_default();
    o.backend = "single";
    WF_CHECK_OK(wf_comm_create(&c, &o));
    return c;
}

WF_TEST(judge_names_failures_and_differences_from_rank_0) {
    wf_doctor_report all[3] = {healthy(0, 10), healthy(1, 10), healthy(2, 10)};
    all[1].exe_hash = 0x9999;
    snprintf(all[1].mpi, sizeof all[1].mpi, "mpich: MPICH 4.0");
    all[2].failed = WF_DOCTOR_FILE;
    snprintf(all[2].error, sizeof all[2].error, "disk: cannot create x/doctor-rank-00002.tmp: Permission denied");
    all[2].write_mbps = all[2].read_mbps = 0;
    wf_doctor_verdict *v = NULL;
    WF_CHECK_OK(wf_doctor_judge(all, 3, 2.0, &v));
    WF_CHECK_TRUE(!v[0].failing && !v[0].slow && v[0].why[0] == '\0');
    WF_CHECK_TRUE(v[1].failing && !v[1].slow);
    WF_CHECK_TRUE(strstr(v[1].why, "runs another weft binary than rank 0") != NULL);
    WF_CHECK_TRUE(strstr(v[1].why, "0000000000009999") && strstr(v[1].why, "0000000000001234"));
    WF_CHECK_TRUE(strstr(v[1].why, "another MPI than rank 0 (mpich: MPICH 4.0; rank 0: openmpi: Open MPI v4.1)"));
    WF_CHECK_TRUE(strstr(v[1].why, "another BLAS") == NULL);
    /* a failed disk probe: failing, its message kept, and not "slow" for its rate of 0 */
    WF_CHECK_TRUE(v[2].failing && !v[2].slow);
    WF_CHECK_STREQ(v[2].why, "disk: cannot create x/doctor-rank-00002.tmp: Permission denied");
    free(v);
}

WF_TEST(judge_finds_the_slow_rank_against_the_median) {
    wf_doctor_report all[4] = {healthy(0, 100), healthy(1, 100), healthy(2, 100), healthy(3, 100)};
    all[3].gemm_gflops = 20; /* median 100, / 2 = 50: slow */
    all[2].mem_gbps = 60;    /* above 50: not slow */
    wf_doctor_verdict *v = NULL;
    WF_CHECK_OK(wf_doctor_judge(all, 4, 2.0, &v));
    for (int i = 0; i < 3; i++) WF_CHECK_TRUE(!v[i].slow && !v[i].failing);
    WF_CHECK_TRUE(v[3].slow && !v[3].failing);
    WF_CHECK_STREQ(v[3].why, "sgemm 5.0x below the median (20 vs 100 GFLOP/s)");
    free(v);
    /* factor 0: never slow */
    WF_CHECK_OK(wf_doctor_judge(all, 4, 0.0, &v));
    WF_CHECK_TRUE(!v[3].slow && v[3].why[0] == '\0');
    free(v);
    /* a rank whose probe failed is left out of that rate's median: the
     * memory median is 65 (of 100 and 30), not 100 (of 100, 100 and 30) */
    wf_doctor_report three[3] = {healthy(0, 100), healthy(1, 40), healthy(2, 30)};
    three[0].failed = WF_DOCTOR_MEM;
    snprintf(three[0].error, sizeof three[0].error, "memory: a copy did not arrive");
    three[1].mem_gbps = 100;
    WF_CHECK_OK(wf_doctor_judge(three, 3, 2.0, &v));
    WF_CHECK_TRUE(v[0].failing && !v[0].slow);
    WF_CHECK_TRUE(!v[1].slow);
    WF_CHECK_TRUE(v[2].slow && strstr(v[2].why, "memory 2.2x below the median (30 vs 65 GB/s)"));
    WF_CHECK_TRUE(strstr(v[2].why, "sgemm") == NULL); /* 30 against the median 40: not below 20 */
    free(v);
}

WF_TEST(memory_probe_copies_and_rates) {
    wf_doctor_report r = healthy(0, 0);
    wf_doctor_probe_mem(&r, 2, 1);
    WF_CHECK_EQ(r.failed, 0);
    WF_CHECK_TRUE(r.mem_gbps > 0);
}

WF_TEST(gemm_probe_passes_its_own_check) {
    wf_doctor_report r = healthy(0, 0);
    wf_doctor_probe_gemm(&r, 64, 1);
    WF_CHECK_EQ(r.failed, 0);
    WF_CHECK_TRUE(r.error[0] == '\0');
    WF_CHECK_TRUE(r.gemm_gflops > 0);
}

WF_TEST(file_probe_writes_reads_back_and_removes) {
    wf_doctor_report r = healthy(3, 0);
    const char *dir = wf_test_tmpdir();
    wf_doctor_probe_file(&r, dir, 2, 2);
    WF_CHECK_EQ(r.failed, 0);
    WF_CHECK_TRUE(r.write_mbps > 0 && r.read_mbps > 0);
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("doctor-rank-00003.tmp")));
}

WF_TEST(file_probe_names_what_failed) {
    wf_doctor_report r = healthy(0, 0);
    const char *missing = wf_test_path("no/such/dir");
    wf_doctor_probe_file(&r, missing, 1, 1);
    WF_CHECK_EQ(r.failed, WF_DOCTOR_FILE);
    WF_CHECK_TRUE(strstr(r.error, "disk: cannot create ") && strstr(r.error, "no/such/dir/doctor-rank-00000.tmp"));
    WF_CHECK_TRUE(r.write_mbps == 0 && r.read_mbps == 0);
    /* the probe file's name taken by a folder, as test_doctor.py does on one rank */
    wf_doctor_report q = healthy(1, 0);
    WF_CHECK_TRUE(mkdir(wf_test_path("doctor-rank-00001.tmp"), 0755) == 0);
    wf_doctor_probe_file(&q, wf_test_tmpdir(), 1, 1);
    WF_CHECK_EQ(q.failed, WF_DOCTOR_FILE);
    WF_CHECK_TRUE(strstr(q.error, "doctor-rank-00001.tmp: Is a directory") != NULL);
}

WF_TEST(shared_probe_on_one_process) {
    wf_comm *c = single_comm();
    wf_doctor_report r = healthy(0, 0);
    WF_CHECK_OK(wf_doctor_probe_shared(&r, c, wf_test_tmpdir()));
    WF_CHECK_EQ(r.failed, 0);
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("doctor-shared.tmp")));
    wf_doctor_report q = healthy(0, 0);
    WF_CHECK_OK(wf_doctor_probe_shared(&q, c, wf_test_path("missing")));
    WF_CHECK_EQ(q.failed, WF_DOCTOR_SHARED);
    WF_CHECK_TRUE(strstr(q.error, "disk: cannot write ") && strstr(q.error, "missing/doctor-shared.tmp"));
    wf_comm_destroy(c);
}

WF_TEST(run_on_one_process) {
    wf_comm *c = single_comm();
    const char *dir = wf_test_path("run/dir");
    wf_doctor_options o = {.run_dir = dir, .gemm_size = 32, .mem_mb = 1, .file_mb = 1, .threads = 1, .repeat = 3};
    wf_doctor_report *all = NULL;
    WF_CHECK_OK(wf_doctor_run(c, &o, &all));
    WF_CHECK_EQ(all[0].rank, 0);
    WF_CHECK_EQ(all[0].failed, 0);
    WF_CHECK_EQ(all[0].slow_hook, 3);
    WF_CHECK_EQ(all[0].threads, 1);
    WF_CHECK_TRUE(all[0].gemm_gflops > 0 && all[0].mem_gbps > 0 && all[0].write_mbps > 0 && all[0].read_mbps > 0);
    WF_CHECK_TRUE(all[0].host[0] && strncmp(all[0].build, "0.1.0, ", 7) == 0);
    WF_CHECK_TRUE(strncmp(all[0].mpi, "single: ", 8) == 0);
    WF_CHECK_TRUE(wf_path_is_dir(dir));                              /* created */
    WF_CHECK_TRUE(!wf_path_exists(wf_test_path("run/dir/doctor-rank-00000.tmp"))); /* removed */
    wf_doctor_verdict *v = NULL;
    WF_CHECK_OK(wf_doctor_judge(all, 1, 2.0, &v));
    WF_CHECK_TRUE(!v[0].failing && !v[0].slow);
    free(v);
    free(all);
    /* repeat 1: no hook on this rank */
    o.repeat = 1;
    WF_CHECK_OK(wf_doctor_run(c, &o, &all));
    WF_CHECK_EQ(all[0].slow_hook, 0);
    free(all);
    wf_comm_destroy(c);
}

WF_TEST(slow_hook_parses_rank_and_factor) {
    int f = 0;
    unsetenv("WEFT_DOCTOR_SLOW");
    WF_CHECK_OK(wf_doctor_slow_hook(0, &f));
    WF_CHECK_EQ(f, 1);
    setenv("WEFT_DOCTOR_SLOW", "1:20", 1);
    WF_CHECK_OK(wf_doctor_slow_hook(1, &f));
    WF_CHECK_EQ(f, 20);
    WF_CHECK_OK(wf_doctor_slow_hook(0, &f));
    WF_CHECK_EQ(f, 1);
    static const char *bad[] = {"1", "1:0", "x:2", "-1:2", "1:2x", "1:100001"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("WEFT_DOCTOR_SLOW", bad[i], 1);
        WF_CHECK_ERR(wf_doctor_slow_hook(1, &f), WF_ERR_CONFIG, "expected RANK:FACTOR");
        WF_CHECK_TRUE(strstr(wf_error_msg(), bad[i]) != NULL);
        wf_error_clear();
    }
    unsetenv("WEFT_DOCTOR_SLOW");
}

WF_TEST(loaded_library_earliest_prefix_wins) {
    char out[4096];
    static const char *const libc[] = {"libc.so", NULL};
    wf_doctor_loaded_library(libc, out, sizeof out);
    WF_CHECK_TRUE(out[0] == '/' && strstr(out, "/libc") != NULL);
    WF_CHECK_TRUE(access(out, R_OK) == 0);
    /* libm is linked into this test too: listed first, it wins over libc */
    static const char *const m_first[] = {"libnosuchlib", "libm.so", "libc.so", NULL};
    wf_doctor_loaded_library(m_first, out, sizeof out);
    WF_CHECK_TRUE(strstr(out, "/libm") != NULL);
    static const char *const none[] = {"libnosuchlib", NULL};
    wf_doctor_loaded_library(none, out, sizeof out);
    WF_CHECK_STREQ(out, "");
}

WF_TEST(exe_hash_is_xxh3_of_the_binary) {
    char *data = NULL;
    size_t len = 0;
    WF_CHECK_OK(wf_file_read("/proc/self/exe", &data, &len));
    WF_CHECK_TRUE(len > 0);
    uint64_t h = wf_doctor_exe_hash();
    WF_CHECK_TRUE(h != 0);
    WF_CHECK_TRUE(h == wf_hash64(data, len));
    free(data);
}
