#include "backend/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
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

// Large pinned blocks (the step's host arena: up to tens of GiB of offloaded checkpoints).
// cudaMallocHost faults in and pins 4 KiB pages on one thread (PyTorch pins 32 GiB in ~14 s
// on the H200's host). Here: anonymous memory aligned for transparent huge pages, faulted in by
// several threads at once (zeroing pages is the cost, and it parallelises), then registered
// with the driver in one call (one range, so a copy may span any part of it).
constexpr size_t kLargePinned = size_t{256} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

struct Mapping {
  void* base;  // what mmap returned
  size_t length;
};

std::mutex& mappings_mu() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
std::unordered_map<void*, Mapping>& mappings() {  // user pointer -> its mapping
  static auto* m = new std::unordered_map<void*, Mapping>();
  return *m;
}

void fault_in_parallel(char* p, size_t bytes) {
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  const size_t per = (bytes / threads + kHugePage - 1) / kHugePage * kHugePage;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads && t * per < bytes; ++t)
    pool.emplace_back([=] {
      const size_t end = std::min(bytes, (t + 1) * per);
      for (size_t off = t * per; off < end; off += 4096) p[off] = 0;
    });
  for (auto& th : pool) th.join();
}

// nullptr when this path cannot be taken (the caller falls back to cudaMallocHost).
void* pin_large(size_t bytes) {
  const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;  // room to align
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const auto addr = reinterpret_cast<uintptr_t>(base);
  char* p = reinterpret_cast<char*>((addr + kHugePage - 1) / kHugePage * kHugePage);
  const size_t usable = length - static_cast<size_t>(p - static_cast<char*>(base));
  madvise(p, usable, MADV_HUGEPAGE);  // advice only: without huge pages it still works, slower
  fault_in_parallel(p, bytes);
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();
    munmap(base, length);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mappings_mu());
  mappings()[p] = Mapping{base, length};
  return p;
}

// True when ptr came from pin_large (and is now returned).
bool unpin_large(void* ptr) {
  Mapping m{};
  {
    std::lock_guard<std::mutex> lock(mappings_mu());
    auto it = mappings().find(ptr);
    if (it == mappings().end()) return false;
    m = it->second;
    mappings().erase(it);
  }
  report_free_error(cudaHostUnregister(ptr), "cudaHostUnregister");
  munmap(m.base, m.length);
  return true;
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
  void* p = bytes >= kLargePinned ? pin_large(bytes) : nullptr;
  if (p != nullptr) {
    bump_peak(current_, peak_, bytes);
    return p;
  }
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
  if (!unpin_large(ptr)) report_free_error(cudaFreeHost(ptr), "cudaFreeHost");
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

