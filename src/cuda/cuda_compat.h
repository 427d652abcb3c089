/* What the CUDA sources of src/cuda/ include instead of cuda_runtime.h:
 * under nvcc the real runtime and the warp wrappers on the _sync
 * intrinsics; under the host C++ compiler the emulator (emu/cuda_emu.h).
 * The kernel rules (docs/gpu.md) that keep the emulation honest live here:
 *   - every launch goes through WF_LAUNCH (<<<>>> under nvcc, the
 *     emulator's scheduler otherwise);
 *   - shared memory is dynamic only (WF_DYN_SHARED);
 *   - warp primitives only through wf_shfl_xor, wf_shfl_xor_int and
 *     wf_ballot, over the full warp. */
#ifndef WEFT_CUDA_COMPAT_H
#define WEFT_CUDA_COMPAT_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_runtime.h>

#define WF_CUDA_EMU 0
#define WF_DYN_SHARED(type, name) extern __shared__ __align__(16) unsigned char wf_dyn_shared_[]; \
    type *name = reinterpret_cast<type *>(wf_dyn_shared_)
#define WF_LAUNCH(kernel, grid, block, shared, stream, ...) \
    kernel<<<(grid), (block), (shared), (stream)>>>(__VA_ARGS__)
static __device__ __forceinline__ float wf_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
static __device__ __forceinline__ int wf_shfl_xor_int(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
static __device__ __forceinline__ unsigned wf_ballot(int p) { return __ballot_sync(0xffffffffu, p); }
static __device__ __forceinline__ unsigned wf_f2u(float f) { return __float_as_uint(f); }
static __device__ __forceinline__ float wf_u2f(unsigned u) { return __uint_as_float(u); }

#else
#include "cuda/emu/cuda_emu.h"
#include <string.h>

#define WF_CUDA_EMU 1
#define WF_LAUNCH(kernel, grid, block, shared, stream, ...) \
    ((void)(stream), wf_emu_launch(#kernel, (grid), (block), (shared), [=]() { kernel(__VA_ARGS__); }))
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline unsigned wf_f2u(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float wf_u2f(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
#endif

/* bf16 as its bits: the same type under nvcc and the emulator (no
 * cuda_bf16.h), converted by the two functions below. */
struct wf_bf16 {
    unsigned short bits;
};
/* Exact: bf16 is the upper half of a float. */
static __device__ __forceinline__ float wf_bf16_to_f32(wf_bf16 b) { return wf_u2f((unsigned)b.bits << 16); }
/* Round to nearest, ties to even; NaN stays NaN (quiet). */
static __device__ __forceinline__ wf_bf16 wf_f32_to_bf16(float f) {
    unsigned u = wf_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return wf_bf16{(unsigned short)((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return wf_bf16{(unsigned short)(u >> 16)};
}
/* Loads and stores of either element type, in fp32. */
static __device__ __forceinline__ float wf_ld(const float *p, int64_t i) { return p[i]; }
static __device__ __forceinline__ float wf_ld(const wf_bf16 *p, int64_t i) { return wf_bf16_to_f32(p[i]); }
static __device__ __forceinline__ void wf_st(float *p, int64_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void wf_st(wf_bf16 *p, int64_t i, float v) { p[i] = wf_f32_to_bf16(v); }

#endif
