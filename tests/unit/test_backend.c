/* The backend seam (include/weft/backend.h): opening by name, dtype
 * refusals, arenas over a backend's blocks, and ops-check: cpu and ref pass
 * it, and a backend with one planted wrong op (registered by this test
 * only, through the internal wf__backend_register) is caught, by the op's
 * name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/backend_impl.h"
#include "weft/backend.h"
#include "weft/kernels.h"

typedef struct {
    int n, failed;
    char failed_ops[8][32];
    int n_failed_ops;
} tally_;

static void count_(void *ctx, const wf_ops_check_result *r) {
    tally_ *t = ctx;
    t->n++;
    if (r->ok) return;
    t->failed++;
    if (t->n_failed_ops < 8) snprintf(t->failed_ops[t->n_failed_ops++], 32, "%s", r->op);
}

static tally_ check_(const char *name, const char *op) {
    wf_backend *be = NULL, *ref = NULL;
    tally_ t = {0};
    WF_CHECK_OK(wf_backend_open(&be, name));
    WF_CHECK_OK(wf_backend_open(&ref, "ref"));
    int failed = -1;
    WF_CHECK_OK(wf_backend_ops_check(be, ref, op, 0, 7, count_, &t, &failed));
    WF_CHECK_EQ(failed, t.failed);
    wf_backend_close(be);
    wf_backend_close(ref);
    return t;
}

WF_TEST(every_backend_that_opens_passes_ops_check) {
    int n_backends = 0;
    for (const char *const *name = wf_backend_names(); *name; name++) {
        wf_backend *be = NULL;
        if (wf_backend_open(&be, *name) != WF_OK) continue; /* e.g. a device backend without its device */
        wf_backend_close(be);
        tally_ t = check_(*name, NULL);
        WF_CHECK_EQ(t.failed, 0);
        WF_CHECK_TRUE(t.n >= 40); /* every op, every output */
        n_backends++;
    }
    WF_CHECK_TRUE(n_backends >= 2); /* cpu and ref at least */
    tally_ c = check_("cpu", NULL), r = check_("ref", NULL);
    WF_CHECK_EQ(c.n, r.n);
    tally_ one = check_("cpu", "attention_bwd");
    WF_CHECK_EQ(one.n, 2);
}

/* Planted faults: a swiglu backward that is off by 1e-3 in one element's
 * gate gradient; a matmul that ignores `accumulate`. */
static int (*cpu_swiglu_bwd_)(void *, wf_dptr, wf_dptr, wf_dptr, int, int);
static int (*cpu_matmul_)(void *, const wf_matmul_desc *);

static int planted_swiglu_bwd(void *state, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H) {
    int rc = cpu_swiglu_bwd_(state, dh13, dout, h13, N, H);
    ((float *)dh13.p)[(size_t)N * H / 2] *= 1.001f;
    return rc;
}

static int planted_matmul(void *state, const wf_matmul_desc *d) {
    wf_matmul_desc e = *d;
    e.accumulate = 0;
    return cpu_matmul_(state, &e);
}

WF_TEST(a_planted_wrong_op_is_named) {
    static wf_backend_ops swiglu, matmul;
    swiglu = *wf__backend_cpu_ops();
    matmul = swiglu;
    cpu_swiglu_bwd_ = swiglu.swiglu_bwd;
    cpu_matmul_ = matmul.matmul;
    swiglu.name = "planted-swiglu";
    swiglu.swiglu_bwd = planted_swiglu_bwd;
    matmul.name = "planted-matmul";
    matmul.matmul = planted_matmul;
    WF_CHECK_OK(wf__backend_register(&swiglu));
    WF_CHECK_OK(wf__backend_register(&matmul));

    tally_ t = check_("planted-swiglu", NULL);
    WF_CHECK_EQ(t.failed, 1);
    WF_CHECK_STREQ(t.failed_ops[0], "swiglu_bwd");
    t = check_("planted-matmul", NULL);
    WF_CHECK_TRUE(t.failed >= 1);
    for (int i = 0; i < t.n_failed_ops; i++) WF_CHECK_STREQ(t.failed_ops[i], "matmul");

    /* A table of another ABI is refused, saying to rebuild. */
    static wf_backend_ops old;
    old = *wf__backend_cpu_ops();
    old.abi = WF_BACKEND_ABI + 1;
    WF_CHECK_ERR(wf__backend_register(&old), WF_ERR_INVALID, "rebuild");
}

