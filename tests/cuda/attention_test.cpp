// CUDA attention (forward and backward) against the CPU reference, run in
// float on the same bf16-rounded inputs. Outputs are poisoned (0xFF bytes, a
// NaN in both bf16 and float) before every run, so an element the kernels
// never write fails the finiteness check. Seeds are fresh on every run and
// printed on failure. Needs a GPU: without one these tests fail, never skip.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/attention.h"
#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

bool gpu_visible() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    ck(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void poison() { ck(cudaMemset(p_, 0xFF, n_ * sizeof(T)), "cudaMemset"); }
  void upload(const std::vector<T>& h) {
    ASSERT_EQ(h.size(), n_);
    ck(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    ck(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& f) {
  std::vector<__nv_bfloat16> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = __float2bfloat16(f[i]);
  return b;
}
std::vector<float> to_float(const std::vector<__nv_bfloat16>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = __bfloat162float(b[i]);
  return f;
}

size_t count_nonfinite(const std::vector<float>& x) {
  size_t n = 0;
  for (float v : x) n += !std::isfinite(v);
  return n;
}

// Random values in [-range, range], rounded to bf16 so that the CPU sees exactly what the GPU sees.
std::vector<float> random_bf16_values(size_t n, uint64_t seed, double range) {
  auto v = ulysses::test::random_vector_f(n, seed, -range, range);
  for (auto& x : v) x = round_bf16(x);
  return v;
}

struct Case {
  int64_t S, H, Hkv, d;
  std::vector<int64_t> doc_lens;  // empty: one document
  double q_range = 1.0;       // larger: sharper softmax
};

void check_close(const char* what, const std::vector<float>& got, const std::vector<float>& ref, double tol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  EXPECT_EQ(count_nonfinite(got), 0u) << what << ": non-finite or never-written elements";
  const double err = ulysses::test::rel_error(got.data(), ref.data(), got.size());
  EXPECT_LE(err, tol) << what << ": relative error " << err;
  std::printf("    %-4s rel err %.3e (tol %.0e)\n", what, err, tol);
}

void run_case(const Case& c) {
  ASSERT_TRUE(gpu_visible()) << "no CUDA GPU is visible: the CUDA attention tests must run on a GPU machine";
  const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("  S=%lld H=%lld Hkv=%lld d=%lld docs=%zu seed=%llu\n", (long long)c.S, (long long)c.H,
              (long long)c.Hkv, (long long)c.d, c.doc_lens.size() + 1, (unsigned long long)seed);
  const int64_t S = c.S, H = c.H, Hkv = c.Hkv, d = c.d;
  const double scale = 1.0 / std::sqrt(double(d));
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d), nl = size_t(H * S);

  const auto q = random_bf16_values(nq, seed, c.q_range);
  const auto k = random_bf16_values(nk, seed + 1, 1.0);
  const auto v = random_bf16_values(nk, seed + 2, 1.0);
  const auto dout = random_bf16_values(nq, seed + 3, 1.0);
  const auto doc = ulysses::cuda_test::doc_start_of_lengths(S, c.doc_lens);

  std::vector<float> out_ref(nq), lse_ref(nl);
  ulysses::cpu::attention_forward<float>(out_ref.data(), lse_ref.data(), q.data(), k.data(), v.data(), doc.data(), S,
                                         H, Hkv, d, scale);
  // The backward's inputs are the forward's outputs as the engine stores them: out in bf16, lse in float.
  std::vector<float> out_in(nq);
  for (size_t i = 0; i < nq; ++i) out_in[i] = round_bf16(out_ref[i]);
  std::vector<float> dq_ref(nq), dk_ref(nk), dv_ref(nk);
  ulysses::cpu::attention_backward<float>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), out_in.data(),
                                          lse_ref.data(), q.data(), k.data(), v.data(), doc.data(), S, H, Hkv, d,
                                          scale);

  DeviceBuffer<__nv_bfloat16> dq_in(nq), dk_in(nk), dv_in(nk), ddout(nq), dout_in(nq);
  DeviceBuffer<int32_t> ddoc{size_t(S)};
  dq_in.upload(to_bf16(q));
  dk_in.upload(to_bf16(k));
  dv_in.upload(to_bf16(v));
  ddout.upload(to_bf16(dout));
  dout_in.upload(to_bf16(out_in));
  ddoc.upload(doc);

  // Forward.
  DeviceBuffer<__nv_bfloat16> dout_gpu(nq);
  DeviceBuffer<float> dlse(nl);
  dout_gpu.poison();
  dlse.poison();
  ulysses::cuda::attention_forward(dout_gpu.get(), dlse.get(), dq_in.get(), dk_in.get(), dv_in.get(), ddoc.get(), S,
                                   H, Hkv, d, scale, nullptr);
  ck(cudaDeviceSynchronize(), "attention_forward");
  check_close("out", to_float(dout_gpu.download()), out_ref, 2e-2);
  check_close("lse", dlse.download(), lse_ref, 1e-3);

  // Backward on the reference's forward outputs (isolates the backward kernels).
  DeviceBuffer<float> dlse_in(nl);
  dlse_in.upload(lse_ref);
  DeviceBuffer<__nv_bfloat16> gdq(nq), gdk(nk), gdv(nk);
  const size_t ws_bytes = ulysses::cuda::attention_backward_workspace_bytes(S, H, Hkv, d);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  for (int run = 0; run < 2; ++run) {  // twice: the workspace is reused dirty, as the engine does
    gdq.poison();
    gdk.poison();
    gdv.poison();
    if (run == 0) ws.poison();
    ulysses::cuda::attention_backward(gdq.get(), gdk.get(), gdv.get(), ddout.get(), dout_in.get(), dlse_in.get(),
                                      dq_in.get(), dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv, d, scale,
                                      ws.get(), ws_bytes, nullptr);
    ck(cudaDeviceSynchronize(), "attention_backward");
    SCOPED_TRACE("backward run " + std::to_string(run));
    check_close("dq", to_float(gdq.download()), dq_ref, 2e-2);
    check_close("dk", to_float(gdk.download()), dk_ref, 2e-2);
    check_close("dv", to_float(gdv.download()), dv_ref, 2e-2);
  }

  // End to end: the backward on the GPU forward's own outputs is still close to the reference.
  gdq.poison();
  gdk.poison();
  gdv.poison();
  ulysses::cuda::attention_backward(gdq.get(), gdk.get(), gdv.get(), ddout.get(), dout_gpu.get(), dlse.get(),
                                    dq_in.get(), dk_in.get(), dv_in.get(), ddoc.get(), S, H, Hkv, d, scale, ws.get(),
                                    ws_bytes, nullptr);
  ck(cudaDeviceSynchronize(), "attention_backward (GPU forward outputs)");
  SCOPED_TRACE("backward on the GPU forward's outputs");
  check_close("dq", to_float(gdq.download()), dq_ref, 2e-2);
  check_close("dk", to_float(gdk.download()), dk_ref, 2e-2);
  check_close("dv", to_float(gdv.download()), dv_ref, 2e-2);
}

