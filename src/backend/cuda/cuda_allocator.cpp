#include "backend/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <vector>

#include "backend/cuda/check.h"
#include "core/error.h"

namespace ulysses::cuda {
namespace {

void bump_peak(std::atomic<size_t>& current, std::atomic<size_t>& peak, size_t bytes) {
  const size_t now = current.fetch_add(bytes) + bytes;
  size_t p = peak.load();
  while (now > p && !peak.compare_exchange_weak(p, now)) {
  }
}

std::string gib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Frees run from destructors (and at process exit, when the runtime may be
// unloading): report a failure, never throw.
void report_free_error(cudaError_t err, const char* what) {
  if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "ulysses: warning: %s failed: %s\n", what, cudaGetErrorString(err));
}

}  // namespace

CudaAllocator::CudaAllocator(int device_index, std::string name) : device_(device_index), name_(std::move(name)) {}

void* CudaAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the (non-sticky) error so that later checks do not see it
    size_t free_b = 0, total_b = 0;
    const cudaError_t info = cudaMemGetInfo(&free_b, &total_b);
    ULY_FAIL("out of GPU memory on cuda:" << device_ << ": asked for " << bytes << " bytes (" << gib(bytes)
                                          << ") in pool '" << name_ << "', which already holds " << current_.load()
                                          << " bytes (" << gib(current_.load()) << "); the device has "
                                          << (info == cudaSuccess ? gib(free_b) : std::string("?")) << " free of "
                                          << (info == cudaSuccess ? gib(total_b) : std::string("?"))
                                          << ". Lower the sequence length or tile sizes, or enable offload.");
  }
  CUDA_CHECK(err);
  bump_peak(current_, peak_, bytes);
  return p;
}

void CudaAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  report_free_error(cudaFree(ptr), "cudaFree");
  current_.fetch_sub(bytes);
}

PinnedHostAllocator::PinnedHostAllocator(std::string name) : name_(std::move(name)) {}

void* PinnedHostAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ULY_FAIL("out of pinned host memory: asked for " << bytes << " bytes (" << gib(bytes) << ") in pool '" << name_
                                                     << "', which already holds " << current_.load() << " bytes ("
                                                     << gib(current_.load())
                                                     << "). Offload less, or raise the locked-memory limit.");
  }
  CUDA_CHECK(err);
  bump_peak(current_, peak_, bytes);
  return p;
}

void PinnedHostAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  report_free_error(cudaFreeHost(ptr), "cudaFreeHost");
  current_.fetch_sub(bytes);
}

CudaAllocator& device_allocator(int device_index) {
  static std::mutex mu;
  static std::vector<CudaAllocator*>* table = new std::vector<CudaAllocator*>();
  std::lock_guard<std::mutex> lock(mu);
  ULY_CHECK(device_index >= 0 && device_index < 1024, "bad CUDA device index " << device_index);
  if (table->size() <= static_cast<size_t>(device_index)) table->resize(device_index + 1, nullptr);
  auto& slot = (*table)[device_index];
  if (slot == nullptr) slot = new CudaAllocator(device_index, "cuda:" + std::to_string(device_index));
  return *slot;
}

PinnedHostAllocator& pinned_host_allocator() {
  static PinnedHostAllocator* a = new PinnedHostAllocator("pinned-host");
  return *a;
}

}  // namespace ulysses::cuda

