// add, axpy, casts, scale, copy_heads, the float64 reductions and AdamW on the GPU, against the
// CPU twins or a float64 host reference; and the vectorised paths of add, SwiGLU and RoPE against
// their scalar paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/adamw.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/heads.h"
#include "backend/cuda/reduce.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/gated_activation.h"
#include "core/counter_uniform.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

using bf16 = __nv_bfloat16;
using cuda_test::DeviceBuffer;
using cuda_test::download;
using cuda_test::Elem;
using cuda_test::kF32Tol;
using cuda_test::rounded;
using cuda_test::upload;
using test::random_vector_f;

template <class T>
class CudaElementwise : public cuda_test::CudaTest {};
using ElemTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaElementwise, ElemTypes);

class CudaMisc : public cuda_test::CudaTest {};

TYPED_TEST(CudaElementwise, AddAndAxpy) {
  using T = TypeParam;
  const int64_t n = 10007;
  const auto a = rounded<T>(random_vector_f(n, 1));
  const auto b = rounded<T>(random_vector_f(n, 2));
  DeviceBuffer<T> d_a(n), d_b(n), d_y(n);
  upload(d_a, a);
  upload(d_b, b);
  d_y.poison();
  cuda::add(d_y.get(), d_a.get(), d_b.get(), n, this->stream);
  this->sync();
  std::vector<float> ref(n);
  cpu::add(ref.data(), a.data(), b.data(), n);
  const auto y = download(d_y);
  EXPECT_CLOSE(y, ref, Elem<T>::tol);

  // In place: a += b via y aliasing a.
  cuda::add(d_a.get(), d_a.get(), d_b.get(), n, this->stream);
  this->sync();
  const auto y2 = download(d_a);
  EXPECT_CLOSE(y2, ref, Elem<T>::tol);

  // axpy, same type: y = b; y += -0.75 x (x = a's original values).
  upload(d_a, a);
  upload(d_y, b);
  cuda::axpy(d_y.get(), static_cast<const T*>(d_a.get()), -0.75, n, this->stream);
  this->sync();
  std::vector<float> ref_axpy = b;
  cpu::axpy(ref_axpy.data(), a.data(), -0.75, n);
  const auto y3 = download(d_y);
  EXPECT_CLOSE(y3, ref_axpy, Elem<T>::tol);
}

// The random initialisation on the device: bit for bit the host generator's values, rounded to T the
// way an upload of them would round (nearest even), whole and from a shard's offset.
TYPED_TEST(CudaElementwise, InitUniformMatchesTheHostGenerator) {
  using T = TypeParam;
  const int64_t n = 100003, first = int64_t{1} << 33;
  const float bound = 0.02f * std::sqrt(3.0f);
  DeviceBuffer<T> d(n);
  d.poison();
  cuda::init_uniform(d.get(), 123, 17, first, bound, n, this->stream);
  this->sync();
  std::vector<float> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = counter_uniform(123, 17, static_cast<uint64_t>(first + i), bound);
  ref = rounded<T>(ref);
  const auto got = download(d);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &ref[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "of " << n << " elements";
}

TEST_F(CudaMisc, AxpyMixedTypes) {
  const int64_t n = 4099;
  const auto x = rounded<bf16>(random_vector_f(n, 3));
  const auto y0 = random_vector_f(n, 4);
  std::vector<float> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<float>(static_cast<double>(y0[i]) + 0.5 * x[i]);
  // fp32 accumulator += bf16 gradient.
  DeviceBuffer<bf16> d_x(n);
  DeviceBuffer<float> d_y(n);
  upload(d_x, x);
  upload(d_y, y0);
  cuda::axpy(d_y.get(), static_cast<const bf16*>(d_x.get()), 0.5, n, stream);
  sync();
  const auto y = download(d_y);
  EXPECT_CLOSE(y, ref, kF32Tol);
  // bf16 y += fp32 x.
  const auto yb0 = rounded<bf16>(y0);
  std::vector<float> ref_b(n);
  for (int64_t i = 0; i < n; ++i) ref_b[i] = yb0[i] + 0.5f * x[i];
  DeviceBuffer<bf16> d_yb(n);
  DeviceBuffer<float> d_xf(n);
  upload(d_yb, yb0);
  upload(d_xf, x);
  cuda::axpy(d_yb.get(), static_cast<const float*>(d_xf.get()), 0.5, n, stream);
  sync();
  const auto yb = download(d_yb);
  EXPECT_CLOSE(yb, ref_b, Elem<bf16>::tol);
}

// The device cast must round exactly like core/dtype.h's float_to_bf16 (nearest even).
TEST_F(CudaMisc, CastsAreBitExact) {
  std::vector<float> v = random_vector_f(5000, 5, -1000, 1000);
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* tie: rounds to 1 */, 1.01171875f /* tie: up */,
                            3.0e38f, -3.0e38f, 1e-40f, INFINITY, -INFINITY, 65504.0f, 1.0f / 3.0f};
  v.insert(v.end(), std::begin(specials), std::end(specials));
  const int64_t n = static_cast<int64_t>(v.size());
  DeviceBuffer<float> d_f(n), d_back(n);
  DeviceBuffer<bf16> d_b(n);
  upload(d_f, v);
  d_b.poison();
  d_back.poison();
  cuda::cast(d_b.get(), static_cast<const float*>(d_f.get()), n, stream);
  cuda::cast(d_back.get(), static_cast<const bf16*>(d_b.get()), n, stream);
  sync();
  std::vector<uint16_t> raw(n);
  CUDA_CHECK(cudaMemcpy(raw.data(), d_b.get(), n * 2, cudaMemcpyDeviceToHost));
  const auto back = download(d_back);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(raw[i], float_to_bf16(v[i])) << "element " << i << " = " << v[i];
    const float want = bf16_to_float(float_to_bf16(v[i]));
    ASSERT_EQ(std::memcmp(&back[i], &want, 4), 0) << "element " << i << " = " << v[i];
  }
}

