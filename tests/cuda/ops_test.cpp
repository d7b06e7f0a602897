// The CUDA kernels against their CPU twins (backend/cpu/ops.h) on random
// inputs, in float32 and bfloat16 storage. Outputs are poisoned with NaN
// before each run; bf16 runs feed the CPU op the bf16-rounded inputs in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/cross_entropy.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/gated_activation.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::download;
using cuda_test::Elem;
using cuda_test::kF32Tol;
using cuda_test::rounded;
using cuda_test::upload;
using cuda_test::upload_i32;
using test::random_vector_f;

template <class T>
class CudaOps : public cuda_test::CudaTest {};
using ElemTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaOps, ElemTypes);

std::vector<int32_t> random_ids(int64_t n, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(hi));
  return v;
}

TYPED_TEST(CudaOps, EmbeddingForwardBackward) {
  using T = TypeParam;
  const int64_t V = 50, D = 96, N = 200;
  std::vector<int32_t> ids = random_ids(N, V, 1);
  ids[0] = 0;
  ids[1] = V - 1;
  const auto table = rounded<T>(random_vector_f(V * D, 2));
  DeviceBuffer<T> d_table(V * D);
  upload(d_table, table);
  DeviceBuffer<int32_t> d_ids(N);
  upload_i32(d_ids, ids);
  DeviceBuffer<T> d_out(N * D);
  d_out.poison();
  cuda::embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, V, D, this->stream);
  this->sync();
  std::vector<float> ref(N * D);
  cpu::embedding_forward(ref.data(), ids.data(), table.data(), N, D);
  const auto out = download(d_out);
  EXPECT_CLOSE(out, ref, 0.0);  // a gather: exact

  // Backward accumulates into an fp32 table that already holds values; repeated ids exercise the atomics.
  const auto dout = rounded<T>(random_vector_f(N * D, 3));
  const auto acc0 = random_vector_f(V * D, 4);
  DeviceBuffer<T> d_dout(N * D);
  upload(d_dout, dout);
  DeviceBuffer<float> d_dtable(V * D);
  upload(d_dtable, acc0);
  cuda::embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, V, D, this->stream);
  this->sync();
  std::vector<float> ref_dtable = acc0;
  cpu::embedding_backward(ref_dtable.data(), dout.data(), ids.data(), N, D);
  const auto dtable = download(d_dtable);
  EXPECT_CLOSE(dtable, ref_dtable, kF32Tol);

  // Ids reach the device validated (no read-back in the step); a bad one all the same stays in
  // bounds: a NaN row forward, nothing added backward.
  std::vector<int32_t> bad = ids;
  bad[3] = static_cast<int32_t>(V);
  bad[5] = -1;
  upload_i32(d_ids, bad);
  d_out.poison();
  cuda::embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, V, D, this->stream);
  upload(d_dtable, acc0);
  cuda::embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, V, D, this->stream);
  this->sync();
  const auto out_bad = download(d_out), dtable_bad = download(d_dtable);
  EXPECT_EQ(cuda_test::count_nan(out_bad), static_cast<size_t>(2 * D)) << "the two bad rows, and only they, are NaN";
  std::vector<int32_t> good_ids;
  std::vector<float> good_dout;
  for (int64_t i = 0; i < N; ++i)
    if (i != 3 && i != 5) {
      good_ids.push_back(bad[i]);
      good_dout.insert(good_dout.end(), dout.begin() + i * D, dout.begin() + (i + 1) * D);
    }
  std::vector<float> ref_bad = acc0;
  cpu::embedding_backward(ref_bad.data(), good_dout.data(), good_ids.data(), N - 2, D);
  EXPECT_CLOSE(dtable_bad, ref_bad, kF32Tol);
}

