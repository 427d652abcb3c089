/* The CUDA kernels of the `cuda` and `cudaemu` backends (backend_cuda.cu
 * launches them), fp32, with the layouts and meanings of
 * include/weft/kernels.h. Written once for nvcc and for the emulator
 * (cuda_compat.h has the rules: WF_LAUNCH, WF_DYN_SHARED, the warp
 * wrappers).
 *
 * Determinism: no atomics. Every output element is written by one thread,
 * and every reduction has a fixed shape (a thread's strided sum, then a
 * warp butterfly, then the warps' sums in warp order), so a run repeats
 * bit for bit. Index arithmetic is 64-bit (int64_t) wherever a product of
 * sizes can pass 2^31 (B*T*V is 3.3e9 for GPT-2's vocabulary at B=64).
 * No double precision on the device: sums that must match a double sum
 * (sumsq, loss_sum) use float-float pairs (Dekker's two-sum and an FMA
 * product), about 48 bits, finished in double on the host.
 *
 * Test-only defines (never in a real build), for tests/py/test_cudaemu.py:
 * WF_CUDA_PLANT_NO_SYNC removes the barrier between the warps' partial
 * sums and their reading in block_sum; WF_CUDA_PLANT_OFF_BY_ONE makes
 * swiglu_fwd write one element past its output. */
#ifndef WEFT_CUDA_KERNELS_CUH
#define WEFT_CUDA_KERNELS_CUH

#include <stdint.h>

#include "cuda/cuda_compat.h"

/* Threads of the row-wise kernels (a multiple of 32: every warp is full). */
#define WF_ROW_THREADS 128
/* Threads of the elementwise kernels. */
#define WF_EW_THREADS 256
/* Blocks of sumsq and first_nonfinite: fixed, so the sum's order is. */
#define WF_REDUCE_BLOCKS 256
/* Threads of the reductions (sumsq, first_nonfinite, loss_sum) and of the
 * cross-entropy's rows. The emulator runs them with 64: the same code on a
 * quarter of the fibers (sumsq alone took 10 s of a 13 s ops-check). */
#if WF_CUDA_EMU
#define WF_REDUCE_THREADS 64
#else
#define WF_REDUCE_THREADS 256
#endif
/* Attention tiles: query rows per block (= threads) and keys per tile. */
#define WF_ATT_ROWS 64
#define WF_ATT_KEYS 32

/* ------------------------------------------------------------ helpers */

static __device__ __forceinline__ int64_t global_index(void) {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ int64_t global_stride(void) { return (int64_t)gridDim.x * blockDim.x; }

/* Sum over the warp, the same bits in every lane (a butterfly of
 * commutative additions). */
static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += wf_shfl_xor(v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, wf_shfl_xor(v, o));
    return v;
}
static __device__ __forceinline__ int warp_min_int(int v) {
    for (int o = 16; o > 0; o >>= 1) {
        int u = wf_shfl_xor_int(v, o);
        v = u < v ? u : v;
    }
    return v;
}
static __device__ __forceinline__ int warp_sum_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v += wf_shfl_xor_int(v, o);
    return v;
}

/* The block's sum of v, in every thread; sh: 32 floats of shared memory,
 * free again on return. */