WF_TEST(unknown_names_and_dtypes_are_refused_by_name) {
    wf_backend *be = NULL;
    WF_CHECK_ERR(wf_backend_open(&be, "tpu"), WF_ERR_NOTFOUND, "cpu, ref, cuda, cudaemu");
    WF_CHECK_TRUE(be == NULL);
    WF_CHECK_OK(wf_backend_open(&be, "cpu"));
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    wf_dptr bf = {x, WF_DTYPE_BF16};
    WF_CHECK_ERR(wf_backend_add(be, wf_f32(y), bf, wf_f32(x), 8), WF_ERR_UNSUPPORTED, "add: argument a has dtype bf16");
    double s = 0;
    WF_CHECK_ERR(wf_backend_sumsq(be, wf_i32((const int32_t *)x), 8, &s), WF_ERR_UNSUPPORTED, "sumsq");
    int32_t t[2] = {0, 1};
    float lse[2], losses[2];
    WF_CHECK_ERR(wf_backend_crossentropy_fwd(be, wf_f32(losses), wf_f32(lse), wf_f32(x), wf_f32((const float *)t), 2, 4),
                 WF_ERR_UNSUPPORTED, "targets has dtype f32");
    WF_CHECK_OK(wf_backend_add(be, wf_f32(y), wf_f32(x), wf_f32(x), 8));
    WF_CHECK_EQ(y[7], 16.0f);
    WF_CHECK_OK(wf_backend_sumsq(be, wf_f32(x), 8, &s));
    WF_CHECK_EQ(s, 204.0);
    wf_backend_close(be);
}

WF_TEST(an_arena_carves_a_backends_blocks) {
    wf_backend *be = NULL;
    WF_CHECK_OK(wf_backend_open(&be, "ref"));
    wf_arena_mem mem = wf_backend_arena_mem(be);
    wf_arena *a = NULL;
    WF_CHECK_OK(wf_arena_create_mem(&a, 1 << 16, &mem));
    float *p = wf_arena_alloc(a, 1000 * sizeof(float), 64);
    WF_CHECK_TRUE(p != NULL);
    float host[1000];
    for (int i = 0; i < 1000; i++) host[i] = (float)i;
    WF_CHECK_OK(wf_backend_download(be, host, p, sizeof host)); /* zeroed when handed out */
    WF_CHECK_EQ(host[999], 0.0f);
    float *big = wf_arena_alloc(a, 1 << 20, 64); /* its own block */
    WF_CHECK_TRUE(big != NULL);
    WF_CHECK_EQ(wf_arena_get_stats(a).reserved >= (1u << 20) + (1u << 16), 1);
    wf_arena_destroy(a);
    size_t free_b = 0, total_b = 0;
    WF_CHECK_OK(wf_backend_mem_info(be, &free_b, &total_b));
    WF_CHECK_TRUE(total_b > 0 && free_b <= total_b);
    wf_backend_close(be);
}

WF_TEST(devices_open_by_name_and_local_ranks_pick_the_device) {
    wf_backend *be = NULL;
    char note[512];
    WF_CHECK_OK(wf_backend_open_device(&be, "cpu", note, sizeof note));
    WF_CHECK_TRUE(be == wf_backend_cpu());
    WF_CHECK_STREQ(note, "");
    /* no cuda backend that starts (not built, or no driver): cuda fails
     * naming it, auto falls back and says why */
    wf_status why = wf_backend_open(&be, "cuda");
    if (why != WF_OK) {
        wf_error_clear();
        WF_CHECK_ERR(wf_backend_open_device(&be, "cuda", NULL, 0), why, "backend cuda: ");
        WF_CHECK_OK(wf_backend_open_device(&be, "auto", note, sizeof note));
        WF_CHECK_TRUE(be == wf_backend_cpu());
        WF_CHECK_TRUE(strstr(note, "device auto: cuda did not open (") == note);
    } else {
        wf_backend_close(be);
    }
    WF_CHECK_ERR(wf_backend_open_device(&be, "gpu", NULL, 0), WF_ERR_CONFIG, "use cpu, cuda or auto");

    static const char *const vars[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
    for (size_t i = 0; i < 4; i++) unsetenv(vars[i]);
    const char *from = NULL;
    WF_CHECK_EQ(wf_backend_local_device(8, &from), 0);
    WF_CHECK_STREQ(from, "");
    setenv("MPI_LOCALRANKID", "3", 1);
    WF_CHECK_EQ(wf_backend_local_device(8, &from), 3);
    WF_CHECK_STREQ(from, "MPI_LOCALRANKID");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
    WF_CHECK_EQ(wf_backend_local_device(8, &from), 5);
    setenv("SLURM_LOCALID", "9", 1); /* modulo the visible devices */
    WF_CHECK_EQ(wf_backend_local_device(8, &from), 1);
    WF_CHECK_STREQ(from, "SLURM_LOCALID");
    setenv("LOCAL_RANK", "x", 1); /* not a number: the next variable */
    WF_CHECK_EQ(wf_backend_local_device(8, &from), 1);
    setenv("LOCAL_RANK", "2", 1);
    WF_CHECK_EQ(wf_backend_local_device(8, &from), 2);
    WF_CHECK_EQ(wf_backend_local_device(1, &from), 0); /* one device per rank */
    for (size_t i = 0; i < 4; i++) unsetenv(vars[i]);
}
