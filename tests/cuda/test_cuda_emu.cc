/* Unit test of the CUDA emulator itself (src/cuda/emu/), run by
 * tests/py/test_cudaemu.py: each check prints "ok NAME" or "FAIL NAME:
 * why", and the program exits 1 if any failed. It checks what the
 * backend's tests rely on without seeing directly: the warp exchange gives
 * each lane its partner's value and the ballot the warp's bits, under
 * every schedule; warp-serial schedules really run warp by warp (a warp
 * reads another's shared memory before it is written, which round robin
 * hides); a deadlock, a write before or after an allocation, a write past
 * shared memory and an impossible launch are reported with their words. */
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_compat.h"

static int failed_;

static void check_(int ok, const char *name, const char *why) {
    if (ok) printf("ok %s\n", name);
    else printf("FAIL %s: %s\n", name, why), failed_ = 1;
}

/* out[t] = the value of lane t ^ mask, for masks 1, 2, 4, 8, 16, summed
 * with weights so a wrong partner shows. */
static __global__ void shfl_k(float *out) {
    int t = (int)threadIdx.x;
    float acc = 0.0f;
    for (int m = 1; m < 32; m <<= 1) acc += (float)m * wf_shfl_xor((float)t, m);
    out[t] = acc;
}

static __global__ void ballot_k(unsigned *out) {
    int t = (int)threadIdx.x;
    out[t] = wf_ballot(t % 3 == 0);
}

/* Warp 0 writes sh[0], warp 1 writes sh[1], each reads the other's without
 * a barrier. */
static __global__ void race_k(float *out) {
    WF_DYN_SHARED(float, sh);
    int w = (int)threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) sh[w] = (float)(w + 1);
    __syncthreads();
    float mine = sh[1 - w];
    if (threadIdx.x % 32 == 0) sh[w] = 10.0f * (float)(w + 1); /* a second round */
    /* planted: no barrier here */
    out[threadIdx.x] = mine + sh[1 - w];
}

static __global__ void deadlock_k(float *out) {
    if (threadIdx.x == 0) __syncthreads();
    else out[threadIdx.x] = wf_shfl_xor(1.0f, 1);
}

static __global__ void poke_k(float *p, long off) { p[off] = 1.0f; }

static __global__ void shared_overflow_k(void) {
    WF_DYN_SHARED(float, sh);
    sh[threadIdx.x + 1] = 1.0f; /* 32 floats of room, thread 31 writes the 33rd */
}

static int err_has_(const char *words) {
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess && strstr(wf_emu_last_message(), words) != NULL;
}

static __global__ void to_bf16_k(unsigned short *out, const float *in, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = wf_f32_to_bf16(in[i]).bits;
}

/* `cuda_emu bf16`: reads float bit patterns (hex, one a line) and prints
 * the bf16 bits the kernels' rounding gives each (hex), for the test to
 * hold against PyTorch's. */
static int bf16_mode(void) {
    float *in = NULL;
    unsigned short *out = NULL;
    int n = 0;
    cudaMalloc((void **)&in, 4096 * sizeof(float));
    cudaMalloc((void **)&out, 4096 * sizeof(unsigned short));
    unsigned u;
    while (n < 4096 && scanf("%x", &u) == 1) in[n++] = wf_u2f(u);
    WF_LAUNCH(to_bf16_k, (n + 127) / 128 > 0 ? (n + 127) / 128 : 1, 128, 0, (cudaStream_t)0, out, (const float *)in, n);
    if (cudaGetLastError() != cudaSuccess) return 1;
    for (int i = 0; i < n; i++) printf("%04x\n", out[i]);
    return 0;
}

/* `cuda_emu fence`: with WF_CUDAEMU_FENCE=1 a kernel and a copy reach a
 * block, and the host's own read of it then faults (SIGSEGV): the line
 * "read ..." never prints. Without the fence it prints and exits 1. */