static __device__ float block_sum(float v, float *sh) {
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, nw = (int)(blockDim.x + 31) / 32;
    v = warp_sum(v);
    if (lane == 0) sh[w] = v;
#ifndef WF_CUDA_PLANT_NO_SYNC
    __syncthreads();
#endif
    v = warp_sum(lane < nw ? sh[lane] : 0.0f);
    __syncthreads();
    return v;
}
static __device__ float block_max(float v, float *sh) {
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, nw = (int)(blockDim.x + 31) / 32;
    v = warp_max(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = warp_max(lane < nw ? sh[lane] : -INFINITY);
    __syncthreads();
    return v;
}

/* float-float: hi + lo with |lo| <= ulp(hi)/2. */
struct wf_ff {
    float hi, lo;
};
static __device__ __forceinline__ wf_ff ff_add(wf_ff a, wf_ff b) {
    float s = a.hi + b.hi, bb = s - a.hi;
    float e = (a.hi - (s - bb)) + (b.hi - bb) + (a.lo + b.lo);
    float h = s + e;
    return wf_ff{h, e - (h - s)};
}
static __device__ __forceinline__ wf_ff ff_square(float x) {
    float p = x * x;
    return wf_ff{p, fmaf(x, x, -p)};
}
static __device__ __forceinline__ wf_ff warp_sum_ff(wf_ff v) {
    for (int o = 16; o > 0; o >>= 1) v = ff_add(v, wf_ff{wf_shfl_xor(v.hi, o), wf_shfl_xor(v.lo, o)});
    return v;
}
/* sh: 64 floats. */
static __device__ wf_ff block_sum_ff(wf_ff v, float *sh) {
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, nw = (int)(blockDim.x + 31) / 32;
    v = warp_sum_ff(v);
    if (lane == 0) sh[2 * w] = v.hi, sh[2 * w + 1] = v.lo;
    __syncthreads();
    v = warp_sum_ff(lane < nw ? wf_ff{sh[2 * lane], sh[2 * lane + 1]} : wf_ff{0.0f, 0.0f});
    __syncthreads();
    return v;
}

/* ------------------------------------------------------------ RMSNorm */

/* One block per row: out (N, C), rstd (N), inp (N, C), weight (C).
 * Shared: 32 floats. */
static __global__ void rmsnorm_fwd_k(float *out, float *rstd, const float *inp, const float *weight, int C,
                                     float eps) {
    WF_DYN_SHARED(float, sh);
    const int64_t n = blockIdx.x;
    const float *x = inp + n * C;
    float *y = out + n * C;
    float ss = 0.0f;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss, sh);
    float r = rsqrtf(ss / (float)C + eps);
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) y[c] = x[c] * r * weight[c];
    if (threadIdx.x == 0) rstd[n] = r;
}

/* One block per row: dinp (N, C) +=, from dout, inp (N, C), weight (C),
 * rstd (N). Shared: 32 floats. */
static __global__ void rmsnorm_bwd_dx_k(float *dinp, const float *dout, const float *inp, const float *weight,
                                        const float *rstd, int C) {
    WF_DYN_SHARED(float, sh);
    const int64_t n = blockIdx.x;
    const float *x = inp + n * C, *dy = dout + n * C;
    float *dx = dinp + n * C;
    float dot = 0.0f;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) dot += weight[c] * dy[c] * x[c];
    dot = block_sum(dot, sh);
    float r = rstd[n], k = r * r * r * dot / (float)C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) dx[c] += r * weight[c] * dy[c] - k * x[c];
}

/* The weight gradient in two fixed stages, so that it is deterministic and
 * still spread over the GPU: grid (column blocks, chunks), each thread one
 * column of one chunk of rows [chunk * per, (chunk + 1) * per), in order,
 * into part (chunks, C)... */
static __global__ void rmsnorm_bwd_dw_part_k(float *part, const float *dout, const float *inp, const float *rstd,
                                             int64_t N, int C, int64_t per) {
    int64_t c = global_index(), n0 = (int64_t)blockIdx.y * per, n1 = n0 + per < N ? n0 + per : N;
    if (c >= C) return;
    float acc = 0.0f;
    for (int64_t n = n0; n < n1; n++) acc += dout[n * C + c] * inp[n * C + c] * rstd[n];
    part[(int64_t)blockIdx.y * C + c] = acc;
}

/* ...then one thread per column adds the chunks in order: dweight (C) +=. */
static __global__ void rmsnorm_bwd_dw_sum_k(float *dweight, const float *part, int chunks, int C) {
    int64_t c = global_index();
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < chunks; k++) acc += part[(int64_t)k * C + c];
    dweight[c] += acc;
}

/* --------------------------------------------------------------- RoPE */

/* x (B*T rows of `stride`): the first n_heads heads of each row rotated by
 * dir * angle (half-split pairs); one thread per pair. */