TEST(CudaAttention, D16SingleDocumentNotTileMultiple) { run_case({1000, 4, 4, 16, {}}); }
TEST(CudaAttention, D16ShorterThanOneTile) { run_case({37, 2, 1, 16, {5, 1}}); }
TEST(CudaAttention, D32GqaPackedDocuments) { run_case({1000, 4, 2, 32, {300, 1, 250, 17, 1}, 2.0}); }
TEST(CudaAttention, D64GqaPackedDocumentsWithSingleTokenDocs) {
  run_case({1000, 8, 2, 64, {1, 129, 1, 333, 64, 200, 1}});
}
TEST(CudaAttention, D64SharpSoftmax) { run_case({1000, 2, 2, 64, {450, 3}, 4.0}); }
TEST(CudaAttention, D128SingleDocument) { run_case({1000, 2, 2, 128, {}}); }
TEST(CudaAttention, D128MqaPackedDocuments) { run_case({1000, 4, 1, 128, {70, 1, 500, 129}, 2.0}); }
TEST(CudaAttention, D128Gqa4096PackedDocuments) { run_case({4096, 4, 2, 128, {1500, 1, 1300, 700}}); }
TEST(CudaAttention, D64SingleHead4096SingleDocument) { run_case({4096, 1, 1, 64, {}}); }

TEST(CudaAttention, RejectsBadArguments) {
  // Argument checks run before any device work, so null pointers are fine here.
  auto fwd = [](int64_t H, int64_t Hkv, int64_t d) {
    ulysses::cuda::attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 128, H, Hkv, d, 0.125,
                                     nullptr);
  };
  try {
    fwd(6, 4, 64);
    ADD_FAILURE() << "H % Hkv != 0 was accepted";
  } catch (const ulysses::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple"), std::string::npos) << e.what();
  }
  try {
    fwd(4, 4, 48);
    ADD_FAILURE() << "d = 48 was accepted";
  } catch (const ulysses::Error& e) {
    EXPECT_NE(std::string(e.what()).find("16, 32, 64, 128"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ulysses::cuda::attention_backward_workspace_bytes(128, 4, 4, 80), ulysses::Error);
  EXPECT_THROW(fwd(4, 4, 64), ulysses::Error);  // null pointers
  const size_t need = ulysses::cuda::attention_backward_workspace_bytes(128, 4, 2, 64);
  EXPECT_GE(need, size_t(128) * 4 * 64 * sizeof(float));
  try {
    ulysses::cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                      nullptr, 128, 4, 2, 64, 0.125, nullptr, need - 1, nullptr);
    ADD_FAILURE() << "a too-small workspace was accepted";
  } catch (const ulysses::Error& e) {
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
}

}  // namespace