static int fence_mode(void) {
    float *p = NULL, h = 0.0f;
    cudaMalloc((void **)&p, 64 * sizeof(float));
    WF_LAUNCH(poke_k, 1, 32, 0, (cudaStream_t)0, p, 3L);
    int ok = cudaGetLastError() == cudaSuccess &&
             cudaMemcpyAsync(&h, p + 3, sizeof h, cudaMemcpyDeviceToHost, (cudaStream_t)0) == cudaSuccess && h == 1.0f;
    printf("%s kernels and copies reach the block\n", ok ? "ok" : "FAIL");
    fflush(stdout);
    volatile float *q = p;
    printf("read %g\n", (double)q[3]);
    return 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bf16") == 0) return bf16_mode();
    if (argc > 1 && strcmp(argv[1], "fence") == 0) return fence_mode();
    static const char *const schedules[] = {"rr", "fwd", "rev", "shuffle:9"};
    float *f = NULL;
    unsigned *u = NULL;
    cudaMalloc((void **)&f, 64 * sizeof(float));
    cudaMalloc((void **)&u, 64 * sizeof(unsigned));
    char name[96];
    for (const char *s : schedules) {
        wf_emu_set_schedule(s);
        WF_LAUNCH(shfl_k, 1, 64, 0, (cudaStream_t)0, f);
        int ok = cudaGetLastError() == cudaSuccess;
        for (int t = 0; t < 64 && ok; t++) {
            float want = 0.0f;
            for (int m = 1; m < 32; m <<= 1) want += (float)m * (float)(t ^ m);
            ok = f[t] == want;
        }
        snprintf(name, sizeof name, "shfl_xor under %s", s);
        check_(ok, name, "a lane got another partner's value");
        WF_LAUNCH(ballot_k, 1, 64, 0, (cudaStream_t)0, u);
        ok = cudaGetLastError() == cudaSuccess;
        for (int t = 0; t < 64 && ok; t++) {
            unsigned want = 0;
            for (int l = 0; l < 32; l++)
                if ((t / 32 * 32 + l) % 3 == 0) want |= 1u << l;
            ok = u[t] == want;
        }
        snprintf(name, sizeof name, "ballot under %s", s);
        check_(ok, name, "wrong bits");
    }

    /* The missing barrier: under warp-serial schedules the result shows
     * which warp ran first. */
    float seen[2][64];
    const char *ws[2] = {"fwd", "rev"};
    for (int k = 0; k < 2; k++) {
        wf_emu_set_schedule(ws[k]);
        WF_LAUNCH(race_k, 1, 64, 2 * sizeof(float), (cudaStream_t)0, f);
        check_(cudaGetLastError() == cudaSuccess, "race_k runs", wf_emu_last_message());
        memcpy(seen[k], f, sizeof seen[k]);
    }
    /* fwd: warp 0 runs to its end first: it reads warp 1's first-round 2
     * twice (4); then warp 1 reads warp 0's second-round 10 twice (20).
     * rev: warp 1 first reads 1 twice (2), then warp 0 reads 20 twice (40). */
    check_(seen[0][0] == 4.0f && seen[0][32] == 20.0f && seen[1][0] == 40.0f && seen[1][32] == 2.0f,
           "warp-serial schedules run warp by warp", "the race's results do not show warp order");

    wf_emu_set_schedule("fwd");
    WF_LAUNCH(deadlock_k, 1, 32, 0, (cudaStream_t)0, f);
    check_(err_has_("kernel deadlock_k, block (0,0,0): deadlock: thread 0 waits at __syncthreads while thread 1 "
                    "waits at a warp shuffle"),
           "a deadlock is reported", wf_emu_last_message());

    WF_LAUNCH(poke_k, 1, 32, 0, (cudaStream_t)0, f, -1L);
    check_(err_has_("kernel poke_k wrote outside device allocation #1 (256 bytes): at byte offset -4"),
           "a write before an allocation is reported", wf_emu_last_message());
    WF_LAUNCH(poke_k, 1, 32, 0, (cudaStream_t)0, f, 64L);
    check_(err_has_("kernel poke_k wrote outside device allocation #1 (256 bytes): at byte offset 256"),
           "a write past an allocation is reported", wf_emu_last_message());

    WF_LAUNCH(shared_overflow_k, 1, 32, 32 * sizeof(float), (cudaStream_t)0);
    check_(err_has_("wrote past its 128 bytes of shared memory"), "a write past shared memory is reported",
           wf_emu_last_message());

    WF_LAUNCH(poke_k, 1, 2048, 0, (cudaStream_t)0, f, 0L);
    check_(err_has_("invalid launch"), "a block of 2048 threads is refused", wf_emu_last_message());

    float *g = NULL;
    cudaMalloc((void **)&g, 16);
    check_(cudaMemsetAsync(g, 0, 17, (cudaStream_t)0) != cudaSuccess && err_has_("not inside one device allocation"),
           "a fill past an allocation is refused", wf_emu_last_message());
    check_(((uintptr_t)g % 4096) == 0 && ((const unsigned char *)g)[0] == 0xff && cudaFree(g) == cudaSuccess,
           "blocks are 4096-aligned and poisoned", "");
    return failed_;
}