static __global__ void rope_k(float *x, const float *cos_tab, const float *sin_tab, int64_t rows, int T,
                              int n_heads, int HD, int stride, float dir) {
    const int half = HD / 2;
    const int64_t pairs = rows * n_heads * half;
    for (int64_t i = global_index(); i < pairs; i += global_stride()) {
        int64_t n = i / ((int64_t)n_heads * half);
        int rem = (int)(i % ((int64_t)n_heads * half)), h = rem / half, k = rem % half;
        int64_t t = n % T;
        float c = cos_tab[t * half + k], s = dir * sin_tab[t * half + k];
        float *lo = x + n * stride + (int64_t)h * HD + k, *hi = lo + half;
        float a = *lo, b = *hi;
        *lo = a * c - b * s;
        *hi = b * c + a * s;
    }
}

/* ------------------------------------------------------------- SwiGLU */

/* out (N, H) = silu(a) * b over h13 rows [a | b]. */
static __global__ void swiglu_fwd_k(float *out, const float *h13, int64_t N, int H) {
    const int64_t n_all = N * H;
#ifdef WF_CUDA_PLANT_OFF_BY_ONE
    for (int64_t i = global_index(); i <= n_all; i += global_stride()) {
#else
    for (int64_t i = global_index(); i < n_all; i += global_stride()) {
#endif
        int64_t n = i / H, k = i % H;
        float a = h13[n * 2 * H + k], b = h13[n * 2 * H + H + k];
        out[i] = a / (1.0f + expf(-a)) * b;
    }
}

/* dh13 (N, 2H) from dout (N, H) and h13. */
static __global__ void swiglu_bwd_k(float *dh13, const float *dout, const float *h13, int64_t N, int H) {
    const int64_t n_all = N * H;
    for (int64_t i = global_index(); i < n_all; i += global_stride()) {
        int64_t n = i / H, k = i % H;
        float a = h13[n * 2 * H + k], b = h13[n * 2 * H + H + k], dy = dout[i];
        float sig = 1.0f / (1.0f + expf(-a));
        dh13[n * 2 * H + k] = dy * b * sig * (1.0f + a * (1.0f - sig));
        dh13[n * 2 * H + H + k] = dy * a * sig;
    }
}

/* ---------------------------------------------------------- embedding */

/* out (N, C) = wte[tokens[n]]. */
static __global__ void embedding_fwd_k(float *out, const int32_t *tokens, const float *wte, int64_t N, int C) {
    const int64_t n_all = N * C;
    for (int64_t i = global_index(); i < n_all; i += global_stride()) {
        int64_t n = i / C, c = i % C;
        out[i] = wte[(int64_t)tokens[n] * C + c];
    }
}

/* dwte (V, C) += scatter of dout (N, C): one thread per column walks the
 * rows in order, so repeated tokens add in row order without atomics. */
static __global__ void embedding_bwd_k(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int C) {
    int64_t c = global_index();
    if (c >= C) return;
    for (int64_t n = 0; n < N; n++) dwte[(int64_t)tokens[n] * C + c] += dout[n * C + c];
}

/* ------------------------------------------------------ cross-entropy */

/* One block per row: losses, lse (N) from logits (N, V), targets (N).
 * Shared: 32 floats. */
static __global__ void crossentropy_fwd_k(float *losses, float *lse, const float *logits, const int32_t *targets,
                                          int V) {
    WF_DYN_SHARED(float, sh);
    const int64_t n = blockIdx.x;
    const float *z = logits + n * V;
    float mx = -INFINITY;
    for (int v = (int)threadIdx.x; v < V; v += (int)blockDim.x) mx = fmaxf(mx, z[v]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int v = (int)threadIdx.x; v < V; v += (int)blockDim.x) s += expf(z[v] - mx);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        lse[n] = l;
        losses[n] = targets[n] < 0 ? 0.0f : l - z[targets[n]];
    }
}

