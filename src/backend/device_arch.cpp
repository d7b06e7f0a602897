#include "backend/device_arch.h"

#include <sstream>

namespace ulysses {

std::string unsupported_gpu_reason(int index, const std::string& name, int major, int minor) {
  if (major == 9 && minor == 0) return "";
  std::ostringstream os;
  os << "CUDA device " << index << " (" << name << ") has compute capability " << major << "." << minor
     << ", but this build's kernels are compiled for sm_90a (Hopper: H100, H200, GH200) only; run on a Hopper GPU "
        "or use --backend cpu";
  return os.str();
}

}  // namespace ulysses
