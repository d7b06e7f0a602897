#include "core/memory_pools.h"

#include <cstdio>
#include <mutex>
#include <sstream>

#include "core/error.h"

namespace ulysses {

const char* pool_name(Pool p) {
  switch (p) {
    case Pool::Weights: return "weights";
    case Pool::Gradients: return "gradients";
    case Pool::Optimizer: return "optimizer";
    case Pool::Checkpoints: return "checkpoints";
    case Pool::Working: return "working";
    case Pool::HostCheckpoints: return "host-checkpoints";
    case Pool::HostOptimizer: return "host-optimizer";
  }
  return "?";
}

const char* mem_tag_name(MemTag t) {
  switch (t) {
    case MemTag::Other: return "other";
    case MemTag::Logits: return "logits";
    case MemTag::MlpIntermediate: return "mlp-intermediate";
    case MemTag::Communication: return "communication";
  }
  return "?";
}

bool pool_on_host(Pool p) { return p == Pool::HostCheckpoints || p == Pool::HostOptimizer; }

std::string format_bytes(size_t b) {
  char buf[64];
  const double x = static_cast<double>(b);
  if (b >= (size_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", x / (1 << 30));
  else if (b >= (size_t(1) << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", x / (1 << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", x / 1024);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

// Forwards to the raw allocator (or to nothing when planning) and counts.
class PoolAllocator : public Allocator {
 public:
  PoolAllocator(MemoryPools& owner, Pool p, Allocator& raw)
      : owner_(owner), pool_(p), raw_(raw), name_(pool_name(p)) {}
  void* allocate(size_t bytes) override {
    void* ptr = owner_.planning_ ? owner_.placeholder(bytes) : raw_.allocate(bytes);
    owner_.on_alloc(pool_, ptr, bytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (!owner_.planning_) raw_.deallocate(ptr, bytes);
    owner_.on_free(pool_, ptr, bytes);
  }
  Device device() const override { return raw_.device(); }
  const std::string& name() const override { return name_; }
  size_t current_bytes() const override { return owner_.counters(pool_).current; }
  size_t peak_bytes() const override { return owner_.counters(pool_).peak; }
  void reset_peak() override { owner_.reset_peaks(); }

 private:
  MemoryPools& owner_;
  Pool pool_;
  Allocator& raw_;
  std::string name_;
};

namespace {
std::mutex g_pools_mutex;
void bump(PoolCounters& c, size_t bytes) {
  c.current += bytes;
  if (c.current > c.peak) c.peak = c.current;
}
}  // namespace

MemoryPools::MemoryPools(Allocator& device_raw, Allocator& host_raw, bool planning)
    : device_raw_(device_raw), host_raw_(host_raw), planning_(planning) {
  for (int i = 0; i < kNumPools; ++i) {
    const Pool p = static_cast<Pool>(i);
    allocators_[i] = std::make_unique<PoolAllocator>(*this, p, pool_on_host(p) ? host_raw_ : device_raw_);
  }
}

MemoryPools::~MemoryPools() = default;

Allocator& MemoryPools::pool(Pool p) { return *allocators_[static_cast<int>(p)]; }

void* MemoryPools::placeholder(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  void* p = reinterpret_cast<void*>(next_placeholder_);
  next_placeholder_ += (bytes + 64) / 64 * 64;
  return p;
}

MemTag MemoryPools::set_tag(MemTag t) {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  const MemTag previous = current_tag_;
  current_tag_ = t;
  return previous;
}

void MemoryPools::on_alloc(Pool p, void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  bump(counters_[static_cast<int>(p)], bytes);
  bump(pool_on_host(p) ? host_ : device_, bytes);
  if (current_tag_ != MemTag::Other) {
    bump(tags_[static_cast<int>(current_tag_)], bytes);
    tag_of_[ptr] = current_tag_;
  }
  if (capture_at_ > 0) {
    live_[ptr] = LiveAllocation{p, bytes, (family_.empty() ? std::string("(step)") : family_) + " " + next_label_};
    if (!pool_on_host(p) && captured_.empty() && device_.current >= capture_at_)
      for (const auto& [where, a] : live_)
        if (!pool_on_host(a.pool)) captured_.push_back(a);
  }
}

void MemoryPools::capture_at_device_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  capture_at_ = bytes;
  captured_.clear();
  live_.clear();
}

void MemoryPools::on_free(Pool p, void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  counters_[static_cast<int>(p)].current -= bytes;
  (pool_on_host(p) ? host_ : device_).current -= bytes;
  auto it = tag_of_.find(ptr);
  if (it != tag_of_.end()) {
    tags_[static_cast<int>(it->second)].current -= bytes;
    tag_of_.erase(it);
  }
  if (capture_at_ > 0) live_.erase(ptr);
}

void MemoryPools::reset_peaks() {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  for (auto& c : counters_) c.peak = c.current;
  for (auto& c : tags_) c.peak = c.current;
  device_.peak = device_.current;
  host_.peak = host_.current;
}

std::string MemoryPools::report() const {
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line, "%-18s %-7s %14s %14s\n", "pool", "where", "current", "peak");
  os << line;
  for (int i = 0; i < kNumPools; ++i) {
    const Pool p = static_cast<Pool>(i);
    std::snprintf(line, sizeof line, "%-18s %-7s %14s %14s\n", pool_name(p), pool_on_host(p) ? "host" : "device",
                  format_bytes(counters_[i].current).c_str(), format_bytes(counters_[i].peak).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "%-18s %-7s %14s %14s\n", "total", "device", format_bytes(device_.current).c_str(),
                format_bytes(device_.peak).c_str());
  os << line;
  std::snprintf(line, sizeof line, "%-18s %-7s %14s %14s\n", "total", "host", format_bytes(host_.current).c_str(),
                format_bytes(host_.peak).c_str());
  os << line;
  return os.str();
}

}  // namespace ulysses