/* logits (N, V) := dloss * (softmax - onehot), 0 on ignored rows. */
static __global__ void crossentropy_bwd_k(float *logits, const float *lse, const int32_t *targets, int64_t N, int V,
                                          float dloss) {
    const int64_t n_all = N * V;
    for (int64_t i = global_index(); i < n_all; i += global_stride()) {
        int64_t n = i / V;
        int v = (int)(i % V), tgt = targets[n];
        logits[i] = tgt < 0 ? 0.0f : dloss * (expf(logits[i] - lse[n]) - (v == tgt ? 1.0f : 0.0f));
    }
}

/* -------------------------------------------------------- reductions */

/* Block b sums the squares of x[b*per, (b+1)*per) (clipped to n) into
 * part[2b], part[2b+1] (hi, lo). Shared: 64 floats. */
static __global__ void sumsq_k(float *part, const float *x, int64_t n, int64_t per) {
    WF_DYN_SHARED(float, sh);
    int64_t lo = (int64_t)blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    wf_ff s = {0.0f, 0.0f};
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) s = ff_add(s, ff_square(x[i]));
    s = block_sum_ff(s, sh);
    if (threadIdx.x == 0) part[2 * blockIdx.x] = s.hi, part[2 * blockIdx.x + 1] = s.lo;
}

/* One block: the sum (hi, lo into part[0], part[1]) of the losses whose
 * target is >= 0, and their count (count[0]). Shared: 64 floats. */
static __global__ void loss_sum_k(float *part, int *count, const float *losses, const int32_t *targets, int64_t n) {
    WF_DYN_SHARED(float, sh);
    wf_ff s = {0.0f, 0.0f};
    int k = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (targets[i] >= 0) s = ff_add(s, wf_ff{losses[i], 0.0f}), k++;
    s = block_sum_ff(s, sh);
    int *shi = (int *)(sh + 64);
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, nw = (int)(blockDim.x + 31) / 32;
    k = warp_sum_int(k);
    if (lane == 0) shi[w] = k;
    __syncthreads();
    k = warp_sum_int(lane < nw ? shi[lane] : 0);
    if (threadIdx.x == 0) part[0] = s.hi, part[1] = s.lo, count[0] = k;
}

/* Block b: the offset in its chunk [b*per, (b+1)*per) of the first element
 * that is not finite, or INT32_MAX, into first[b]. Shared: 32 ints. */
static __global__ void first_nonfinite_k(int *first, const float *x, int64_t n, int64_t per) {
    WF_DYN_SHARED(int, sh);
    int64_t lo = (int64_t)blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    int best = INT32_MAX;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        if (!isfinite(x[i])) {
            best = (int)(i - lo);
            break; /* later elements of this thread are further on */
        }
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, nw = (int)(blockDim.x + 31) / 32;
    best = warp_min_int(best);
    if (lane == 0) sh[w] = best;
    __syncthreads();
    best = warp_min_int(lane < nw ? sh[lane] : INT32_MAX);
    if (threadIdx.x == 0) first[blockIdx.x] = best;
}

/* ------------------------------------------------------- elementwise */

static __global__ void add_k(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = a[i] + b[i];
}

/* y = a x + b y (Muon's momentum, Newton-Schulz combinations and update);
 * with b == 0, y is only written (it may hold NaN before), as the cpu's. */
static __global__ void axpby_k(float *y, const float *x, float a, float b, int64_t n) {
    if (b == 0.0f) {
        for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = a * x[i];
    } else {
        for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = a * x[i] + b * y[i];
    }
}

/* dst = src converted (bf16 by rounding to nearest even). */
static __global__ void cast_f32_bf16_k(wf_bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = global_index(); i < n; i += global_stride()) dst[i] = wf_f32_to_bf16(src[i]);
}
static __global__ void cast_bf16_f32_k(float *dst, const wf_bf16 *src, int64_t n) {
    for (int64_t i = global_index(); i < n; i += global_stride()) dst[i] = wf_bf16_to_f32(src[i]);
}

