// Helpers for the CUDA tests: a fixture that FAILS (never skips) without a
// GPU, RAII device buffers, float <-> T uploads, NaN poisoning, tolerances.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cuda/check.h"
#include "core/dtype.h"
#include "test_util.h"

namespace ulysses::cuda_test {

// Relative-error bounds (‖out − ref‖ / ‖ref‖) by element type of the output.
template <class T>
struct Elem;
template <>
struct Elem<float> {
  static constexpr double tol = 1e-5;
  static float round(float x) { return x; }
  static constexpr const char* name = "float32";
};
template <>
struct Elem<__nv_bfloat16> {
  static constexpr double tol = 2e-2;
  static float round(float x) { return bf16_to_float(float_to_bf16(x)); }
  static constexpr const char* name = "bfloat16";
};
// fp32 outputs computed from identical inputs (rstd, losses, weight gradients).
constexpr double kF32Tol = 1e-5;

// The values a T buffer holds when given v: what the CPU reference must see.
template <class T>
std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = Elem<T>::round(x);
  return v;
}

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), (n == 0 ? 1 : n) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  // All bytes 0xFF: NaN in float32 and bfloat16, -1 in int32. An element the op fails to write stays NaN.
  void poison() {
    CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T)));
    CUDA_CHECK(cudaDeviceSynchronize());  // the tests' kernels run on other streams
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// Uploads float values as T (bf16: round to nearest even).
template <class T>
void upload(DeviceBuffer<T>& d, const std::vector<float>& h) {
  ASSERT_EQ(d.size(), h.size());
  if constexpr (std::is_same_v<T, float>) {
    CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> raw(h.size());
    for (size_t i = 0; i < h.size(); ++i) raw[i] = float_to_bf16(h[i]);
    CUDA_CHECK(cudaMemcpy(d.get(), raw.data(), raw.size() * 2, cudaMemcpyHostToDevice));
  }
  // A pageable upload may return before its DMA lands; the kernels run on other streams.
  CUDA_CHECK(cudaDeviceSynchronize());
}

template <class T>
std::vector<float> download(const DeviceBuffer<T>& d) {
  std::vector<float> h(d.size());
  if constexpr (std::is_same_v<T, float>) {
    CUDA_CHECK(cudaMemcpy(h.data(), d.get(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> raw(h.size());
    CUDA_CHECK(cudaMemcpy(raw.data(), d.get(), raw.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); ++i) h[i] = bf16_to_float(raw[i]);
  }
  return h;
}

inline void upload_i32(DeviceBuffer<int32_t>& d, const std::vector<int32_t>& h) {
  ASSERT_EQ(d.size(), h.size());
  CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

inline size_t count_nan(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += (x != x);
  return n;
}

// The GPU gate: a test that runs without a usable GPU FAILS with this message.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    ASSERT_TRUE(e == cudaSuccess && n > 0)
        << "no CUDA device visible (cudaGetDeviceCount: " << cudaGetErrorString(e) << ", " << n
        << " devices). The CUDA tests run on the GPU machine only; here this is a FAILURE, not a skip.";
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  // Waits for the stream and fails on any asynchronous error.
  void sync() {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());
  }
  cudaStream_t stream = nullptr;
};

// doc_start for documents of the given lengths (cut at S); the last one runs to S.
inline std::vector<int32_t> doc_start_of_lengths(int64_t S, const std::vector<int64_t>& lens) {
  std::vector<int32_t> doc(static_cast<size_t>(S));
  int64_t pos = 0;
  for (int64_t len : lens) {
    const int64_t start = pos;
    for (int64_t x = 0; x < len && pos < S; ++x) doc[pos++] = static_cast<int32_t>(start);
  }
  const int64_t start = pos;
  while (pos < S) doc[pos++] = static_cast<int32_t>(start);
  return doc;
}

// doc_start with a sliding window of `window` keys folded in, as make_documents does: row i's first key
// becomes the later of its document start and i - window + 1 (window 0: unchanged).
inline std::vector<int32_t> with_window(std::vector<int32_t> doc, int64_t window) {
  if (window > 0)
    for (size_t i = 0; i < doc.size(); ++i)
      doc[i] = std::max<int32_t>(doc[i], static_cast<int32_t>(std::max<int64_t>(int64_t(i) - window + 1, 0)));
  return doc;
}

}  // namespace ulysses::cuda_test

// Checks that `out` has no NaN (every element written over the poison) and is within tol of ref.
#define EXPECT_CLOSE(out, ref, tol)                                                                        \
  do {                                                                                                     \
    ASSERT_EQ((out).size(), (ref).size());                                                                 \
    EXPECT_EQ(::ulysses::cuda_test::count_nan(out), 0u) << #out ": NaN present (unwritten or bad values)"; \
    const double uly_err_ = ::ulysses::test::rel_error((out).data(), (ref).data(), (out).size());          \
    EXPECT_LE(uly_err_, (tol)) << #out " vs " #ref ": relative error " << uly_err_ << " > " << (tol);     \
  } while (0)
