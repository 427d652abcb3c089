/* The part of NCCL's and the CUDA runtime's C ABI that weft's NCCL
 * communicator backend (comm_nccl.c) calls, and the emulation library
 * (tests/emu/nccl_emu.c) exports, declared here so that both build without
 * the CUDA toolkit: weft never includes nccl.h or cuda_runtime_api.h and
 * never links libnccl or libcudart; it opens them with dlopen.
 *
 * The values are those of NCCL 2.x's nccl.h and CUDA 12/13's
 * driver_types.h, stable ABI of both; tests/emu/nccl_abi_check.c (compiled by
 * tests/py/test_dist_nccl.py) compares
 * them with the real headers where the toolkit is installed.
 */
#ifndef WEFT_NCCL_ABI_H
#define WEFT_NCCL_ABI_H

#include <stddef.h>

/* ------------------------------------------------------------------ NCCL */
#define WF_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[WF_NCCL_UNIQUE_ID_BYTES];
} wf_nccl_id;
typedef struct wf_nccl_comm_s *wf_nccl_comm; /* ncclComm_t */
typedef int wf_nccl_result;                  /* ncclResult_t */
typedef int wf_nccl_dtype;                   /* ncclDataType_t */
typedef int wf_nccl_op;                      /* ncclRedOp_t */

enum { WF_NCCL_SUCCESS = 0, WF_NCCL_INVALID_ARGUMENT = 4, WF_NCCL_INVALID_USAGE = 5, WF_NCCL_IN_PROGRESS = 7 };
enum { WF_NCCL_UINT8 = 1, WF_NCCL_INT32 = 2, WF_NCCL_FLOAT32 = 7, WF_NCCL_FLOAT64 = 8 };
enum { WF_NCCL_SUM = 0, WF_NCCL_MAX = 2, WF_NCCL_MIN = 3 };

/* The NCCL functions the backend calls, by their exported names. */
#define WF_NCCL_FUNCS(X)                                                                                    \
    X(ncclGetVersion, wf_nccl_result, (int *version))                                                       \
    X(ncclGetUniqueId, wf_nccl_result, (wf_nccl_id * id))                                                   \
    X(ncclCommInitRank, wf_nccl_result, (wf_nccl_comm * comm, int nranks, wf_nccl_id id, int rank))         \
    X(ncclCommDestroy, wf_nccl_result, (wf_nccl_comm comm))                                                 \
    X(ncclCommAbort, wf_nccl_result, (wf_nccl_comm comm))                                                   \
    X(ncclCommGetAsyncError, wf_nccl_result, (wf_nccl_comm comm, wf_nccl_result * err))                     \
    X(ncclGetErrorString, const char *, (wf_nccl_result r))                                                 \
    X(ncclGetLastError, const char *, (wf_nccl_comm comm))                                                  \
    X(ncclAllReduce, wf_nccl_result,                                                                        \
      (const void *send, void *recv, size_t count, wf_nccl_dtype dt, wf_nccl_op op, wf_nccl_comm comm,     \
       void *stream))                                                                                       \
    X(ncclReduce, wf_nccl_result,                                                                           \
      (const void *send, void *recv, size_t count, wf_nccl_dtype dt, wf_nccl_op op, int root,              \
       wf_nccl_comm comm, void *stream))                                                                    \
    X(ncclReduceScatter, wf_nccl_result,                                                                    \
      (const void *send, void *recv, size_t recvcount, wf_nccl_dtype dt, wf_nccl_op op, wf_nccl_comm comm, \
       void *stream))                                                                                       \
    X(ncclBroadcast, wf_nccl_result,                                                                        \
      (const void *send, void *recv, size_t count, wf_nccl_dtype dt, int root, wf_nccl_comm comm,          \
       void *stream))                                                                                       \
    X(ncclAllGather, wf_nccl_result,                                                                        \
      (const void *send, void *recv, size_t sendcount, wf_nccl_dtype dt, wf_nccl_comm comm, void *stream)) \
    X(ncclGroupStart, wf_nccl_result, (void))                                                               \
    X(ncclGroupEnd, wf_nccl_result, (void))

/* ---------------------------------------------------------- CUDA runtime */
typedef int wf_cuda_error; /* cudaError_t */
enum { WF_CUDA_SUCCESS = 0, WF_CUDA_ERROR_NOT_READY = 600 };
enum { WF_CUDA_STREAM_NON_BLOCKING = 0x01, WF_CUDA_EVENT_DISABLE_TIMING = 0x02 };
enum { WF_CUDA_MEMCPY_H2D = 1, WF_CUDA_MEMCPY_D2H = 2 };
enum { WF_CUDA_MEM_UNREGISTERED = 0, WF_CUDA_MEM_HOST = 1, WF_CUDA_MEM_DEVICE = 2, WF_CUDA_MEM_MANAGED = 3 };
/* struct cudaPointerAttributes (CUDA 11 and later; 13 added reserved[8]). */
typedef struct {
    int type; /* enum cudaMemoryType */
    int device;
    void *device_pointer;
    void *host_pointer;
    long reserved[8];
} wf_cuda_ptr_attr;

#define WF_CUDART_FUNCS(X)                                                                         \
    X(cudaGetDeviceCount, wf_cuda_error, (int *count))                                             \
    X(cudaSetDevice, wf_cuda_error, (int device))                                                  \
    X(cudaGetErrorString, const char *, (wf_cuda_error e))                                         \
    X(cudaStreamCreateWithFlags, wf_cuda_error, (void **stream, unsigned flags))                   \
    X(cudaStreamDestroy, wf_cuda_error, (void *stream))                                            \
    X(cudaStreamQuery, wf_cuda_error, (void *stream))                                              \
    X(cudaEventCreateWithFlags, wf_cuda_error, (void **event, unsigned flags))                     \
    X(cudaEventDestroy, wf_cuda_error, (void *event))                                              \
    X(cudaEventRecord, wf_cuda_error, (void *event, void *stream))                                 \
    X(cudaEventQuery, wf_cuda_error, (void *event))                                                \
    X(cudaMalloc, wf_cuda_error, (void **p, size_t bytes))                                         \
    X(cudaFree, wf_cuda_error, (void *p))                                                          \
    X(cudaMemcpy, wf_cuda_error, (void *dst, const void *src, size_t bytes, int kind))             \
    X(cudaPointerGetAttributes, wf_cuda_error, (wf_cuda_ptr_attr * attr, const void *p))

#endif