/* C (rows, cols, row stride ldc) = 0: a matmul with k = 0. */
template <class E>
static __global__ void zero2d_k(E *c, int64_t rows, int cols, int64_t ldc) {
    for (int64_t i = global_index(); i < rows * cols; i += global_stride()) wf_st(c, (i / cols) * ldc + i % cols, 0.0f);
}

/* One span of AdamW (include/weft/backend.h has the update), in the float
 * expressions of src/kernels/kern_adamw.c. */
static __global__ void adamw_k(float *p, const float *g, float *m, float *v, int64_t n, float decay, float clip,
                               float b1, float a1, float b2, float a2, float bc2_sqrt, float eps, float step) {
    for (int64_t i = global_index(); i < n; i += global_stride()) {
        float gi = g[i] * clip;
        float mi = m[i] * b1 + a1 * gi;
        float vi = v[i] * b2 + a2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay + step * mi / denom;
    }
}

/* ---------------------------------------------------------- attention
 * Flash attention, SIMT, fp32 (docs/gpu.md): one thread per query row,
 * WF_ATT_ROWS rows per block; the keys and values stream through shared
 * memory WF_ATT_KEYS rows at a time; each thread keeps its row's running
 * maximum, sum and output (online softmax), so memory is O(T). qkv rows
 * hold NH query heads, NKV key heads, NKV value heads (QKV = (NH+2NKV)HD
 * elements); query head h reads kv head h / (NH/NKV). The element type E
 * of qkv, out, dout and dqkv is float or wf_bf16 (bf16 in and out); the
 * math, the shared tiles and lse are fp32. */

/* Loads rows [j0, j0 + WF_ATT_KEYS) of head column `col` (in floats) of
 * qkv for batch row base `b0` into dst (WF_ATT_KEYS, HD), zeros past T. */
template <class E>
static __device__ void att_load_tile(float *dst, const E *qkv, int64_t b0, int j0, int T, int64_t QKV,
                                     int64_t col, int HD) {
    for (int idx = (int)threadIdx.x; idx < WF_ATT_KEYS * HD; idx += (int)blockDim.x) {
        int r = idx / HD, d = idx % HD, j = j0 + r;
        dst[idx] = j < T ? wf_ld(qkv, (b0 + j) * QKV + col + d) : 0.0f;
    }
}

/* grid (tiles of T, NH, B). out (B, T, NH*HD), lse (B, NH, T).
 * Shared: (2 * WF_ATT_ROWS + 2 * WF_ATT_KEYS) * HD floats. */
