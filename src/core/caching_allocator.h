// Keeps freed blocks for reuse instead of returning them to a slow backing allocator: the
// staging buffers of host-staged collectives (parallel/collectives.cpp) come and go every
// layer, and pinned host memory costs about a millisecond per megabyte to allocate. Sizes are
// rounded up to whole MiB so that a buffer of the same size finds its predecessor's block.
// Blocks are kept until the allocator dies; a request takes a cached block of its rounded size
// or allocates a new one.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "core/allocator.h"

namespace ulysses {

class CachingAllocator : public Allocator {
 public:
  CachingAllocator(Allocator& backing, std::string name);
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return backing_.device(); }
  const std::string& name() const override { return name_; }
  // Bytes of live allocations (as asked for); the cached blocks are the backing allocator's.
  size_t current_bytes() const override;
  size_t peak_bytes() const override;
  void reset_peak() override;

 private:
  static size_t rounded(size_t bytes);
  Allocator& backing_;
  std::string name_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  size_t current_ = 0, peak_ = 0;
};

}  // namespace ulysses
