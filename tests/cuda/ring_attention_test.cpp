// The CUDA twins of ring attention's ops through the Backend interface, against
// the CPU reference on the same (bf16-rounded) inputs: block-offset attention
// forward and backward (square and non-square blocks, blocks wholly masked by
// causality, packed documents across block edges, GQA, head sizes our bf16
// kernels pad), and the log-sum-exp merge; bf16 and fp32 compute. Outputs are
// poisoned (NaN) first. Written without a GPU at hand (issue #12): run on the
// GPU machine with `make test-gpu`; without a GPU it fails, never skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/documents.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

class RingOpsTest : public cuda_test::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (HasFatalFailure()) return;
    cpu = make_cpu_backend();
  }
  Tensor host_random(const Shape& s, uint64_t seed) {
    Tensor t = Tensor::empty(s, DType::F32);
    const auto v = test::random_vector_f(static_cast<size_t>(t.numel()), seed);
    std::memcpy(t.raw(), v.data(), t.nbytes());
    return t;
  }
  Tensor dev(Backend& gpu, const Tensor& h, DType dt) {
    Tensor t = gpu.empty(h.shape(), dt);
    gpu.copy(t, h);
    return t;
  }
  Tensor to_host(Backend& gpu, const Tensor& d) {
    Tensor t = Tensor::empty(d.shape(), DType::F32);
    gpu.copy(t, d);
    gpu.synchronize();
    return t;
  }
  Tensor poisoned(Backend& gpu, const Shape& s, DType dt) {
    Tensor t = gpu.empty(s, dt);
    CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), static_cast<cudaStream_t>(gpu.native_stream())));
    return t;
  }
  void expect_close(Backend& gpu, const Tensor& out, const Tensor& ref, double tol, const std::string& what) {
    const Tensor h = to_host(gpu, out);
    // lse rows of a wholly masked block are -inf on both sides: compare them exactly, the rest by norm.
    std::vector<float> a(h.data<float>(), h.data<float>() + h.numel());
    std::vector<float> b(ref.data<float>(), ref.data<float>() + ref.numel());
    for (size_t i = 0; i < a.size(); ++i)
      if (std::isinf(b[i])) {
        EXPECT_EQ(a[i], b[i]) << what << " element " << i;
        a[i] = b[i] = 0.f;
      }
    const double err = test::rel_error(a.data(), b.data(), a.size());
    const bool all_zero = std::all_of(b.begin(), b.end(), [](float x) { return x == 0.f; });
    if (all_zero) EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return x == 0.f; })) << what;
    else EXPECT_LE(err, tol) << what << ": relative error " << err << " (NaN/inf gives inf)";
  }

  // One block pair on the GPU and the CPU: forward, then backward with the forward's lse as if merged.
  void check_block(DType act, int64_t d, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0) {
    auto gpu = make_cuda_backend(0, act);
    const double tol = act == DType::F32 ? 1e-5 : 2e-2, gtol = act == DType::F32 ? 1e-5 : 5e-2;
    const int64_t S = 160, H = 4, Hkv = 2;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<int32_t> ds(S);
    for (int64_t i = 0; i < S; ++i) ds[i] = i < 37 ? 0 : (i < 101 ? 37 : 101);  // documents across block edges
    const std::string what = std::string(dtype_name(act)) + " d=" + std::to_string(d) + " Sq=" + std::to_string(Sq) +
                             " Sk=" + std::to_string(Sk) + " q0=" + std::to_string(q0) + " k0=" + std::to_string(k0);
    auto rounded = [&](const Tensor& h) { return to_host(*gpu, dev(*gpu, h, act)); };
    const Tensor q = rounded(host_random({Sq, H, d}, 1)), k = rounded(host_random({Sk, Hkv, d}, 2)),
                 v = rounded(host_random({Sk, Hkv, d}, 3)), dout = rounded(host_random({Sq, H, d}, 4));
    const Documents gdocs = make_documents(*gpu, ds), cdocs = make_documents(*cpu, ds);
    Tensor gq = dev(*gpu, q, act), gk = dev(*gpu, k, act), gvv = dev(*gpu, v, act);
    Tensor out = poisoned(*gpu, {Sq, H, d}, act), lse = poisoned(*gpu, {H, Sq}, DType::F32);
    gpu->attention_forward_block(out, lse, gq, gk, gvv, gdocs, q0, k0, scale);
    Tensor rout = Tensor::empty({Sq, H, d}, DType::F32), rlse = Tensor::empty({H, Sq}, DType::F32);
    cpu->attention_forward_block(rout, rlse, q, k, v, cdocs, q0, k0, scale);
    expect_close(*gpu, out, rout, tol, what + " out");
    expect_close(*gpu, lse, rlse, 1e-3, what + " lse");

    // The backward needs finite lse rows (the merged lse of a real ring); use the CPU's where finite, else 0.
    Tensor blse = Tensor::empty({H, Sq}, DType::F32);
    for (int64_t i = 0; i < blse.numel(); ++i)
      blse.data<float>()[i] = std::isinf(rlse.data<float>()[i]) ? 0.f : rlse.data<float>()[i];
    Tensor dq = poisoned(*gpu, {Sq, H, d}, act), dk = poisoned(*gpu, {Sk, Hkv, d}, act),
           dv = poisoned(*gpu, {Sk, Hkv, d}, act);
    const Tensor rout_r = rounded(rout);
    gpu->attention_backward_block(dq, dk, dv, dev(*gpu, dout, act), dev(*gpu, rout_r, act),
                                  dev(*gpu, blse, DType::F32), gq, gk, gvv, gdocs, q0, k0, scale);
    Tensor rq = Tensor::empty({Sq, H, d}, DType::F32), rk = Tensor::empty({Sk, Hkv, d}, DType::F32),
           rv = Tensor::empty({Sk, Hkv, d}, DType::F32);
    cpu->attention_backward_block(rq, rk, rv, dout, rout_r, blse, q, k, v, cdocs, q0, k0, scale);
    expect_close(*gpu, dq, rq, gtol, what + " dq");
    expect_close(*gpu, dk, rk, gtol, what + " dk");
    expect_close(*gpu, dv, rv, gtol, what + " dv");
  }

  std::unique_ptr<Backend> cpu;
};

