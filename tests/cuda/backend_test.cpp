// The CUDA backend through the Backend interface: construction, memory,
// copies with conversion, sum, matmul, and every op against the CPU backend
// (bf16 on the GPU, fp32 on the CPU over the same bf16-rounded inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/documents.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

class CudaBackendTest : public cuda_test::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (HasFatalFailure()) return;
    gpu = make_cuda_backend(0);
    cpu = make_cpu_backend();
  }

  Tensor host_random(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
    Tensor t = Tensor::empty(s, DType::F32);
    const auto v = test::random_vector_f(static_cast<size_t>(t.numel()), seed, lo, hi);
    std::memcpy(t.raw(), v.data(), t.nbytes());
    return t;
  }
  Tensor host_i32(const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32);
    std::memcpy(t.raw(), v.data(), t.nbytes());
    return t;
  }
  Tensor dev(const Tensor& h, DType dt) {
    Tensor t = gpu->empty(h.shape(), dt);
    gpu->copy(t, h);
    return t;
  }
  Tensor to_host(const Tensor& d) {
    Tensor t = Tensor::empty(d.shape(), DType::F32);
    gpu->copy(t, d);
    return t;
  }
  // The values a bf16 tensor holds for h (what the CPU reference must see).
  Tensor bf16_rounded(const Tensor& h) { return to_host(dev(h, DType::BF16)); }
  Tensor poisoned(const Shape& s, DType dt) {
    Tensor t = gpu->empty(s, dt);
    CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), static_cast<cudaStream_t>(gpu->native_stream())));
    return t;
  }
  void expect_close(const Tensor& gpu_out, const Tensor& cpu_ref, double tol, const char* what) {
    const Tensor h = to_host(gpu_out);
    const double err = test::rel_error(h, cpu_ref);
    EXPECT_LE(err, tol) << what << ": relative error " << err << " (NaN/inf gives inf)";
  }

  std::unique_ptr<Backend> gpu, cpu;
};

TEST_F(CudaBackendTest, Identity) {
  EXPECT_TRUE(cuda_backend_compiled_in());
  EXPECT_EQ(gpu->name(), "cuda:0");
  EXPECT_EQ(gpu->device(), Device::CUDA);
  EXPECT_EQ(gpu->act_dtype(), DType::BF16);
  EXPECT_NE(gpu->native_stream(), nullptr);
  EXPECT_EQ(gpu->allocator().device(), Device::CUDA);
  EXPECT_EQ(gpu->offload_allocator().device(), Device::CPU);
  const size_t free_b = gpu->device_memory_available();
  EXPECT_GT(free_b, size_t{1} << 30) << "free device memory";
  EXPECT_LT(free_b, size_t{1} << 40) << "free device memory";
}