template <class E>
static __global__ void attention_fwd_k(E *out, float *lse, const E *qkv, int T, int NH, int NKV, int HD,
                                       float scale) {
    WF_DYN_SHARED(float, sh);
    const int tid = (int)threadIdx.x, h = (int)blockIdx.y, g = h / (NH / NKV);
    const int t = (int)blockIdx.x * WF_ATT_ROWS + tid;
    const int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, OW = (int64_t)NH * HD, b0 = (int64_t)blockIdx.z * T;
    float *q = sh + (int64_t)tid * HD, *acc = sh + (int64_t)(WF_ATT_ROWS + tid) * HD;
    float *ks = sh + (int64_t)2 * WF_ATT_ROWS * HD, *vs = ks + (int64_t)WF_ATT_KEYS * HD;
    const int active = t < T;
    for (int d = 0; d < HD; d++) {
        q[d] = active ? wf_ld(qkv, (b0 + t) * QKV + (int64_t)h * HD + d) : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int last = (int)blockIdx.x * WF_ATT_ROWS + WF_ATT_ROWS;
    if (last > T) last = T;
    for (int j0 = 0; j0 < last; j0 += WF_ATT_KEYS) {
        att_load_tile(ks, qkv, b0, j0, T, QKV, (int64_t)(NH + g) * HD, HD);
        att_load_tile(vs, qkv, b0, j0, T, QKV, (int64_t)(NH + NKV + g) * HD, HD);
        __syncthreads();
        for (int r = 0; r < WF_ATT_KEYS && active && j0 + r <= t; r++) {
            const float *k = ks + (int64_t)r * HD, *v = vs + (int64_t)r * HD;
            float s = 0.0f;
            for (int d = 0; d < HD; d++) s += q[d] * k[d];
            s *= scale;
            if (s > m) {
                float corr = expf(m - s); /* 0 while m is -inf */
                l *= corr;
                for (int d = 0; d < HD; d++) acc[d] *= corr;
                m = s;
            }
            float p = expf(s - m);
            l += p;
            for (int d = 0; d < HD; d++) acc[d] += p * v[d];
        }
        __syncthreads(); /* before the next tile overwrites ks, vs */
    }
    if (!active) return;
    for (int d = 0; d < HD; d++) wf_st(out, (b0 + t) * OW + (int64_t)h * HD + d, acc[d] / l);
    lse[((int64_t)blockIdx.z * NH + h) * T + t] = m + logf(l);
}

/* The query gradient. grid (tiles of T, NH, B); one thread per query row:
 * dq_t = sum_{j<=t} p_j (dout_t.v_j - D_t) k_j * scale, with p_j = exp(s_j
 * - lse_t) and D_t = dout_t.out_t. Writes dqkv's query heads.
 * Shared: (3 * WF_ATT_ROWS + 2 * WF_ATT_KEYS) * HD floats. */
template <class E>
static __global__ void attention_bwd_dq_k(E *dqkv, const E *dout, const E *qkv, const E *out,
                                          const float *lse, int T, int NH, int NKV, int HD, float scale) {
    WF_DYN_SHARED(float, sh);
    const int tid = (int)threadIdx.x, h = (int)blockIdx.y, g = h / (NH / NKV);
    const int t = (int)blockIdx.x * WF_ATT_ROWS + tid;
    const int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, OW = (int64_t)NH * HD, b0 = (int64_t)blockIdx.z * T;
    float *q = sh + (int64_t)tid * HD, *dy = sh + (int64_t)(WF_ATT_ROWS + tid) * HD;
    float *dq = sh + (int64_t)(2 * WF_ATT_ROWS + tid) * HD;
    float *ks = sh + (int64_t)3 * WF_ATT_ROWS * HD, *vs = ks + (int64_t)WF_ATT_KEYS * HD;
    const int active = t < T;
    float D = 0.0f, L = 0.0f;
    for (int d = 0; d < HD; d++) {
        q[d] = active ? wf_ld(qkv, (b0 + t) * QKV + (int64_t)h * HD + d) : 0.0f;
        dy[d] = active ? wf_ld(dout, (b0 + t) * OW + (int64_t)h * HD + d) : 0.0f;
        D += active ? dy[d] * wf_ld(out, (b0 + t) * OW + (int64_t)h * HD + d) : 0.0f;
        dq[d] = 0.0f;
    }
    if (active) L = lse[((int64_t)blockIdx.z * NH + h) * T + t];
    int last = (int)blockIdx.x * WF_ATT_ROWS + WF_ATT_ROWS;
    if (last > T) last = T;
    for (int j0 = 0; j0 < last; j0 += WF_ATT_KEYS) {
        att_load_tile(ks, qkv, b0, j0, T, QKV, (int64_t)(NH + g) * HD, HD);
        att_load_tile(vs, qkv, b0, j0, T, QKV, (int64_t)(NH + NKV + g) * HD, HD);
        __syncthreads();
        for (int r = 0; r < WF_ATT_KEYS && active && j0 + r <= t; r++) {
            const float *k = ks + (int64_t)r * HD, *v = vs + (int64_t)r * HD;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HD; d++) s += q[d] * k[d], dp += dy[d] * v[d];
            float p = expf(s * scale - L), ds = p * (dp - D) * scale;
            for (int d = 0; d < HD; d++) dq[d] += ds * k[d];
        }
        __syncthreads();
    }
    if (!active) return;
    for (int d = 0; d < HD; d++) wf_st(dqkv, (b0 + t) * QKV + (int64_t)h * HD + d, dq[d]);
}