TYPED_TEST(CudaOps, RmsnormForward) {
  using T = TypeParam;
  const double eps = 1e-5;
  for (auto [N, D] : {std::pair<int64_t, int64_t>{37, 1000}, {5, 4096}, {3, 7}, {2, 20000}, {5, 1004}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " D=" << D);
    const auto x = rounded<T>(random_vector_f(N * D, 10, -2, 2));
    const auto w = rounded<T>(random_vector_f(D, 11, 0.5, 1.5));
    DeviceBuffer<T> d_x(N * D), d_w(D), d_y(N * D);
    DeviceBuffer<float> d_rstd(N);
    upload(d_x, x);
    upload(d_w, w);
    d_y.poison();
    d_rstd.poison();
    cuda::rmsnorm_forward(d_y.get(), d_rstd.get(), d_x.get(), d_w.get(), N, D, eps, this->stream);
    this->sync();
    std::vector<float> ref_y(N * D), ref_rstd(N);
    cpu::rmsnorm_forward(ref_y.data(), ref_rstd.data(), x.data(), w.data(), N, D, eps);
    const auto y = download(d_y);
    const auto rstd = download(d_rstd);
    EXPECT_CLOSE(y, ref_y, Elem<T>::tol);
    EXPECT_CLOSE(rstd, ref_rstd, kF32Tol);

    // In place: y aliases x.
    cuda::rmsnorm_forward(d_x.get(), d_rstd.get(), d_x.get(), d_w.get(), N, D, eps, this->stream);
    this->sync();
    const auto y_inplace = download(d_x);
    EXPECT_CLOSE(y_inplace, ref_y, Elem<T>::tol);
  }
}

TYPED_TEST(CudaOps, RmsnormBackward) {
  using T = TypeParam;
  const double eps = 1e-5;
  for (auto [N, D] : {std::pair<int64_t, int64_t>{300, 1000}, {1, 4096}, {70, 33}, {3000, 2048}, {4, 20000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " D=" << D);
    const auto x = rounded<T>(random_vector_f(N * D, 20, -2, 2));
    const auto w = rounded<T>(random_vector_f(D, 21, 0.5, 1.5));
    const auto dy = rounded<T>(random_vector_f(N * D, 22));
    const auto dw0 = random_vector_f(D, 23);
    std::vector<float> y_unused(N * D), rstd(N);
    cpu::rmsnorm_forward(y_unused.data(), rstd.data(), x.data(), w.data(), N, D, eps);

    std::vector<float> ref_dx(N * D), ref_dw = dw0;
    cpu::rmsnorm_backward(ref_dx.data(), ref_dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D);

    DeviceBuffer<T> d_x(N * D), d_w(D), d_dy(N * D), d_dx(N * D);
    DeviceBuffer<float> d_rstd(N), d_dw(D);
    upload(d_x, x);
    upload(d_w, w);
    upload(d_dy, dy);
    upload(d_rstd, rstd);
    upload(d_dw, dw0);
    d_dx.poison();
    cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), N, D,
                           this->stream);
    this->sync();
    const auto dx = download(d_dx);
    const auto dw = download(d_dw);
    EXPECT_CLOSE(dx, ref_dx, Elem<T>::tol);
    EXPECT_CLOSE(dw, ref_dw, kF32Tol);

    // dx aliasing dy: dw must still see the original dy.
    upload(d_dw, dw0);
    cuda::rmsnorm_backward(d_dy.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), N, D,
                           this->stream);
    this->sync();
    const auto dx_alias = download(d_dy);
    const auto dw_alias = download(d_dw);
    EXPECT_CLOSE(dx_alias, ref_dx, Elem<T>::tol);
    EXPECT_CLOSE(dw_alias, ref_dw, kF32Tol);

    // accumulate_dx: dx += the gradient (the residual's gradient already in dx).
    const auto residual = rounded<T>(random_vector_f(N * D, 24));
    std::vector<float> ref_acc(N * D);
    for (int64_t i = 0; i < N * D; ++i) ref_acc[i] = residual[i] + ref_dx[i];
    upload(d_dy, dy);
    upload(d_dx, residual);
    cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), N, D,
                           this->stream, true);
    this->sync();
    EXPECT_CLOSE(download(d_dx), ref_acc, Elem<T>::tol);
  }
}