TYPED_TEST(CudaElementwise, Scale) {
  using T = TypeParam;
  const int64_t n = 3001;
  const auto x = rounded<T>(random_vector_f(n, 6));
  DeviceBuffer<T> d_x(n);
  upload(d_x, x);
  cuda::scale(d_x.get(), 0.3, n, this->stream);
  this->sync();
  std::vector<float> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = x[i] * 0.3f;
  const auto y = download(d_x);
  EXPECT_CLOSE(y, ref, Elem<T>::tol);
}

TYPED_TEST(CudaElementwise, CopyHeads) {
  using T = TypeParam;
  const int64_t N = 5, Hs = 6, Hd = 4, d = 32, src_head0 = 2, dst_head0 = 1, n_heads = 3;
  const auto src = rounded<T>(random_vector_f(N * Hs * d, 7));
  const auto dst0 = rounded<T>(random_vector_f(N * Hd * d, 8));
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "copy");
    DeviceBuffer<T> d_src(N * Hs * d), d_dst(N * Hd * d);
    upload(d_src, src);
    upload(d_dst, dst0);
    cuda::copy_heads(d_dst.get(), Hd, dst_head0, static_cast<const T*>(d_src.get()), Hs, src_head0, n_heads, N, d,
                     accumulate, this->stream);
    this->sync();
    std::vector<float> ref = dst0;
    cpu::copy_heads(ref.data(), Hd, dst_head0, src.data(), Hs, src_head0, n_heads, N, d, accumulate);
    const auto out = download(d_dst);
    EXPECT_CLOSE(out, ref, accumulate ? Elem<T>::tol : 0.0);
  }
}

TEST_F(CudaMisc, SumAndSumOfSquares) {
  const int64_t n = (1 << 20) + 3;
  const auto xf = random_vector_f(n, 9, -1, 2);
  const auto xb = rounded<bf16>(xf);
  std::vector<int32_t> xi(n);
  for (int64_t i = 0; i < n; ++i) xi[i] = static_cast<int32_t>(i % 1000) - 300;
  double want_f = 0.5, want_b = 0.5, want_i = 0.5, want_sq_f = 0.25, want_sq_b = 0.25;
  for (int64_t i = 0; i < n; ++i) {
    want_f += xf[i];
    want_b += xb[i];
    want_i += xi[i];
    want_sq_f += static_cast<double>(xf[i]) * xf[i];
    want_sq_b += static_cast<double>(xb[i]) * xb[i];
  }
  DeviceBuffer<float> d_f(n);
  DeviceBuffer<bf16> d_b(n);
  DeviceBuffer<int32_t> d_i(n);
  upload(d_f, xf);
  upload(d_b, xb);
  cuda_test::upload_i32(d_i, xi);
  DeviceBuffer<double> acc(5);
  const double init[5] = {0.5, 0.5, 0.5, 0.25, 0.25};  // the reductions accumulate
  CUDA_CHECK(cudaMemcpy(acc.get(), init, sizeof(init), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
  cuda::sum_accumulate(acc.get() + 0, static_cast<const float*>(d_f.get()), n, stream);
  cuda::sum_accumulate(acc.get() + 1, static_cast<const bf16*>(d_b.get()), n, stream);
  cuda::sum_accumulate(acc.get() + 2, static_cast<const int32_t*>(d_i.get()), n, stream);
  cuda::sum_squares_accumulate(acc.get() + 3, static_cast<const float*>(d_f.get()), n, stream);
  cuda::sum_squares_accumulate(acc.get() + 4, static_cast<const bf16*>(d_b.get()), n, stream);
  sync();
  double got[5];
  CUDA_CHECK(cudaMemcpy(got, acc.get(), sizeof(got), cudaMemcpyDeviceToHost));
  const double want[5] = {want_f, want_b, want_i, want_sq_f, want_sq_b};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * std::fabs(want[i])) << "reduction " << i;
}

struct AdamWArgs {
  double lr = 0.05;  // large steps, so that the update is well above fp32 rounding of the weights
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  int64_t step = 1;
  double grad_scale = 1.0;
};

// float64 host reference of the AdamW step (backend/cuda/adamw.h).
void adamw_reference(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                     const std::vector<float>& g, const AdamWArgs& a) {
  const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  for (size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] * a.grad_scale;
    m[i] = a.beta1 * m[i] + (1 - a.beta1) * gi;
    v[i] = a.beta2 * v[i] + (1 - a.beta2) * gi * gi;
    p[i] = p[i] * (1 - a.lr * a.weight_decay) - a.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + a.eps);
  }
}