TEST_F(CudaBackendTest, BadDeviceIndexIsAClearError) {
  try {
    make_cuda_backend(1000);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST_F(CudaBackendTest, CopyRoundTrips) {
  const Tensor h = host_random({3, 5, 7}, 1, -100, 100);
  const Tensor hr = [&] {  // host-side bf16 rounding
    Tensor b = Tensor::empty(h.shape(), DType::BF16), f = Tensor::empty(h.shape(), DType::F32);
    cpu->copy(b, h);
    cpu->copy(f, b);
    return f;
  }();
  // host f32 -> device f32 -> host: exact.
  EXPECT_EQ(test::rel_error(to_host(dev(h, DType::F32)), h), 0.0);
  // host f32 -> device bf16 (converted on the host) -> host f32: the bf16 rounding.
  EXPECT_EQ(test::rel_error(to_host(dev(h, DType::BF16)), hr), 0.0);
  // device f32 -> device bf16 (cast kernel) -> host: the same rounding.
  Tensor df = dev(h, DType::F32), db = gpu->empty(h.shape(), DType::BF16);
  gpu->copy(db, df);
  EXPECT_EQ(test::rel_error(to_host(db), hr), 0.0);
  // device bf16 -> device f32 (cast kernel): exact widening.
  Tensor df2 = poisoned(h.shape(), DType::F32);
  gpu->copy(df2, db);
  EXPECT_EQ(test::rel_error(to_host(df2), hr), 0.0);
  // device -> device, same dtype, different shape with the same numel.
  Tensor flat = poisoned({105}, DType::F32);
  gpu->copy(flat, df);
  EXPECT_EQ(test::rel_error(to_host(flat), h), 0.0);
  // float64 host -> device f32 -> host float64 (staged conversion).
  Tensor h64 = Tensor::empty({4}, DType::F64);
  const double vals[4] = {1.0 / 3.0, -2.5, 1e10, 0.0};
  std::memcpy(h64.raw(), vals, sizeof(vals));
  Tensor d32 = dev(h64, DType::F32);
  Tensor back64 = Tensor::empty({4}, DType::F64);
  gpu->copy(back64, d32);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<double*>(back64.raw())[i], static_cast<double>(static_cast<float>(vals[i])));
  // device bf16 -> host bf16, raw bits.
  Tensor hb = Tensor::empty(h.shape(), DType::BF16);
  gpu->copy(hb, db);
  Tensor hb_ref = Tensor::empty(h.shape(), DType::BF16);
  cpu->copy(hb_ref, h);
  EXPECT_EQ(std::memcmp(hb.raw(), hb_ref.raw(), hb.nbytes()), 0);
  // int32 both ways.
  const std::vector<int32_t> iv = {5, -7, 1 << 30, 0};
  Tensor di = gpu->empty({4}, DType::I32);
  gpu->copy(di, host_i32(iv));
  Tensor hi = Tensor::empty({4}, DType::I32);
  gpu->copy(hi, di);
  EXPECT_EQ(std::memcmp(hi.raw(), iv.data(), 16), 0);
  // Pinned host memory works as a source and destination.
  Tensor pinned = Tensor::empty(h.shape(), DType::F32, gpu->offload_allocator());
  gpu->copy(pinned, df);
  EXPECT_EQ(test::rel_error(pinned, h), 0.0);
  Tensor df3 = poisoned(h.shape(), DType::F32);
  gpu->copy(df3, pinned);
  EXPECT_EQ(test::rel_error(to_host(df3), h), 0.0);
  // Errors: element counts, int <-> float.
  Tensor wrong = gpu->empty({104}, DType::F32);
  EXPECT_THROW(gpu->copy(wrong, h), Error);
  Tensor di2 = gpu->empty({4}, DType::I32);
  EXPECT_THROW(gpu->copy(di2, dev(host_random({4}, 2), DType::F32)), Error);
}

TEST_F(CudaBackendTest, ZeroAndSum) {
  const Tensor h = host_random({1000, 37}, 3, -1, 3);
  double want = 0;
  for (int64_t i = 0; i < h.numel(); ++i) want += static_cast<const float*>(h.raw())[i];
  Tensor d = dev(h, DType::F32);
  EXPECT_NEAR(gpu->sum(d), want, 1e-9 * std::fabs(want));
  const Tensor hr = bf16_rounded(h);
  double want_b = 0;
  for (int64_t i = 0; i < hr.numel(); ++i) want_b += static_cast<const float*>(hr.raw())[i];
  EXPECT_NEAR(gpu->sum(dev(h, DType::BF16)), want_b, 1e-9 * std::fabs(want_b));
  std::vector<int32_t> iv(12345);
  double want_i = 0;
  for (size_t i = 0; i < iv.size(); ++i) want_i += (iv[i] = static_cast<int32_t>(i % 17) - 3);
  Tensor di = gpu->empty({12345}, DType::I32);
  gpu->copy(di, host_i32(iv));
  EXPECT_EQ(gpu->sum(di), want_i);
  EXPECT_NEAR(gpu->sum(h), want, 1e-9 * std::fabs(want));  // host tensors are summed on the host
  gpu->zero(d);
  EXPECT_EQ(gpu->sum(d), 0.0);
  const Tensor z = to_host(d);
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(static_cast<const float*>(z.raw())[i], 0.0f);
}

TEST_F(CudaBackendTest, MatmulAllTransposes) {
  const int64_t M = 40, N = 24, K = 56;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [ab, c] : {std::pair<DType, DType>{DType::F32, DType::F32}, {DType::BF16, DType::BF16},
                           {DType::BF16, DType::F32}}) {
        SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb << " A/B " << dtype_name(ab)
                                        << " C " << dtype_name(c));
        const Shape sa = ta ? Shape{K, M} : Shape{M, K}, sb = tb ? Shape{N, K} : Shape{K, N};
        Tensor A = host_random(sa, 10 + ta), B = host_random(sb, 20 + tb), C0 = host_random({M, N}, 30);
        if (ab == DType::BF16) {
          A = bf16_rounded(A);
          B = bf16_rounded(B);
        }
        if (c == DType::BF16) C0 = bf16_rounded(C0);
        Tensor dA = dev(A, ab), dB = dev(B, ab), dC = dev(C0, c);
        gpu->matmul(dC, dA, dB, ta, tb, 0.5, 1.0);
        Tensor ref = C0.clone();
        cpu->matmul(ref, A, B, ta, tb, 0.5, 1.0);
        expect_close(dC, ref, c == DType::F32 ? 1e-5 : 2e-2, "C = 0.5 AB + C");
        Tensor dC2 = poisoned({M, N}, c);
        gpu->matmul(dC2, dA, dB, ta, tb);
        Tensor ref2 = Tensor::empty({M, N}, DType::F32);
        cpu->matmul(ref2, A, B, ta, tb);
        expect_close(dC2, ref2, c == DType::F32 ? 1e-5 : 2e-2, "C = AB (beta 0, C poisoned)");
      }
  // Shape and dtype errors.
  Tensor a = gpu->empty({4, 5}, DType::BF16), b = gpu->empty({6, 3}, DType::BF16), cc = gpu->empty({4, 3}, DType::BF16);
  Tensor rr = gpu->empty({4, 3}, DType::BF16), b53 = gpu->empty({5, 3}, DType::BF16);
  EXPECT_THROW(gpu->matmul_add(cc, a, b, false, false, rr), Error);
  EXPECT_THROW(gpu->matmul_add(cc, a, b53, false, false, gpu->empty({3, 4}, DType::BF16)), Error);
  EXPECT_THROW(gpu->matmul(cc, a, b, false, false), Error);
  Tensor b32 = gpu->empty({5, 3}, DType::F32);
  EXPECT_THROW(gpu->matmul(cc, a, b32, false, false), Error);
  Tensor sq = gpu->empty({4, 4}, DType::BF16);
  EXPECT_THROW(gpu->matmul(sq, sq, sq, false, false), Error);  // output overlapping an input
}

