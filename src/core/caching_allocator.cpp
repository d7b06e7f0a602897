#include "core/caching_allocator.h"

#include <algorithm>

namespace ulysses {

namespace {
constexpr size_t kGranule = size_t{1} << 20;
}

CachingAllocator::CachingAllocator(Allocator& backing, std::string name) : backing_(backing), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  for (const auto& [size, ptr] : free_) backing_.deallocate(ptr, size);
}

size_t CachingAllocator::rounded(size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = rounded(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = free_.find(size);
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
    }
  }
  if (p == nullptr) p = backing_.allocate(size);  // outside the lock: it may take a while
  std::lock_guard<std::mutex> lock(mu_);
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(rounded(bytes), ptr);
  current_ -= bytes;
}

size_t CachingAllocator::current_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

size_t CachingAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
}

}  // namespace ulysses