TYPED_TEST(CudaOps, RopeForwardBackward) {
  using T = TypeParam;
  const int64_t N = 33, H = 4, d = 64;
  const auto x = rounded<T>(random_vector_f(N * H * d, 30));
  std::vector<int32_t> pos = random_ids(N, 1 << 20, 31);  // long-sequence positions: large angles
  pos[0] = 0;
  std::vector<float> inv_freq(d / 2);
  for (int64_t i = 0; i < d / 2; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / static_cast<double>(d)));
  DeviceBuffer<T> d_x(N * H * d), d_out(N * H * d);
  DeviceBuffer<int32_t> d_pos(N);
  DeviceBuffer<float> d_freq(d / 2);
  upload(d_x, x);
  upload_i32(d_pos, pos);
  upload(d_freq, inv_freq);

  for (int sign : {+1, -1}) {
    SCOPED_TRACE(sign > 0 ? "forward" : "backward");
    std::vector<float> ref(N * H * d);
    if (sign > 0) cpu::rope_forward(ref.data(), x.data(), pos.data(), inv_freq.data(), N, H, d);
    else cpu::rope_backward(ref.data(), x.data(), pos.data(), inv_freq.data(), N, H, d);
    d_out.poison();
    if (sign > 0) cuda::rope_forward(d_out.get(), d_x.get(), d_pos.get(), d_freq.get(), N, H, d, this->stream);
    else cuda::rope_backward(d_out.get(), d_x.get(), d_pos.get(), d_freq.get(), N, H, d, this->stream);
    this->sync();
    const auto out = download(d_out);
    EXPECT_CLOSE(out, ref, Elem<T>::tol);

    // In place (out aliases x).
    DeviceBuffer<T> d_inplace(N * H * d);
    upload(d_inplace, x);
    if (sign > 0)
      cuda::rope_forward(d_inplace.get(), d_inplace.get(), d_pos.get(), d_freq.get(), N, H, d, this->stream);
    else
      cuda::rope_backward(d_inplace.get(), d_inplace.get(), d_pos.get(), d_freq.get(), N, H, d, this->stream);
    this->sync();
    const auto inplace = download(d_inplace);
    EXPECT_CLOSE(inplace, ref, Elem<T>::tol);
  }
}

TYPED_TEST(CudaOps, GatedActivationsForwardBackward) {
  using T = TypeParam;
  const int64_t N = 17, F = 1000;
  for (const ActivationNames& a : kActivations) {
    SCOPED_TRACE(activation_name(a.act));
    const auto gate = rounded<T>(random_vector_f(N * F, 40, -6, 6));
    const auto up = rounded<T>(random_vector_f(N * F, 41, -2, 2));
    const auto dh = rounded<T>(random_vector_f(N * F, 42));
    DeviceBuffer<T> d_gate(N * F), d_up(N * F), d_dh(N * F), d_h(N * F), d_dgate(N * F), d_dup(N * F);
    upload(d_gate, gate);
    upload(d_up, up);
    upload(d_dh, dh);
    d_h.poison();
    d_dgate.poison();
    d_dup.poison();
    cuda::gated_activation_forward(d_h.get(), d_gate.get(), d_up.get(), N * F, a.act, this->stream);
    cuda::gated_activation_backward(d_dgate.get(), d_dup.get(), d_dh.get(), d_gate.get(), d_up.get(), N * F, a.act,
                                    this->stream);
    this->sync();
    std::vector<float> ref_h(N * F), ref_dgate(N * F), ref_dup(N * F);
    cpu::gated_activation_forward(ref_h.data(), gate.data(), up.data(), N * F, a.act);
    cpu::gated_activation_backward(ref_dgate.data(), ref_dup.data(), dh.data(), gate.data(), up.data(), N * F, a.act);
    const auto h = download(d_h);
    const auto dgate = download(d_dgate);
    const auto dup = download(d_dup);
    EXPECT_CLOSE(h, ref_h, Elem<T>::tol);
    EXPECT_CLOSE(dgate, ref_dgate, Elem<T>::tol);
    EXPECT_CLOSE(dup, ref_dup, Elem<T>::tol);
  }
}

