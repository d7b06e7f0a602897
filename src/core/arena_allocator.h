// One reserved block carved into tensors: the device (or pinned host) memory of
// a whole step taken once, at the size the memory plan predicts, so that the
// step itself never calls cudaMalloc/cudaFree (cudaFree synchronises the whole
// device, and pinned host allocation costs milliseconds per call).
//
// Before reserve() (and for any request that does not fit the block) it passes
// through to the backing allocator, so nothing fails for want of a plan; the
// fallbacks are counted and reported. Best fit with coalescing of neighbours;
// every piece starts on a kAlignment boundary.
//
// Reusing a freed piece is safe for work ordered on one device stream (the
// later user's kernels run after the earlier user's). Work on another stream
// (copies, NCCL) must keep its tensors alive until that stream has been joined.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "core/allocator.h"

namespace ulysses {

class ArenaAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 256;

  ArenaAllocator(Allocator& backing, std::string name);
  ~ArenaAllocator() override;
  ArenaAllocator(const ArenaAllocator&) = delete;
  ArenaAllocator& operator=(const ArenaAllocator&) = delete;

  // Takes one block of `bytes` from the backing allocator. Allowed again only
  // while no piece of the current block is in use (the old block is returned).
  void reserve(size_t bytes);
  // Returns the block to the backing allocator (no piece may be in use).
  void release();

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return backing_.device(); }
  const std::string& name() const override { return name_; }
  // Bytes asked for by live allocations (not rounded), in the block or passed through.
  size_t current_bytes() const override;
  size_t peak_bytes() const override;
  void reset_peak() override;

  struct Stats {
    size_t reserved = 0;    // size of the block
    size_t high_water = 0;  // highest end offset ever handed out in the block
    size_t fallbacks = 0;   // requests passed to the backing allocator since reserve()
    size_t fallback_bytes = 0;
    size_t largest_free = 0;  // largest free piece now
  };
  Stats stats() const;

 private:
  size_t take_piece(size_t rounded);  // offset, or npos
  void give_back(size_t offset, size_t rounded);

  Allocator& backing_;
  std::string name_;
  mutable std::mutex mu_;
  char* raw_ = nullptr;   // from the backing allocator
  char* base_ = nullptr;  // raw_ rounded up to kAlignment
  size_t capacity_ = 0;
  std::map<size_t, size_t> free_by_offset_;           // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  std::map<size_t, size_t> used_;                     // offset -> rounded size
  size_t current_ = 0, peak_ = 0;
  Stats stats_;
};

}  // namespace ulysses
