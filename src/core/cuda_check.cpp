#include "core/cuda_check.h"

#include <sstream>

#include "core/error.h"

namespace ulysses::cuda_check {

void fail_cuda(cudaError_t err, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA call failed: " << call << " -> " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
  throw Error(os.str(), file, line);
}

}  // namespace ulysses::cuda_check
