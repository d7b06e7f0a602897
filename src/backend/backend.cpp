#include "backend/backend.h"

#include <fstream>
#include <string>

namespace ulysses {

size_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return static_cast<size_t>(-1);  // unknown: do not refuse
}

size_t Backend::device_memory_available() { return host_memory_available(); }

MemoryPools& Backend::pools() {
  if (!pools_) pools_ = std::make_unique<MemoryPools>(allocator(), offload_allocator());
  return *pools_;
}

// Every op's default implementation: refuse (the planner overrides missing_op and counts only).
#define ULY_DEFAULT_OP_IMPL(ret, op, params) \
  ret Backend::op##_impl params {            \
    missing_op(#op);                         \
    return ret();                            \
  }
ULYSSES_BACKEND_OPS(ULY_DEFAULT_OP_IMPL)
#undef ULY_DEFAULT_OP_IMPL

void Backend::missing_op(const char* op) {
  ULY_FAIL(op << ": the " << name() << " backend does not implement this op");
}

double Backend::sum_squares_all_impl(const std::vector<const Tensor*>& xs) {
  double s = 0;
  for (const Tensor* x : xs) s += sum_squares_impl(*x);
  return s;
}

void Backend::matmul_add_impl(Tensor& D, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b,
                              const Tensor& R) {
  if (D.raw() != R.raw()) copy(D, R);
  matmul_impl(D, A, B, trans_a, trans_b, 1.0, 1.0);
}

}  // namespace ulysses