/* The key and value gradients. grid (tiles of T, NKV, B); one thread per
 * key row j of kv head g, over the group's query heads in order and the
 * query rows t >= j in order:
 *   dk_j = sum p (dout_t.v_j - D_t) q_t * scale,  dv_j = sum p dout_t.
 * Query rows, dout rows, lse and D stream through shared memory. Writes
 * dqkv's key and value heads.
 * Shared: (4 * WF_ATT_ROWS + 2 * WF_ATT_KEYS) * HD + 2 * WF_ATT_KEYS floats. */
template <class E>
static __global__ void attention_bwd_dkv_k(E *dqkv, const E *dout, const E *qkv, const E *out,
                                           const float *lse, int T, int NH, int NKV, int HD, float scale) {
    WF_DYN_SHARED(float, sh);
    const int tid = (int)threadIdx.x, g = (int)blockIdx.y, group = NH / NKV;
    const int j = (int)blockIdx.x * WF_ATT_ROWS + tid;
    const int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, OW = (int64_t)NH * HD, b0 = (int64_t)blockIdx.z * T;
    float *k = sh + (int64_t)tid * HD, *v = sh + (int64_t)(WF_ATT_ROWS + tid) * HD;
    float *dk = sh + (int64_t)(2 * WF_ATT_ROWS + tid) * HD, *dv = sh + (int64_t)(3 * WF_ATT_ROWS + tid) * HD;
    float *qs = sh + (int64_t)4 * WF_ATT_ROWS * HD, *dys = qs + (int64_t)WF_ATT_KEYS * HD;
    float *Ls = dys + (int64_t)WF_ATT_KEYS * HD, *Ds = Ls + WF_ATT_KEYS;
    const int active = j < T;
    for (int d = 0; d < HD; d++) {
        k[d] = active ? wf_ld(qkv, (b0 + j) * QKV + (int64_t)(NH + g) * HD + d) : 0.0f;
        v[d] = active ? wf_ld(qkv, (b0 + j) * QKV + (int64_t)(NH + NKV + g) * HD + d) : 0.0f;
        dk[d] = dv[d] = 0.0f;
    }
    const int first = (int)blockIdx.x * WF_ATT_ROWS; /* no query before it sees these keys */
    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        for (int t0 = first; t0 < T; t0 += WF_ATT_KEYS) {
            att_load_tile(qs, qkv, b0, t0, T, QKV, (int64_t)h * HD, HD);
            for (int idx = tid; idx < WF_ATT_KEYS * HD; idx += (int)blockDim.x) {
                int r = idx / HD, d = idx % HD, t = t0 + r;
                dys[idx] = t < T ? wf_ld(dout, (b0 + t) * OW + (int64_t)h * HD + d) : 0.0f;
            }
            if (tid < WF_ATT_KEYS) {
                int t = t0 + tid;
                float D = 0.0f;
                for (int d = 0; d < HD && t < T; d++)
                    D += wf_ld(dout, (b0 + t) * OW + (int64_t)h * HD + d) * wf_ld(out, (b0 + t) * OW + (int64_t)h * HD + d);
                Ds[tid] = D;
                Ls[tid] = t < T ? lse[((int64_t)blockIdx.z * NH + h) * T + t] : 0.0f;
            }
            __syncthreads();
            for (int r = 0; r < WF_ATT_KEYS && active && t0 + r < T; r++) {
                if (t0 + r < j) continue;
                const float *q = qs + (int64_t)r * HD, *dy = dys + (int64_t)r * HD;
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < HD; d++) s += q[d] * k[d], dp += dy[d] * v[d];
                float p = expf(s * scale - Ls[r]), ds = p * (dp - Ds[r]) * scale;
                for (int d = 0; d < HD; d++) dk[d] += ds * q[d], dv[d] += p * dy[d];
            }
            __syncthreads();
        }
    }
    if (!active) return;
    for (int d = 0; d < HD; d++) {
        wf_st(dqkv, (b0 + j) * QKV + (int64_t)(NH + g) * HD + d, dk[d]);
        wf_st(dqkv, (b0 + j) * QKV + (int64_t)(NH + NKV + g) * HD + d, dv[d]);
    }
}

#endif
