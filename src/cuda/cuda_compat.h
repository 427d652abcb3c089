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

#else
#include "cuda/emu/cuda_emu.h"

#define WF_CUDA_EMU 1
#define WF_LAUNCH(kernel, grid, block, shared, stream, ...) \
    ((void)(stream), wf_emu_launch(#kernel, (grid), (block), (shared), [=]() { kernel(__VA_ARGS__); }))
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#endif

#endif