// D = op(A) op(B) + R with R read in cuBLASLt's epilogue: against the CPU's product plus R, with a
// separate output and in place; R is left as it was.
TEST_F(CudaBackendTest, MatmulAddAgainstCpu) {
  const int64_t M = 48, N = 40, K = 72;
  for (bool tb : {false, true})
    for (DType t : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(testing::Message() << "trans_b=" << tb << " " << dtype_name(t));
      Tensor A = host_random({M, K}, 41), B = host_random(tb ? Shape{N, K} : Shape{K, N}, 42),
             R = host_random({M, N}, 43);
      if (t == DType::BF16) A = bf16_rounded(A), B = bf16_rounded(B), R = bf16_rounded(R);
      Tensor ref = R.clone();
      cpu->matmul(ref, A, B, false, tb, 1.0, 1.0);
      Tensor dA = dev(A, t), dB = dev(B, t), dR = dev(R, t), dD = poisoned({M, N}, t);
      gpu->matmul_add(dD, dA, dB, false, tb, dR);
      expect_close(dD, ref, t == DType::F32 ? 1e-5 : 2e-2, "D = AB + R");
      expect_close(dR, R, 0.0, "R unchanged");
      gpu->matmul_add(dR, dA, dB, false, tb, dR);
      expect_close(dR, ref, t == DType::F32 ? 1e-5 : 2e-2, "R = AB + R in place");
    }
}

TEST_F(CudaBackendTest, NormRopeSwigluAgainstCpu) {
  const int64_t N = 48, H = 4, d = 32, D = H * d;
  const Tensor x = bf16_rounded(host_random({N, D}, 40, -2, 2));
  const Tensor w = bf16_rounded(host_random({D}, 41, 0.5, 1.5));
  const Tensor dy = bf16_rounded(host_random({N, D}, 42));
  // RMSNorm forward + backward.
  Tensor y = poisoned({N, D}, DType::BF16), rstd = poisoned({N}, DType::F32);
  Tensor dx_x = dev(x, DType::BF16), dx_w = dev(w, DType::BF16);
  gpu->rmsnorm_forward(y, rstd, dx_x, dx_w, 1e-5);
  Tensor ry = Tensor::empty({N, D}, DType::F32), rr = Tensor::empty({N}, DType::F32);
  cpu->rmsnorm_forward(ry, rr, x, w, 1e-5);
  expect_close(y, ry, 2e-2, "rmsnorm y");
  expect_close(rstd, rr, 1e-5, "rmsnorm rstd");
  Tensor dx = poisoned({N, D}, DType::BF16), dw = gpu->empty({D}, DType::F32);
  gpu->zero(dw);
  gpu->rmsnorm_backward(dx, dw, dev(dy, DType::BF16), dx_x, dx_w, dev(rr, DType::F32));
  Tensor rdx = Tensor::empty({N, D}, DType::F32), rdw = Tensor::zeros({D}, DType::F32);
  cpu->rmsnorm_backward(rdx, rdw, dy, x, w, rr);
  expect_close(dx, rdx, 2e-2, "rmsnorm dx");
  expect_close(dw, rdw, 1e-5, "rmsnorm dw");

  // RoPE with pos and inv_freq given as host tensors (uploaded by the backend).
  std::vector<int32_t> pv(N);
  for (int64_t i = 0; i < N; ++i) pv[i] = static_cast<int32_t>(1000 + 37 * i);
  const Tensor pos = host_i32(pv);
  Tensor inv = Tensor::empty({d / 2}, DType::F32);
  for (int64_t i = 0; i < d / 2; ++i) static_cast<float*>(inv.raw())[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / d));
  const Tensor q = x.reshape({N, H, d});
  Tensor out = poisoned({N, H, d}, DType::BF16);
  gpu->rope_forward(out, dev(q, DType::BF16), pos, inv);
  Tensor rout = Tensor::empty({N, H, d}, DType::F32);
  cpu->rope_forward(rout, q, pos, inv);
  expect_close(out, rout, 2e-2, "rope forward");
  Tensor back = poisoned({N, H, d}, DType::BF16);
  gpu->rope_backward(back, dev(q, DType::BF16), dev(pos, DType::I32), dev(inv, DType::F32));
  Tensor rback = Tensor::empty({N, H, d}, DType::F32);
  cpu->rope_backward(rback, q, pos, inv);
  expect_close(back, rback, 2e-2, "rope backward");

  // The gated activations, every one.
  const Tensor g = bf16_rounded(host_random({N, D}, 43, -5, 5)), u = bf16_rounded(host_random({N, D}, 44));
  for (const ActivationNames& a : kActivations) {
    const std::string what = activation_name(a.act);
    Tensor dg = dev(g, DType::BF16), du = dev(u, DType::BF16), h = poisoned({N, D}, DType::BF16);
    gpu->gated_activation_forward(h, dg, du, a.act);
    Tensor rh = Tensor::empty({N, D}, DType::F32);
    cpu->gated_activation_forward(rh, g, u, a.act);
    expect_close(h, rh, 2e-2, (what + " h").c_str());
    Tensor dgate = poisoned({N, D}, DType::BF16), dup = poisoned({N, D}, DType::BF16);
    gpu->gated_activation_backward(dgate, dup, dev(dy, DType::BF16), dg, du, a.act);
    Tensor rdg = Tensor::empty({N, D}, DType::F32), rdu = Tensor::empty({N, D}, DType::F32);
    cpu->gated_activation_backward(rdg, rdu, dy, g, u, a.act);
    expect_close(dgate, rdg, 2e-2, (what + " dgate").c_str());
    expect_close(dup, rdu, 2e-2, (what + " dup").c_str());
  }
}

