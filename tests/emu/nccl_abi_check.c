/* Compiled by tests/py/test_dist_nccl.py where the CUDA toolkit is installed:
 * the values src/comm/nccl/nccl_abi.h declares, against the real nccl.h and
 * cuda_runtime_api.h. A wrong one fails the compile. */
#include <nccl.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include "comm/nccl/nccl_abi.h"
_Static_assert(WF_NCCL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES && sizeof(wf_nccl_id) == sizeof(ncclUniqueId), "id");
_Static_assert(WF_NCCL_SUCCESS == ncclSuccess && WF_NCCL_INVALID_ARGUMENT == ncclInvalidArgument && WF_NCCL_INVALID_USAGE == ncclInvalidUsage && WF_NCCL_IN_PROGRESS == ncclInProgress, "results");
_Static_assert(WF_NCCL_UINT8 == ncclUint8 && WF_NCCL_INT32 == ncclInt32 && WF_NCCL_FLOAT32 == ncclFloat32 && WF_NCCL_FLOAT64 == ncclFloat64, "types");
_Static_assert(WF_NCCL_SUM == ncclSum && WF_NCCL_MAX == ncclMax && WF_NCCL_MIN == ncclMin, "ops");
_Static_assert(WF_CUDA_SUCCESS == cudaSuccess && WF_CUDA_ERROR_NOT_READY == cudaErrorNotReady, "errors");
_Static_assert(WF_CUDA_STREAM_NON_BLOCKING == cudaStreamNonBlocking && WF_CUDA_EVENT_DISABLE_TIMING == cudaEventDisableTiming, "flags");
_Static_assert(WF_CUDA_MEMCPY_H2D == cudaMemcpyHostToDevice && WF_CUDA_MEMCPY_D2H == cudaMemcpyDeviceToHost, "kinds");
_Static_assert(WF_CUDA_MEM_UNREGISTERED == cudaMemoryTypeUnregistered && WF_CUDA_MEM_HOST == cudaMemoryTypeHost && WF_CUDA_MEM_DEVICE == cudaMemoryTypeDevice && WF_CUDA_MEM_MANAGED == cudaMemoryTypeManaged, "memory types");
_Static_assert(sizeof(wf_cuda_ptr_attr) >= sizeof(struct cudaPointerAttributes), "attributes size");
_Static_assert(offsetof(wf_cuda_ptr_attr, type) == offsetof(struct cudaPointerAttributes, type) && offsetof(wf_cuda_ptr_attr, device_pointer) == offsetof(struct cudaPointerAttributes, devicePointer) && offsetof(wf_cuda_ptr_attr, host_pointer) == offsetof(struct cudaPointerAttributes, hostPointer), "attributes layout");
