#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/error.h"

namespace ulysses {

struct HostAllocator::Counters {
  std::atomic<size_t> current{0};
  std::atomic<size_t> peak{0};
};

HostAllocator::HostAllocator(std::string name) : name_(std::move(name)), counters_(new Counters) {}

void* HostAllocator::allocate(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  ULY_CHECK(p != nullptr, "out of host memory allocating " << bytes << " bytes in pool '" << name_ << "' ("
                                                           << counters_->current.load() << " bytes already in use)");
  const size_t now = counters_->current.fetch_add(bytes) + bytes;
  size_t peak = counters_->peak.load();
  while (now > peak && !counters_->peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void HostAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  counters_->current.fetch_sub(bytes == 0 ? 1 : bytes);
}

size_t HostAllocator::current_bytes() const { return counters_->current.load(); }
size_t HostAllocator::peak_bytes() const { return counters_->peak.load(); }
void HostAllocator::reset_peak() { counters_->peak.store(counters_->current.load()); }

Allocator& host_allocator() {
  static HostAllocator* a = new HostAllocator("host");  // never destroyed: tensors may outlive statics
  return *a;
}

}  // namespace ulysses