TEST_F(CudaBackendTest, EmbeddingLossAddAxpyHeadsAgainstCpu) {
  const int64_t V = 300, D = 64, N = 40;
  std::vector<int32_t> ids(N), targets(N);
  for (int64_t i = 0; i < N; ++i) {
    ids[i] = static_cast<int32_t>((i * 37) % V);
    targets[i] = i % 5 == 3 ? -100 : static_cast<int32_t>((i * 11) % V);
  }
  const Tensor table = bf16_rounded(host_random({V, D}, 50));
  Tensor out = poisoned({N, D}, DType::BF16);
  gpu->embedding_forward(out, host_i32(ids), dev(table, DType::BF16));
  Tensor rout = Tensor::empty({N, D}, DType::F32);
  cpu->embedding_forward(rout, host_i32(ids), table);
  expect_close(out, rout, 0.0, "embedding forward");
  const Tensor g = bf16_rounded(host_random({N, D}, 51));
  Tensor dtable = gpu->empty({V, D}, DType::F32);
  gpu->zero(dtable);
  gpu->embedding_backward(dtable, dev(g, DType::BF16), dev(host_i32(ids), DType::I32));
  Tensor rdt = Tensor::zeros({V, D}, DType::F32);
  cpu->embedding_backward(rdt, g, host_i32(ids));
  expect_close(dtable, rdt, 1e-5, "embedding backward");
  std::vector<int32_t> bad = ids;
  bad[7] = static_cast<int32_t>(V);
  try {
    gpu->embedding_forward(out, host_i32(bad), dev(table, DType::BF16));
    ADD_FAILURE() << "an out-of-vocabulary id must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }

  // Cross-entropy, dlogits aliasing logits as the tiled loss uses it.
  const Tensor logits = bf16_rounded(host_random({N, V}, 52, -3, 3));
  Tensor dl = dev(logits, DType::BF16), losses = poisoned({N}, DType::F32);
  gpu->cross_entropy_forward_backward(dl, losses, dl, host_i32(targets), 0.125);
  Tensor rdl = Tensor::empty({N, V}, DType::F32), rloss = Tensor::empty({N}, DType::F32);
  cpu->cross_entropy_forward_backward(rdl, rloss, logits, host_i32(targets), 0.125);
  expect_close(dl, rdl, 2e-2, "dlogits");
  expect_close(losses, rloss, 1e-5, "losses");
  std::vector<int32_t> bad_t = targets;
  bad_t[0] = -5;
  EXPECT_THROW(gpu->cross_entropy_forward_backward(dl, losses, dl, host_i32(bad_t), 1.0), Error);

  // add and axpy (bf16 y += bf16 x, fp32 accumulator += bf16 x).
  const Tensor a = bf16_rounded(host_random({N, D}, 53)), b = bf16_rounded(host_random({N, D}, 54));
  Tensor y = poisoned({N, D}, DType::BF16);
  gpu->add(y, dev(a, DType::BF16), dev(b, DType::BF16));
  Tensor ry = Tensor::empty({N, D}, DType::F32);
  cpu->add(ry, a, b);
  expect_close(y, ry, 2e-2, "add");
  Tensor acc = dev(a, DType::F32);
  gpu->axpy(acc, dev(b, DType::BF16), -2.0);
  Tensor racc = a.clone();
  cpu->axpy(racc, b, -2.0);
  expect_close(acc, racc, 1e-5, "axpy fp32 += bf16");

  // copy_heads.
  const Tensor src = bf16_rounded(host_random({N, 6, 16}, 55)), dst0 = bf16_rounded(host_random({N, 4, 16}, 56));
  for (bool accumulate : {false, true}) {
    Tensor dd = dev(dst0, DType::BF16);
    gpu->copy_heads(dd, 1, dev(src, DType::BF16), 3, 2, accumulate);
    Tensor rd = dst0.clone();
    cpu->copy_heads(rd, 1, src, 3, 2, accumulate);
    expect_close(dd, rd, accumulate ? 2e-2 : 0.0, accumulate ? "copy_heads accumulate" : "copy_heads");
  }
  // Host tensors are rejected by the ops with a clear message.
  try {
    Tensor hy = Tensor::empty({N, D}, DType::BF16);
    gpu->add(hy, a, b);
    ADD_FAILURE() << "host tensors must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device tensors"), std::string::npos) << e.what();
  }
}

