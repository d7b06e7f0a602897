#include "backend/cuda/check.h"

#include <cublasLt.h>

#include <sstream>

#include "core/error.h"

namespace ulysses::cuda_check {

void fail_cublas(int status, const char* call, const char* file, int line) {
  const auto st = static_cast<cublasStatus_t>(status);
  std::ostringstream os;
  os << "cuBLAS call failed: " << call << " -> " << cublasLtGetStatusName(st) << " (" << cublasLtGetStatusString(st)
     << ")";
  throw Error(os.str(), file, line);
}

}  // namespace ulysses::cuda_check