// Three steps against the CPU twin (fp32) and a float64 reference, with each weight-copy form.
TEST_F(CudaMisc, AdamWMatchesCpuTwin) {
  const int64_t n = 4099;
  std::vector<float> p = random_vector_f(n, 10), m(n, 0.0f), v(n, 0.0f);
  DeviceBuffer<float> d_p(n), d_m(n), d_v(n), d_g(n), d_wf(n);
  DeviceBuffer<bf16> d_wb(n);
  upload(d_p, p);
  upload(d_m, m);
  upload(d_v, v);
  AdamWArgs a;
  for (int step = 1; step <= 4; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    a.step = step;
    a.grad_scale = step == 2 ? 0.5 : 1.0;
    const auto g = random_vector_f(n, 100 + step);
    upload(d_g, g);
    // CPU twin and float64 reference from the same starting state.
    std::vector<float> cp = p, cm = m, cv = v, cw(n);
    cpu::adamw_step(cp.data(), cm.data(), cv.data(), cw.data(), g.data(), n, a.lr, a.beta1, a.beta2, a.eps,
                    a.weight_decay, a.step, a.grad_scale);
    std::vector<double> rp(p.begin(), p.end()), rm(m.begin(), m.end()), rv(v.begin(), v.end());
    adamw_reference(rp, rm, rv, g, a);
    d_wb.poison();
    d_wf.poison();
    if (step == 1)
      cuda::adamw_step<bf16>(d_p.get(), d_m.get(), d_v.get(), d_wb.get(), d_g.get(), n, a.lr, a.beta1, a.beta2, a.eps,
                             a.weight_decay, a.step, a.grad_scale, stream);
    else if (step == 2)
      cuda::adamw_step<float>(d_p.get(), d_m.get(), d_v.get(), d_wf.get(), d_g.get(), n, a.lr, a.beta1, a.beta2,
                              a.eps, a.weight_decay, a.step, a.grad_scale, stream);
    else if (step == 3)  // weight aliasing master, as the CPU backend uses it
      cuda::adamw_step<float>(d_p.get(), d_m.get(), d_v.get(), d_p.get(), d_g.get(), n, a.lr, a.beta1, a.beta2,
                              a.eps, a.weight_decay, a.step, a.grad_scale, stream);
    else
      cuda::adamw_step<bf16>(d_p.get(), d_m.get(), d_v.get(), nullptr, d_g.get(), n, a.lr, a.beta1, a.beta2, a.eps,
                             a.weight_decay, a.step, a.grad_scale, stream);
    sync();
    const auto gp = download(d_p), gm = download(d_m), gv = download(d_v);
    EXPECT_CLOSE(gp, cp, kF32Tol);
    EXPECT_CLOSE(gm, cm, kF32Tol);
    EXPECT_CLOSE(gv, cv, kF32Tol);
    // The update itself (not just the weights), against the twin and against float64.
    std::vector<float> delta(n), twin_delta(n), ref_delta(n);
    for (int64_t i = 0; i < n; ++i) {
      delta[i] = gp[i] - p[i];
      twin_delta[i] = cp[i] - p[i];
      ref_delta[i] = static_cast<float>(rp[i] - p[i]);
    }
    EXPECT_CLOSE(delta, twin_delta, 1e-4);
    EXPECT_CLOSE(delta, ref_delta, 1e-4);
    if (step == 1) {
      const auto wb = download(d_wb);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(wb[i], bf16_to_float(float_to_bf16(gp[i]))) << i;
    } else if (step == 2) {
      const auto wf = download(d_wf);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(wf[i], gp[i]) << i;
    }
    // Continue from the GPU's state so that differences do not compound over the steps.
    p = gp;
    m = gm;
    v = gv;
  }
}

