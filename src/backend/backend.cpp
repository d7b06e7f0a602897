#include "backend/backend.h"

namespace ulysses {

MemoryPools& Backend::pools() {
  if (!pools_) pools_ = std::make_unique<MemoryPools>(allocator(), offload_allocator());
  return *pools_;
}

void Backend::copy_heads(Tensor&, int64_t, const Tensor&, int64_t, int64_t, bool) {
  ULY_FAIL("backend '" << name() << "' does not implement copy_heads (needed for sequence parallelism)");
}

}  // namespace ulysses