// A dispatch check (argument order, shapes, workspace): the kernel's precision is attention_test's job.
// Without a window, and with sliding windows (Mistral) shorter than the documents: the window is
// folded into the first keys and runs our kernels (cuDNN's ragged form reads only the bounds).
class CudaAttentionDispatch : public CudaBackendTest, public ::testing::WithParamInterface<std::array<int64_t, 3>> {};

TEST_P(CudaAttentionDispatch, AgainstCpu) {
  const int64_t S = GetParam()[0], window = GetParam()[1], d = GetParam()[2], H = 4, Hkv = 2;
  const int64_t split = S * 2 / 5;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<int32_t> ds(S);
  for (int64_t i = 0; i < S; ++i) ds[i] = i < split ? 0 : static_cast<int32_t>(split);  // two packed documents
  const Tensor q = bf16_rounded(host_random({S, H, d}, 60)), k = bf16_rounded(host_random({S, Hkv, d}, 61)),
               v = bf16_rounded(host_random({S, Hkv, d}, 62)), dout = bf16_rounded(host_random({S, H, d}, 63));
  Tensor dq_ = dev(q, DType::BF16), dk_ = dev(k, DType::BF16), dv_ = dev(v, DType::BF16);
  Tensor out = poisoned({S, H, d}, DType::BF16), lse = poisoned({H, S}, DType::F32);
  const Documents gdocs = make_documents(*gpu, ds, window), cdocs = make_documents(*cpu, ds, window);
  gpu->attention_forward(out, lse, dq_, dk_, dv_, gdocs, scale);
  Tensor rout = Tensor::empty({S, H, d}, DType::F32), rlse = Tensor::empty({H, S}, DType::F32);
  cpu->attention_forward(rout, rlse, q, k, v, cdocs, scale);
  expect_close(out, rout, 2e-2, "attention out");
  expect_close(lse, rlse, 1e-3, "attention lse");
  Tensor gq = poisoned({S, H, d}, DType::BF16), gk = poisoned({S, Hkv, d}, DType::BF16),
         gv = poisoned({S, Hkv, d}, DType::BF16);
  gpu->attention_backward(gq, gk, gv, dev(dout, DType::BF16), out, lse, dq_, dk_, dv_, gdocs, scale);
  Tensor rq = Tensor::empty({S, H, d}, DType::F32), rk = Tensor::empty({S, Hkv, d}, DType::F32),
         rv = Tensor::empty({S, Hkv, d}, DType::F32);
  cpu->attention_backward(rq, rk, rv, dout, rout, rlse, q, k, v, cdocs, scale);
  expect_close(gq, rq, 5e-2, "attention dq");
  expect_close(gk, rk, 5e-2, "attention dk");
  expect_close(gv, rv, 5e-2, "attention dv");
}

INSTANTIATE_TEST_SUITE_P(Windows, CudaAttentionDispatch,
                         ::testing::Values(std::array<int64_t, 3>{96, 0, 64}, std::array<int64_t, 3>{96, 17, 64},
                                           std::array<int64_t, 3>{700, 150, 128}, std::array<int64_t, 3>{700, 64, 64},
                                           std::array<int64_t, 3>{700, 0, 128}));

// A linear layer's bias (Qwen2): added to every row in bf16 and fp32, its gradient summed over the
// rows in float32 (added to what the gradient held).
TEST_F(CudaBackendTest, BiasAgainstCpu) {
  for (DType dt : {DType::BF16, DType::F32}) {
    auto be = dt == DType::BF16 ? make_cuda_backend(0) : make_cuda_backend(0, DType::F32);
    const int64_t N = 1000, n = 70;
    const Tensor y0 = bf16_rounded(host_random({N, n}, 130)), b = bf16_rounded(host_random({n}, 131)),
                 dy = bf16_rounded(host_random({N, n}, 132)), db0 = host_random({n}, 133);
    auto up = [&](const Tensor& h, DType t) {
      Tensor x = be->empty(h.shape(), t);
      be->copy(x, h);
      return x;
    };
    auto down = [&](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), DType::F32);
      be->copy(h, t);
      return h;
    };
    Tensor y = up(y0, dt), db = up(db0, DType::F32);
    be->bias_add(y, up(b, dt));
    be->bias_backward(db, up(dy, dt));
    Tensor ry = Tensor::empty({N, n}, DType::F32), rdb = Tensor::empty({n}, DType::F32);
    cpu->copy(ry, y0);
    cpu->copy(rdb, db0);
    cpu->bias_add(ry, b);
    cpu->bias_backward(rdb, dy);
    EXPECT_LE(test::rel_error(down(y), ry), dt == DType::BF16 ? 1e-2 : 1e-6) << dtype_name(dt);
    EXPECT_LE(test::rel_error(down(db), rdb), 1e-5) << dtype_name(dt);
  }
}

