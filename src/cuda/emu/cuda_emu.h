/* A CUDA emulator for tests: the subset of the CUDA runtime and of the
 * device language that weft's kernels (src/cuda/) use, so that the same
 * kernel sources compile with the host C++ compiler and run on the CPU
 * (backend `cudaemu`, docs/gpu.md). Nothing a user runs depends on it.
 *
 * Execution. A launch runs its blocks one after another; inside a block
 * every CUDA thread is a fiber (ucontext) with its own stack, and the
 * threads switch only at synchronisation points: __syncthreads() (a block
 * barrier) and the warp wrappers wf_shfl_xor / wf_ballot (a warp barrier,
 * an exchange through one slot per lane, a second warp barrier). Which
 * runnable thread goes next is the schedule (wf_emu_set_schedule, or the
 * environment variable WF_CUDAEMU_SCHEDULE read at the first launch):
 *   rr       round robin over the threads in index order: each runs to
 *            its next synchronisation point (the run-to-barrier order);
 *   fwd      warp-serial: warp 0 runs until all its threads wait at the
 *            block barrier or have exited, then warp 1, ...;
 *   rev      warp-serial with the warps (and lanes) in reverse order;
 *   shuffle  warp-serial in a random order of warps and lanes, from a seed
 *            ("shuffle:SEED", default 1).
 * Warp-serial schedules expose a missing __syncthreads that lockstep
 * execution hides: a warp reads shared memory that another warp has not
 * written yet (it holds the poison: NaN for floats). A thread that waits at
 * a barrier no other thread will reach (a block barrier while its warp
 * waits at a shuffle, or the reverse) is a deadlock: the launch fails and
 * names the kernel and the block.
 *
 * Memory. cudaMalloc hands out host memory with red zones on both sides
 * (filled with a pattern, poisoned for AddressSanitizer when it runs); the
 * block itself is poisoned with 0xff bytes (NaN as float) until written.
 * After every launch and at cudaFree the red zones are checked: a write
 * past either end fails the launch (or the next call) naming the kernel,
 * the allocation and the offset. Dynamic shared memory is the only shared
 * memory (WF_DYN_SHARED), poisoned at each block's start and checked for
 * writes past its size at the block's end.
 *
 * The host fence (WF_CUDAEMU_FENCE=1 in the environment, read once; a test
 * mode): device blocks are PROT_NONE outside the emulator's own calls, so a
 * host access to device memory (which a GPU would not allow) faults at
 * once. Code of the emulated backend that touches device memory on the
 * host (the emulated gemm) opens it around that with wf_emu_fence_open /
 * wf_emu_fence_close (nested calls count).
 *
 * Errors. As in CUDA, a failed launch is reported by the next
 * cudaGetLastError (cudaErrorLaunchFailure); wf_emu_last_message() has the
 * emulator's explanation.
 *
 * Kernel rules (docs/gpu.md): launches only through WF_LAUNCH, dynamic
 * shared memory only, warp primitives only through the wf_ wrappers
 * (src/cuda/cuda_compat.h maps them to __shfl_xor_sync and __ballot_sync
 * under nvcc). Not thread-safe: one host thread launches.
 */
#ifndef WEFT_CUDA_EMU_H
#define WEFT_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* ------------------------------------------------ the device language */

/* What a running CUDA thread sees; the scheduler points wf_emu_cur at the
 * running thread's. */
struct wf_emu_thread_view {
    dim3 thread_idx, block_idx, block_dim, grid_dim;
};
extern wf_emu_thread_view *wf_emu_cur;

#define threadIdx (wf_emu_cur->thread_idx)
#define blockIdx (wf_emu_cur->block_idx)
#define blockDim (wf_emu_cur->block_dim)
#define gridDim (wf_emu_cur->grid_dim)
#define warpSize 32

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

void __syncthreads(void);
float wf_shfl_xor(float v, int lane_mask);
int wf_shfl_xor_int(int v, int lane_mask);
unsigned wf_ballot(int predicate);
/* The running block's dynamic shared memory. */
void *wf_emu_shared(void);
#define WF_DYN_SHARED(type, name) type *name = (type *)wf_emu_shared()

/* ---------------------------------------------------------- launching */

typedef void (*wf_emu_body)(void *closure);
/* Runs body(closure) as every thread of grid x block. */
void wf_emu_launch_raw(const char *kernel, dim3 grid, dim3 block, size_t shared_bytes, wf_emu_body body,
                       void *closure);

template <class F>
static void wf_emu_trampoline(void *closure) {
    (*static_cast<F *>(closure))();
}
template <class F>
static void wf_emu_launch(const char *kernel, dim3 grid, dim3 block, size_t shared_bytes, F f) {
    wf_emu_launch_raw(kernel, grid, block, shared_bytes, wf_emu_trampoline<F>, &f);
}

/* "rr", "fwd", "rev", "shuffle" or "shuffle:SEED"; 0, or -1 for another
 * name. Also read from WF_CUDAEMU_SCHEDULE at the first launch. */
int wf_emu_set_schedule(const char *name);
const char *wf_emu_schedule(void);
/* Why the last failed call failed, in the emulator's words. */
const char *wf_emu_last_message(void);
/* The host fence (above): open for host code that touches device memory. */
void wf_emu_fence_open(void);
void wf_emu_fence_close(void);

/* ------------------------------------------------- the runtime subset */

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorLaunchFailure = 719,
} cudaError_t;
typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
typedef struct wf_emu_stream *cudaStream_t;
typedef struct wf_emu_event *cudaEvent_t;

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
template <class K>
static cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute attr, int value) {
    (void)kernel, (void)attr, (void)value;
    return cudaSuccess;
}

#endif