// add, SwiGLU and RoPE read 16-byte packs when every pointer is 16-byte aligned and fall back to
// element-wise loads otherwise; both paths do the same arithmetic per element, so their results
// are equal bit for bit. The misaligned run starts one element into each buffer; n leaves a tail.
TYPED_TEST(CudaElementwise, VectorisedPathsEqualScalarPaths) {
  using T = TypeParam;
  const int64_t n = 8 * 257 + 5;
  const auto a = rounded<T>(random_vector_f(n + 1, 7, -6, 6));
  const auto b = rounded<T>(random_vector_f(n + 1, 8, -2, 2));
  const auto c = rounded<T>(random_vector_f(n + 1, 9));
  DeviceBuffer<T> d_a(n + 1), d_b(n + 1), d_c(n + 1), d_y(n + 1), d_z(n + 1);
  // The inputs' first n values start at element off of each buffer.
  auto upload_at = [](DeviceBuffer<T>& d, std::vector<float> h, int64_t off) {
    h.insert(h.begin(), static_cast<size_t>(off), 0.f);
    h.resize(d.size());
    upload(d, h);
  };
  auto run_both = [&](const char* what, int64_t written, auto&& op) {
    SCOPED_TRACE(what);
    std::vector<std::vector<float>> outs;
    for (int64_t off : {0, 1}) {
      upload_at(d_a, a, off);
      upload_at(d_b, b, off);
      upload_at(d_c, c, off);
      d_y.poison();
      d_z.poison();
      op(off);
      this->sync();
      std::vector<float> y = download(d_y), z = download(d_z);
      y.erase(y.begin(), y.begin() + off);
      z.erase(z.begin(), z.begin() + off);
      y.resize(static_cast<size_t>(n));
      z.resize(static_cast<size_t>(n));
      y.insert(y.end(), z.begin(), z.end());
      outs.push_back(y);
    }
    ASSERT_EQ(outs[0].size(), outs[1].size());
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)));
    for (size_t i = 0; i < static_cast<size_t>(written); ++i) ASSERT_FALSE(std::isnan(outs[0][i])) << i;
  };
  run_both("add", n, [&](int64_t o) { cuda::add(d_y.get() + o, d_a.get() + o, d_b.get() + o, n, this->stream); });
  for (const ActivationNames& a : kActivations) {
    const std::string name = activation_name(a.act);
    run_both((name + " forward").c_str(), n, [&](int64_t o) {
      cuda::gated_activation_forward(d_y.get() + o, d_a.get() + o, d_b.get() + o, n, a.act, this->stream);
    });
    run_both((name + " backward").c_str(), n, [&](int64_t o) {
      cuda::gated_activation_backward(d_y.get() + o, d_z.get() + o, d_c.get() + o, d_a.get() + o, d_b.get() + o, n,
                                      a.act, this->stream);
    });
  }
  // RoPE: rows of H heads of d; the vectorised form needs d / 2 a multiple of the pack.
  const int64_t H = 2, d = 64, N = n / (H * d);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i * 977 + 3);
  std::vector<float> inv_freq(d / 2);
  for (int64_t i = 0; i < d / 2; ++i)
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / d));
  DeviceBuffer<int32_t> d_pos(N);
  DeviceBuffer<float> d_freq(d / 2);
  CUDA_CHECK(cudaMemcpy(d_pos.get(), pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_freq.get(), inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice));
  for (bool forward : {true, false})
    run_both(forward ? "rope_forward" : "rope_backward", N * H * d, [&](int64_t o) {
      CUDA_CHECK(cudaMemcpy(d_y.get() + o, d_a.get() + o, static_cast<size_t>(N * H * d) * sizeof(T),
                            cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaDeviceSynchronize());
      if (forward) cuda::rope_forward(d_y.get() + o, d_y.get() + o, d_pos.get(), d_freq.get(), N, H, d, this->stream);
      else cuda::rope_backward(d_y.get() + o, d_y.get() + o, d_pos.get(), d_freq.get(), N, H, d, this->stream);
    });
}

}  // namespace
}  // namespace ulysses