TYPED_TEST(CudaOps, CrossEntropy) {
  using T = TypeParam;
  const double grad_scale = 1.0 / 7.0;
  for (auto [N, V] : {std::pair<int64_t, int64_t>{9, 1000}, {3, 32003}, {4, 17}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " V=" << V);
    const auto logits = rounded<T>(random_vector_f(N * V, 50, -4, 4));
    std::vector<int32_t> targets = random_ids(N, static_cast<int32_t>(V), 51);
    targets[1] = -100;  // ignored row
    targets[0] = static_cast<int32_t>(V - 1);
    std::vector<float> ref_d(N * V), ref_loss(N);
    cpu::cross_entropy_forward_backward(ref_d.data(), ref_loss.data(), logits.data(), targets.data(), N, V,
                                        grad_scale);
    DeviceBuffer<T> d_logits(N * V), d_dlogits(N * V);
    DeviceBuffer<int32_t> d_t(N);
    DeviceBuffer<float> d_loss(N);
    upload(d_logits, logits);
    upload_i32(d_t, targets);
    d_dlogits.poison();
    d_loss.poison();
    cuda::cross_entropy_forward_backward(d_dlogits.get(), d_loss.get(), d_logits.get(), d_t.get(), N, V, grad_scale,
                                         this->stream);
    this->sync();
    const auto dl = download(d_dlogits);
    const auto loss = download(d_loss);
    EXPECT_CLOSE(dl, ref_d, Elem<T>::tol);
    EXPECT_CLOSE(loss, ref_loss, kF32Tol);
    EXPECT_EQ(loss[1], 0.0f);
    for (int64_t j = 0; j < V; ++j) ASSERT_EQ(dl[V + j], 0.0f) << "ignored row must be zero at " << j;

    // dlogits aliasing logits (the tiled loss overwrites its logits tile).
    d_loss.poison();
    cuda::cross_entropy_forward_backward(d_logits.get(), d_loss.get(), d_logits.get(), d_t.get(), N, V, grad_scale,
                                         this->stream);
    this->sync();
    const auto dl_alias = download(d_logits);
    const auto loss_alias = download(d_loss);
    EXPECT_CLOSE(dl_alias, ref_d, Elem<T>::tol);
    EXPECT_CLOSE(loss_alias, ref_loss, kF32Tol);
  }
}

// Huge but finite logits (issue 28): all equal at +-1e30 the loss is ln V on the GPU too (it
// was 0: logf(S) + M rounded to M before x_target was taken off); a non-finite logit gives a
// non-finite loss. Both kernels: V = 17 takes the scalar one, V = 1024 the vectorised one.
TYPED_TEST(CudaOps, CrossEntropyStableForHugeFiniteLogits) {
  using T = TypeParam;
  for (int64_t V : {17, 1024}) {
    for (float level : {1e30f, -1e30f}) {
      SCOPED_TRACE(testing::Message() << "V=" << V << " level=" << level);
      const int64_t N = 2;
      std::vector<float> logits = rounded<T>(std::vector<float>(N * V, level));
      logits[V + 3] = std::numeric_limits<float>::quiet_NaN();  // row 1: a NaN logit
      std::vector<int32_t> targets = {1, 0};
      DeviceBuffer<T> d_logits(N * V), d_dlogits(N * V);
      DeviceBuffer<int32_t> d_t(N);
      DeviceBuffer<float> d_loss(N);
      upload(d_logits, logits);
      upload_i32(d_t, targets);
      d_loss.poison();
      cuda::cross_entropy_forward_backward(d_dlogits.get(), d_loss.get(), d_logits.get(), d_t.get(), N, V, 1.0,
                                           this->stream);
      this->sync();
      const auto loss = download(d_loss);
      EXPECT_NEAR(loss[0], std::log(static_cast<double>(V)), 1e-5);
      EXPECT_FALSE(std::isfinite(loss[1]));
      const auto dl = download(d_dlogits);
      EXPECT_NEAR(dl[0], 1.0 / V, 1e-3);
      EXPECT_NEAR(dl[1], 1.0 / V - 1, 1e-2);
    }
  }
}

}  // namespace
}  // namespace ulysses
