// Allocators hand out memory for tensors and account for it, so that the
// engine can report the measured peak of each pool next to the planned one.
#pragma once
#include <cstddef>
#include <string>

#include "core/dtype.h"

namespace ulysses {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  virtual const std::string& name() const = 0;
  virtual size_t current_bytes() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
};

// Plain aligned host memory with byte accounting (thread-safe counters).
class HostAllocator : public Allocator {
 public:
  explicit HostAllocator(std::string name = "host");
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::CPU; }
  const std::string& name() const override { return name_; }
  size_t current_bytes() const override;
  size_t peak_bytes() const override;
  void reset_peak() override;

 private:
  std::string name_;
  struct Counters;
  Counters* counters_;
};

// The process-wide default host allocator.
Allocator& host_allocator();

}  // namespace ulysses