TEST_F(CudaBackendTest, AllocatorAccountingAndOutOfMemory) {
  Allocator& a = gpu->allocator();
  const size_t before = a.current_bytes();
  {
    Tensor t = gpu->empty({1 << 20}, DType::F32);
    EXPECT_EQ(a.current_bytes(), before + (4u << 20));
    EXPECT_GE(a.peak_bytes(), before + (4u << 20));
  }
  EXPECT_EQ(a.current_bytes(), before);
  try {
    a.allocate(size_t{1} << 50);
    ADD_FAILURE() << "a 1 PiB allocation must fail";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of GPU memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1125899906842624 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("free of"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.current_bytes(), before);
  // The device still works after the failed allocation.
  Tensor t = dev(host_random({16}, 70), DType::F32);
  EXPECT_TRUE(std::isfinite(gpu->sum(t)));
  // Pinned host memory with accounting.
  Allocator& p = gpu->offload_allocator();
  const size_t pb = p.current_bytes();
  void* mem = p.allocate(1 << 20);
  ASSERT_NE(mem, nullptr);
  std::memset(mem, 1, 1 << 20);
  EXPECT_EQ(p.current_bytes(), pb + (1u << 20));
  EXPECT_GE(p.peak_bytes(), pb + (1u << 20));
  p.deallocate(mem, 1 << 20);
  EXPECT_EQ(p.current_bytes(), pb);
}

// A block of 256 MiB and more is huge-page memory faulted in by several threads and registered
// with the driver: it must be pinned (the driver knows it), whole, and copy both ways at any offset.
TEST_F(CudaBackendTest, LargePinnedBlocksAreRegisteredAndCopyBothWays) {
  cuda::PinnedHostAllocator& p = cuda::pinned_host_allocator();
  const size_t before = p.current_bytes();
  const size_t bytes = (size_t{300} << 20) + 123;
  auto* mem = static_cast<unsigned char*>(p.allocate(bytes));
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(p.current_bytes(), before + bytes);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, mem + bytes - 1), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "the block's last byte is not pinned";
  for (size_t i = 0; i < bytes; i += 4093) mem[i] = static_cast<unsigned char>(i * 7 + 1);
  mem[bytes - 1] = 0xA5;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, mem, bytes, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  std::memset(mem, 0, bytes);
  ASSERT_EQ(cudaMemcpy(mem, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < bytes - 1; i += 4093) wrong += mem[i] != static_cast<unsigned char>(i * 7 + 1);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(mem[bytes - 1], 0xA5);
  cudaFree(d);
  p.deallocate(mem, bytes);
  EXPECT_EQ(p.current_bytes(), before);
}

TEST_F(CudaBackendTest, ReservedMemoryServesTensorsWithoutTheDeviceAllocator) {
  Allocator& raw = cuda::device_allocator(0);
  gpu->reserve_memory(size_t{64} << 20, size_t{8} << 20);
  const size_t raw_after_reserve = raw.current_bytes();
  {
    std::vector<Tensor> live;
    for (int i = 0; i < 200; ++i) {
      live.push_back(gpu->empty({(i % 17 + 1) * 3000}, DType::F32));
      if (i % 3 == 0) live.erase(live.begin());
    }
    Tensor pinned = gpu->empty({1 << 18}, DType::F32, Pool::HostCheckpoints);
    EXPECT_EQ(raw.current_bytes(), raw_after_reserve) << "tensors must come from the reserved block";
    // Values survive in arena memory: round trip through a piece.
    const Tensor h = host_random({4096}, 90);
    Tensor d = dev(h, DType::F32);
    EXPECT_EQ(test::rel_error(to_host(d), h), 0.0);
  }
  const std::string report = gpu->memory_reservation_report();
  EXPECT_NE(report.find(", 0 fallbacks"), std::string::npos) << report;
  {
    Tensor big = gpu->empty({int64_t{1} << 26}, DType::F32);  // 256 MiB: more than the block
    EXPECT_GT(raw.current_bytes(), raw_after_reserve) << "a tensor beyond the block falls back to the device";
  }
  EXPECT_NE(gpu->memory_reservation_report().find(", 1 fallbacks"), std::string::npos)
      << gpu->memory_reservation_report();
}

TEST_F(CudaBackendTest, AsyncCopiesAreOrderedAfterTheComputeStreamAndBeforeTheirWaiters) {
  gpu->reserve_memory(size_t{512} << 20, size_t{512} << 20);
  // A large GEMM, then an async copy of its result: the copy must see the finished product.
  const int64_t n = 2048;
  Tensor A = dev(host_random({n, n}, 91), DType::BF16), B = dev(host_random({n, n}, 92), DType::BF16);
  Tensor C = gpu->empty({n, n}, DType::F32);
  gpu->matmul(C, A, B, false, false);
  Tensor pinned = gpu->empty({n, n}, DType::F32, Pool::HostCheckpoints);
  const uint64_t out_id = gpu->copy_async(pinned, C);
  EXPECT_NE(out_id, 0u);
  gpu->wait_transfer(out_id);
  gpu->synchronize();
  EXPECT_EQ(test::rel_error(pinned, to_host(C)), 0.0) << "the copy out ran before the GEMM finished";
  // Back in: a kernel enqueued after wait_transfer sees the copied data.
  Tensor back = poisoned({n, n}, DType::F32);
  const uint64_t in_id = gpu->copy_async(back, pinned);
  gpu->wait_transfer(in_id);
  EXPECT_DOUBLE_EQ(gpu->sum(back), gpu->sum(C));
  EXPECT_THROW(gpu->wait_transfer(in_id), Error) << "each transfer is waited for once";
  // Many in flight at once, each to its own slot.
  std::vector<Tensor> src, dst;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 16; ++i) {
    src.push_back(dev(host_random({65536}, 100 + i), DType::BF16));
    dst.push_back(gpu->empty({65536}, DType::BF16, Pool::HostCheckpoints));
    ids.push_back(gpu->copy_async(dst.back(), src.back()));
  }
  for (uint64_t id : ids) gpu->wait_transfer(id);
  gpu->synchronize();
  for (int i = 0; i < 16; ++i) {
    Tensor h = Tensor::empty({65536}, DType::F32);
    gpu->copy(h, dst[i]);
    EXPECT_EQ(test::rel_error(h, to_host(src[i])), 0.0) << "transfer " << i;
  }
}