TEST_F(RingOpsTest, BlockOffsetAttentionAgainstCpu) {
  for (DType act : {DType::BF16, DType::F32})
    for (int64_t d : {64, 40}) {  // 40: our bf16 kernels run it padded to 64
      check_block(act, d, 40, 40, 0, 0);     // a diagonal block at the start
      check_block(act, d, 40, 40, 80, 40);   // below the diagonal, documents across it
      check_block(act, d, 40, 40, 120, 0);   // far below: only the first document's keys
      check_block(act, d, 40, 40, 40, 80);   // wholly after the queries: out 0, lse -inf
      check_block(act, d, 48, 80, 100, 20);  // non-square, both edges inside documents
      check_block(act, d, 80, 16, 16, 64);   // more query rows than keys, partly causal
    }
}

TEST_F(RingOpsTest, MergeAgainstCpu) {
  for (DType act : {DType::BF16, DType::F32}) {
    auto gpu = make_cuda_backend(0, act);
    const int64_t S = 50, H = 3, d = 64;
    const Tensor out = to_host(*gpu, dev(*gpu, host_random({S, H, d}, 11), act));
    Tensor lse = host_random({H, S}, 12), acc = host_random({S, H, d}, 13), acc_lse = host_random({H, S}, 14);
    lse.data<float>()[3] = -INFINITY;      // a block that saw nothing of row 3
    acc_lse.data<float>()[7] = -INFINITY;  // a row still empty
    Tensor gacc = dev(*gpu, acc, DType::F32), glse = dev(*gpu, acc_lse, DType::F32);
    gpu->attention_merge(gacc, glse, dev(*gpu, out, act), dev(*gpu, lse, DType::F32));
    cpu->attention_merge(acc, acc_lse, out, lse);
    expect_close(*gpu, gacc, acc, 1e-6, std::string(dtype_name(act)) + " merged out");
    expect_close(*gpu, glse, acc_lse, 1e-6, std::string(dtype_name(act)) + " merged lse");
  }
}

}  // namespace
}  // namespace ulysses
