// The check macros for CUDA runtime results, below every layer that calls CUDA:
// the CUDA backend (backend/cuda/check.h adds cuBLAS's) and the NCCL communicator
// (comm/nccl_communicator.cpp adds NCCL's). A failure throws ulysses::Error naming
// the call, CUDA's error name and string, and file:line. Usable from .cu and .cpp
// files alike. CUDA builds only: core/cuda_check.cpp is compiled when nvcc is found.
#pragma once
#include <cuda_runtime_api.h>

namespace ulysses::cuda_check {

[[noreturn]] void fail_cuda(cudaError_t err, const char* call, const char* file, int line);

}  // namespace ulysses::cuda_check

#define CUDA_CHECK(call)                                                         \
  do {                                                                           \
    const cudaError_t uly_cuda_err_ = (call);                                    \
    if (uly_cuda_err_ != cudaSuccess)                                            \
      ::ulysses::cuda_check::fail_cuda(uly_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations (and earlier
// asynchronous faults) at the launch site rather than at the next sync.
// kernel_name: a string literal, e.g. CUDA_CHECK_LAUNCH("rmsnorm_forward").
#define CUDA_CHECK_LAUNCH(kernel_name)                                                      \
  do {                                                                                      \
    const cudaError_t uly_cuda_err_ = cudaGetLastError();                                   \
    if (uly_cuda_err_ != cudaSuccess)                                                       \
      ::ulysses::cuda_check::fail_cuda(uly_cuda_err_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)
