// The CUDA backend's check macros: CUDA_CHECK and CUDA_CHECK_LAUNCH from
// core/cuda_check.h (shared with the NCCL communicator), and CUBLAS_CHECK for
// cuBLAS(Lt) results. A failure throws ulysses::Error naming the call, the
// library's error string and file:line. Usable from .cu and .cpp files alike.
#pragma once
#include "core/cuda_check.h"

namespace ulysses::cuda_check {

// status: a cublasStatus_t (an int here, so that this header needs no cublasLt.h).
[[noreturn]] void fail_cublas(int status, const char* call, const char* file, int line);

}  // namespace ulysses::cuda_check

#define CUBLAS_CHECK(call)                                                                           \
  do {                                                                                               \
    const int uly_cublas_st_ = static_cast<int>(call);                                               \
    if (uly_cublas_st_ != 0) ::ulysses::cuda_check::fail_cublas(uly_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)
