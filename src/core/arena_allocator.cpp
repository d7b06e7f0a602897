#include "core/arena_allocator.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace ulysses {
namespace {
constexpr size_t kNone = static_cast<size_t>(-1);
size_t round_up(size_t bytes) { return (bytes + ArenaAllocator::kAlignment - 1) / ArenaAllocator::kAlignment * ArenaAllocator::kAlignment; }
}  // namespace

ArenaAllocator::ArenaAllocator(Allocator& backing, std::string name) : backing_(backing), name_(std::move(name)) {}

ArenaAllocator::~ArenaAllocator() {
  // Tensors may outlive the arena only if they were passed through; a block
  // still in use is leaked rather than freed under a live tensor.
  if (raw_ != nullptr && used_.empty()) backing_.deallocate(raw_, capacity_ + kAlignment);
}

void ArenaAllocator::reserve(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ULY_CHECK(used_.empty(), "memory arena '" << name_ << "': reserve(" << bytes << ") while " << used_.size()
                                            << " pieces of the current block are in use");
  if (raw_ != nullptr) backing_.deallocate(raw_, capacity_ + kAlignment);
  raw_ = base_ = nullptr;
  capacity_ = 0;
  free_by_offset_.clear();
  free_by_size_.clear();
  stats_ = Stats{};
  bytes = round_up(bytes);
  if (bytes == 0) return;
  // One alignment unit more, so the pieces are aligned whatever the backing allocator's alignment.
  raw_ = static_cast<char*>(backing_.allocate(bytes + kAlignment));
  const auto addr = reinterpret_cast<uintptr_t>(raw_);
  base_ = raw_ + (kAlignment - addr % kAlignment) % kAlignment;
  capacity_ = bytes;
  free_by_offset_[0] = bytes;
  free_by_size_.insert({bytes, 0});
  stats_.reserved = bytes;
}

void ArenaAllocator::release() { reserve(0); }

size_t ArenaAllocator::take_piece(size_t rounded) {
  auto it = free_by_size_.lower_bound({rounded, 0});
  if (it == free_by_size_.end()) return kNone;
  const auto [size, offset] = *it;
  free_by_size_.erase(it);
  free_by_offset_.erase(offset);
  if (size > rounded) {
    free_by_offset_[offset + rounded] = size - rounded;
    free_by_size_.insert({size - rounded, offset + rounded});
  }
  used_[offset] = rounded;
  stats_.high_water = std::max(stats_.high_water, offset + rounded);
  return offset;
}

void ArenaAllocator::give_back(size_t offset, size_t size) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {  // merge with the piece after
    size += next->second;
    free_by_size_.erase({next->second, next->first});
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {  // merge with the piece before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_by_size_.erase({prev->second, prev->first});
      free_by_offset_.erase(prev);
    }
  }
  free_by_offset_[offset] = size;
  free_by_size_.insert({size, offset});
}

void* ArenaAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (base_ != nullptr) {
      const size_t offset = take_piece(round_up(bytes));
      if (offset != kNone) p = base_ + offset;
    }
    if (p == nullptr && base_ != nullptr) {
      ++stats_.fallbacks;
      stats_.fallback_bytes += bytes;
    }
  }
  if (p == nullptr) p = backing_.allocate(bytes);  // throws its own clear out-of-memory error
  std::lock_guard<std::mutex> lock(mu_);
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  return p;
}

void ArenaAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ -= bytes;
    char* c = static_cast<char*>(ptr);
    if (base_ != nullptr && c >= base_ && c < base_ + capacity_) {
      const size_t offset = static_cast<size_t>(c - base_);
      auto it = used_.find(offset);
      ULY_CHECK(it != used_.end(), "memory arena '" << name_ << "': freeing " << ptr << ", which it never handed out");
      const size_t rounded = it->second;
      used_.erase(it);
      give_back(offset, rounded);
      return;
    }
  }
  backing_.deallocate(ptr, bytes);
}

size_t ArenaAllocator::current_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

size_t ArenaAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void ArenaAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
}

ArenaAllocator::Stats ArenaAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.largest_free = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return s;
}

}  // namespace ulysses
