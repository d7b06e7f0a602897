// The step's memory, by pool. Every tensor the engine allocates comes from one
// of these pools, so the engine can report the measured peak of each next to
// the planned one, and the planner (a dry run of the same code with no memory
// behind the pointers) predicts them exactly.
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace ulysses {

enum class Pool : uint8_t {
  Weights,          // compute copies of the parameters (device)
  Gradients,        // parameter gradients (device)
  Optimizer,        // fp32 master weights and AdamW moments (device)
  Checkpoints,      // per-layer activation checkpoints kept on the device
  Working,          // everything a layer needs while it runs (activations, logits tiles, comm buffers)
  HostCheckpoints,  // checkpoints offloaded to (pinned) host memory
  HostOptimizer,    // AdamW's master weights, moments and gradient staging offloaded to (pinned) host memory
};
constexpr int kNumPools = 7;

// Finer labels inside the pools, for the figures the memory techniques move:
// set by a MemTagScope around the allocations they cover.
enum class MemTag : uint8_t { Other, Logits, MlpIntermediate, Communication };
constexpr int kNumMemTags = 4;
const char* mem_tag_name(MemTag t);
const char* pool_name(Pool p);  // "weights", "gradients", ...
bool pool_on_host(Pool p);

struct PoolCounters {
  size_t current = 0;
  size_t peak = 0;
};

// One allocation live at a captured moment: its pool, size and label ("family [shape] dtype").
struct LiveAllocation {
  Pool pool;
  size_t bytes;
  std::string label;
};

class MemoryPools {
 public:
  // device_raw / host_raw provide the memory; with planning = true nothing is
  // allocated (pointers are placeholders) and only the bytes are counted.
  MemoryPools(Allocator& device_raw, Allocator& host_raw, bool planning = false);
  ~MemoryPools();
  MemoryPools(const MemoryPools&) = delete;
  MemoryPools& operator=(const MemoryPools&) = delete;

  Allocator& pool(Pool p);
  bool planning() const { return planning_; }
  const PoolCounters& counters(Pool p) const { return counters_[static_cast<int>(p)]; }
  // Totals over the device pools / host pools; the peak is of the sum, not a sum of peaks.
  const PoolCounters& device() const { return device_; }
  const PoolCounters& host() const { return host_; }
  const PoolCounters& tag_counters(MemTag t) const { return tags_[static_cast<int>(t)]; }
  MemTag set_tag(MemTag t);  // returns the previous tag
  // Peaks back to the current values (to measure one step after set-up).
  void reset_peaks();
  // A table: pool, current, peak (bytes and GiB).
  std::string report() const;

  // Itemising a peak (the planner's second dry run): while `bytes` > 0, every allocation
  // keeps a label, and the device allocations live when the device pools first reach
  // `bytes` are captured. Labels are the family set by set_family (the profile family the
  // step is in) and what label_next gave (the tensor's shape and dtype).
  void capture_at_device_bytes(size_t bytes);
  bool capturing() const { return capture_at_ > 0; }
  void set_family(const char* family) { family_ = family ? family : ""; }
  void label_next(std::string label) { next_label_ = std::move(label); }
  const std::vector<LiveAllocation>& captured() const { return captured_; }

 private:
  friend class PoolAllocator;
  void* placeholder(size_t bytes);
  void on_alloc(Pool p, void* ptr, size_t bytes);
  void on_free(Pool p, void* ptr, size_t bytes);

  Allocator& device_raw_;
  Allocator& host_raw_;
  bool planning_;
  std::array<PoolCounters, kNumPools> counters_{};
  PoolCounters device_{}, host_{};
  std::array<std::unique_ptr<Allocator>, kNumPools> allocators_;
  std::array<PoolCounters, kNumMemTags> tags_{};
  MemTag current_tag_ = MemTag::Other;
  std::unordered_map<void*, MemTag> tag_of_;  // live allocations with a tag other than Other
  uintptr_t next_placeholder_ = 4096;         // planning: distinct, never dereferenced addresses
  size_t capture_at_ = 0;
  std::string family_, next_label_;
  std::unordered_map<void*, LiveAllocation> live_;  // while capturing
  std::vector<LiveAllocation> captured_;
};

// Labels the allocations made while it lives.
class MemTagScope {
 public:
  MemTagScope(MemoryPools& pools, MemTag tag) : pools_(pools), previous_(pools.set_tag(tag)) {}
  ~MemTagScope() { pools_.set_tag(previous_); }
  MemTagScope(const MemTagScope&) = delete;
  MemTagScope& operator=(const MemTagScope&) = delete;

 private:
  MemoryPools& pools_;
  MemTag previous_;
};

std::string format_bytes(size_t bytes);  // "1.50 GiB", "12.0 MiB", "512 B"

}  // namespace ulysses