TEST_F(CudaBackendTest, Fp32BackendAttentionMatchesCpuTightly) {
  auto gpu32 = make_cuda_backend(0, DType::F32);
  EXPECT_EQ(gpu32->act_dtype(), DType::F32);
  for (const auto [d, window] : {std::pair<int64_t, int64_t>{8, 0}, {64, 0}, {64, 13}}) {
    const int64_t S = 80, H = 4, Hkv = 2;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<int32_t> ds(S);
    for (int64_t i = 0; i < S; ++i) ds[i] = i < 30 ? 0 : 30;
    const Tensor q = host_random({S, H, d}, 110), k = host_random({S, Hkv, d}, 111), v = host_random({S, Hkv, d}, 112),
                 dout = host_random({S, H, d}, 113);
    auto up = [&](const Tensor& h) {
      Tensor t = gpu32->empty(h.shape(), DType::F32);
      gpu32->copy(t, h);
      return t;
    };
    auto down = [&](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), DType::F32);
      gpu32->copy(h, t);
      return h;
    };
    Tensor out = gpu32->empty({S, H, d}, DType::F32), lse = gpu32->empty({H, S}, DType::F32);
    const Tensor gq = up(q), gk = up(k), gv = up(v);
    const Documents gdocs = make_documents(*gpu32, ds, window), cdocs = make_documents(*cpu, ds, window);
    gpu32->attention_forward(out, lse, gq, gk, gv, gdocs, scale);
    Tensor rout = Tensor::empty({S, H, d}, DType::F32), rlse = Tensor::empty({H, S}, DType::F32);
    cpu->attention_forward(rout, rlse, q, k, v, cdocs, scale);
    EXPECT_LE(test::rel_error(down(out), rout), 1e-5) << "d " << d;
    EXPECT_LE(test::rel_error(down(lse), rlse), 1e-5) << "d " << d;
    Tensor dq = gpu32->empty({S, H, d}, DType::F32), dk = gpu32->empty({S, Hkv, d}, DType::F32),
           dv = gpu32->empty({S, Hkv, d}, DType::F32);
    gpu32->attention_backward(dq, dk, dv, up(dout), out, lse, gq, gk, gv, gdocs, scale);
    Tensor rq = Tensor::empty({S, H, d}, DType::F32), rk = Tensor::empty({S, Hkv, d}, DType::F32),
           rv = Tensor::empty({S, Hkv, d}, DType::F32);
    cpu->attention_backward(rq, rk, rv, dout, rout, rlse, q, k, v, cdocs, scale);
    EXPECT_LE(test::rel_error(down(dq), rq), 1e-5) << "d " << d;
    EXPECT_LE(test::rel_error(down(dk), rk), 1e-5) << "d " << d;
    EXPECT_LE(test::rel_error(down(dv), rv), 1e-5) << "d " << d;
  }
}

