// One check-macro family for CUDA runtime, cuBLAS(Lt) and NCCL results: a
// failure throws ulysses::Error naming the call, the library's error string
// and file:line. Usable from .cu and .cpp files alike.
#pragma once
#include <cuda_runtime_api.h>

namespace ulysses::cuda_check {

[[noreturn]] void fail_cuda(cudaError_t err, const char* call, const char* file, int line);
// status: a cublasStatus_t; result: an ncclResult_t (ints here, so that this
// header needs neither cublasLt.h nor nccl.h).
[[noreturn]] void fail_cublas(int status, const char* call, const char* file, int line);
[[noreturn]] void fail_nccl(int result, const char* call, const char* file, int line);

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

#define CUBLAS_CHECK(call)                                                                           \
  do {                                                                                               \
    const int uly_cublas_st_ = static_cast<int>(call);                                               \
    if (uly_cublas_st_ != 0) ::ulysses::cuda_check::fail_cublas(uly_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(call)                                                                          \
  do {                                                                                            \
    const int uly_nccl_res_ = static_cast<int>(call);                                             \
    if (uly_nccl_res_ != 0) ::ulysses::cuda_check::fail_nccl(uly_nccl_res_, #call, __FILE__, __LINE__); \
  } while (0)
