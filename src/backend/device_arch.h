// Which GPUs this build's CUDA kernels run on. They are compiled for sm_90a
// only (Hopper's arch-specific features bind them to compute capability 9.0
// exactly), so any other GPU must be refused up front with a clear message
// instead of failing at the first kernel launch. Plain C++ so CPU tests cover it.
#pragma once
#include <string>

namespace ulysses {

// Empty when device `index` (`name`, compute capability major.minor) can run
// the kernels; otherwise the message to show (naming the device and the fix).
std::string unsupported_gpu_reason(int index, const std::string& name, int major, int minor);

}  // namespace ulysses