TEST_F(CudaBackendTest, OptimizerExtras) {
  auto* cb = dynamic_cast<cuda::CudaBackend*>(gpu.get());
  ASSERT_NE(cb, nullptr);
  const int64_t n = 1000;
  const Tensor g = host_random({n}, 80), p0 = host_random({n}, 81);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(static_cast<const float*>(g.raw())[i]) * static_cast<const float*>(g.raw())[i];
  Tensor dg = dev(g, DType::F32), dgb = dev(g, DType::BF16);
  const Tensor gr = bf16_rounded(g);
  double sqb = 0;
  for (int64_t i = 0; i < n; ++i) sqb += static_cast<double>(static_cast<const float*>(gr.raw())[i]) * static_cast<const float*>(gr.raw())[i];
  EXPECT_NEAR(cb->sum_squares_all({&dg, &dgb}), sq + sqb, 1e-9 * (sq + sqb));
  EXPECT_NEAR(gpu->sum_squares(dgb), sqb, 1e-9 * sqb);
  cb->scale(dg, 0.5);
  EXPECT_NEAR(gpu->sum_squares(dg), sq * 0.25, 1e-9 * sq);
  Tensor master = dev(p0, DType::F32), m = gpu->empty({n}, DType::F32), v = gpu->empty({n}, DType::F32);
  Tensor w = poisoned({n}, DType::BF16);
  gpu->zero(m);
  gpu->zero(v);
  AdamWParams a;
  a.lr = 0.1;
  a.step = 1;
  gpu->adamw_step(master, m, v, w, dg, a);
  // Step 1 from zero state, no weight decay: the bias-corrected moments are g and g^2, so the
  // update is -lr * g / (|g| + eps), about -lr * sign(g). dg holds 0.5 g after the scale above.
  const Tensor hm = to_host(master), hw = to_host(w);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = 0.5 * static_cast<const float*>(g.raw())[i], pi = static_cast<const float*>(p0.raw())[i];
    const double want = pi - 0.1 * gi / (std::fabs(gi) + a.eps);
    ASSERT_NEAR(static_cast<const float*>(hm.raw())[i], want, 1e-5) << i;
    ASSERT_EQ(static_cast<const float*>(hw.raw())[i], bf16_to_float(float_to_bf16(static_cast<const float*>(hm.raw())[i]))) << i;
  }
}

// A bfloat16 gradient buffer (--grad-dtype bf16): AdamW reads it into fp32, so the update
// equals the one from an fp32 gradient holding the same values, bit for bit, on the wide path
// (aligned) and the scalar one (an odd offset); the CPU backend's bf16 path agrees with it.
TEST_F(CudaBackendTest, AdamWReadsBf16Gradients) {
  const int64_t n = 1001;
  const Tensor g = bf16_rounded(host_random({n}, 90)), p0 = host_random({n}, 91);
  for (int64_t offset : {0, 1}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    const int64_t k = n - offset;
    Tensor gf = dev(g, DType::F32), gb = dev(g, DType::BF16);
    Tensor master_f = dev(p0, DType::F32), master_b = dev(p0, DType::F32);
    Tensor mf = gpu->empty({n}, DType::F32), vf = gpu->empty({n}, DType::F32), mb = gpu->empty({n}, DType::F32),
           vb = gpu->empty({n}, DType::F32);
    for (Tensor* t : {&mf, &vf, &mb, &vb}) gpu->zero(*t);
    Tensor wf = gpu->empty({n}, DType::BF16), wb = gpu->empty({n}, DType::BF16);
    AdamWParams a;
    a.lr = 0.01;
    a.weight_decay = 0.1;
    a.grad_scale = 0.7;
    for (int64_t step = 1; step <= 2; ++step) {
      a.step = step;
      const auto part = [&](Tensor& t) { return t.slice(offset, n); };
      Tensor pf = part(master_f), pb = part(master_b), m1 = part(mf), v1 = part(vf), m2 = part(mb), v2 = part(vb),
             w1 = part(wf), w2 = part(wb), g1 = part(gf), g2 = part(gb);
      gpu->adamw_step(pf, m1, v1, w1, g1, a);
      gpu->adamw_step(pb, m2, v2, w2, g2, a);
    }
    const Tensor hf = to_host(master_f), hb = to_host(master_b);
    EXPECT_EQ(std::memcmp(hf.raw(), hb.raw(), hf.nbytes()), 0) << "bf16 gradients differ from their fp32 values";
    // The CPU backend's bf16-gradient path on the same values (one step from the same state).
    Backend* host = cpu.get();
    Tensor cm = host->empty({k}, DType::F32), cv = host->empty({k}, DType::F32), cw = host->empty({k}, DType::F32);
    Tensor cp = host->empty({k}, DType::F32), cg = host->empty({k}, DType::BF16);
    host->copy(cp, p0.slice(offset, n));
    host->copy(cg, g.slice(offset, n));
    host->zero(cm);
    host->zero(cv);
    Tensor gm = dev(p0, DType::F32), gmm = gpu->empty({n}, DType::F32), gvv = gpu->empty({n}, DType::F32);
    gpu->zero(gmm);
    gpu->zero(gvv);
    Tensor gw = gpu->empty({n}, DType::F32);
    a.step = 1;
    Tensor s1 = gm.slice(offset, n), s2 = gmm.slice(offset, n), s3 = gvv.slice(offset, n), s4 = gw.slice(offset, n),
           s5 = gb.slice(offset, n);
    gpu->adamw_step(s1, s2, s3, s4, s5, a);
    host->adamw_step(cp, cm, cv, cw, cg, a);
    EXPECT_LE(test::rel_error(to_host(gm).slice(offset, n), cp), 1e-6);
  }
}

}  // namespace
}  // namespace ulysses
