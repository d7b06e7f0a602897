#include "backend/cuda/check.h"

#include <cublasLt.h>
#include <nccl.h>

#include <sstream>

#include "core/error.h"

namespace ulysses::cuda_check {

void fail_cuda(cudaError_t err, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA call failed: " << call << " -> " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
  throw Error(os.str(), file, line);
}

void fail_cublas(int status, const char* call, const char* file, int line) {
  const auto st = static_cast<cublasStatus_t>(status);
  std::ostringstream os;
  os << "cuBLAS call failed: " << call << " -> " << cublasLtGetStatusName(st) << " (" << cublasLtGetStatusString(st)
     << ")";
  throw Error(os.str(), file, line);
}

void fail_nccl(int result, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "NCCL call failed: " << call << " -> " << ncclGetErrorString(static_cast<ncclResult_t>(result))
     << " (code " << result << "); set NCCL_DEBUG=WARN for details";
  throw Error(os.str(), file, line);
}

}  // namespace ulysses::cuda_check
