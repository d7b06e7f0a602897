// Device memory (cudaMalloc) and page-locked host memory (for offloaded activations:
// cudaMallocHost, or for blocks of 256 MiB and more huge-page memory faulted in by several
// threads and registered with cudaHostRegister) with byte and peak accounting.
#pragma once
#include <atomic>
#include <string>

#include "core/allocator.h"

namespace ulysses::cuda {

class CudaAllocator : public Allocator {
 public:
  CudaAllocator(int device_index, std::string name);
  // Throws a clear out-of-memory error (bytes asked, bytes this pool holds, bytes the device has free).
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::CUDA; }
  const std::string& name() const override { return name_; }
  size_t current_bytes() const override { return current_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_.store(current_.load()); }
  int device_index() const { return device_; }

 private:
  int device_;
  std::string name_;
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

class PinnedHostAllocator : public Allocator {
 public:
  explicit PinnedHostAllocator(std::string name);
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::CPU; }
  const std::string& name() const override { return name_; }
  size_t current_bytes() const override { return current_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_.store(current_.load()); }

 private:
  std::string name_;
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// Process-wide allocators, never destroyed (tensors may outlive the backend
// that created them, as with core's host_allocator()).
CudaAllocator& device_allocator(int device_index);
PinnedHostAllocator& pinned_host_allocator();

}  // namespace ulysses::cuda
