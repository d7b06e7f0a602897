// The cpu Backend: dispatch to the cpu:: reference ops (float32 and float64),
// dtype conversions in copy(), sum(), and the argument checks that must throw
// ulysses::Error naming the op and the shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/documents.h"
#include "test_util.h"

namespace ulysses {
namespace {

using test::rel_error;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

Vec rnd(size_t n, uint64_t seed) { return test::random_vector(n, seed); }

Ids doc_starts(const std::vector<int>& lengths) {
  Ids ds;
  for (int len : lengths) {
    const int32_t start = static_cast<int32_t>(ds.size());
    for (int t = 0; t < len; ++t) ds.push_back(start);
  }
  return ds;
}

template <class T>
Tensor host(const std::vector<T>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dtype_of<T>::value);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}
template <class T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

TEST(CpuBackend, Basics) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->device(), Device::CPU);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->act_dtype(), DType::F32);
  EXPECT_EQ(&be->allocator(), &host_allocator());
  Tensor t = be->empty({3, 4}, DType::F32);
  EXPECT_EQ(t.device(), Device::CPU);
  be->zero(t);
  EXPECT_EQ(be->sum(t), 0.0);
  be->synchronize();

  const std::vector<float> x = {1.5f, -2.25f, 3.0f, 1e-3f, 70000.0f, -0.1f};
  Tensor f32 = host(x, {2, 3});
  EXPECT_DOUBLE_EQ(be->sum(f32), 1.5 - 2.25 + 3.0 + double(1e-3f) + 70000.0 + double(-0.1f));
  EXPECT_EQ(be->sum(host(std::vector<int32_t>{1, 2, 3, -7}, {4})), -1.0);

  // Conversions in every direction between the float dtypes.
  Tensor f64 = be->empty({6}, DType::F64), bf = be->empty({3, 2}, DType::BF16), h = be->empty({6}, DType::F16);
  be->copy(f64, f32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f64.data<double>()[i], double(x[i]));
  be->copy(bf, f64);
  be->copy(h, bf);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(bf.data<uint16_t>()[i], float_to_bf16(x[i]));
    EXPECT_EQ(h.data<uint16_t>()[i], float_to_fp16(bf16_to_float(float_to_bf16(x[i]))));
  }
  Tensor back = be->empty({6}, DType::F32);
  be->copy(back, bf);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.data<float>()[i], bf16_to_float(float_to_bf16(x[i])));
  Tensor same = be->empty({6}, DType::F32);
  be->copy(same, f32);
  EXPECT_EQ(values<float>(same), x);
  Tensor big32 = host(test::random_vector_f(100003, 90), {100003}), big64 = be->empty({100003}, DType::F64);
  be->copy(big64, big32);  // several conversion chunks
  EXPECT_EQ(rel_error(big32.data<float>(), big64.data<double>(), 100003), 0.0);

  EXPECT_THROW(be->copy(same, host(std::vector<float>(5), {5})), Error);
  EXPECT_THROW(be->copy(same, host(std::vector<int32_t>(6), {6})), Error);
  Tensor dev = Tensor::borrow(same.raw(), {6}, DType::F32, Device::CUDA);
  EXPECT_THROW(be->copy(dev, f32), Error);
  EXPECT_THROW(be->zero(dev), Error);
}

// Documents: both forms of the spans, and malformed doc_start refused with a message.
TEST(CpuBackend, DocumentsFromDocStart) {
  auto be = make_cpu_backend();
  const Documents d = make_documents(*be, std::vector<int32_t>{0, 0, 0, 3, 4, 4, 4, 4});
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.longest, 4);
  EXPECT_EQ(d.tokens(), 8);
  const int32_t* b = static_cast<const int32_t*>(d.bounds.raw());
  EXPECT_EQ(std::vector<int32_t>(b, b + d.bounds.numel()), (std::vector<int32_t>{0, 3, 4, 8}));
  // A sliding window of 2 folds into the first keys; the bounds stay the documents'.
  const Documents w = make_documents(*be, std::vector<int32_t>{0, 0, 0, 3, 4, 4, 4, 4}, 2);
  EXPECT_EQ(w.window, 2);
  EXPECT_EQ(w.count, 3);
  const int32_t* f = static_cast<const int32_t*>(w.doc_start.raw());
  EXPECT_EQ(std::vector<int32_t>(f, f + 8), (std::vector<int32_t>{0, 0, 1, 3, 4, 4, 5, 6}));
  // A window no shorter than the longest document changes nothing and is not recorded.
  EXPECT_EQ(make_documents(*be, std::vector<int32_t>{0, 0, 0, 3, 4, 4, 4, 4}, 4).window, 0);
  EXPECT_THROW(make_documents(*be, std::vector<int32_t>{0, 0}, -1), Error);
  const Documents one = single_document(*be, 5);
  EXPECT_EQ(one.count, 1);
  EXPECT_EQ(one.longest, 5);
  const Documents none = single_document(*be, 0);
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.bounds.numel(), 1);
  try {
    make_documents(*be, std::vector<int32_t>{1, 1});
    ADD_FAILURE() << "doc_start[0] = 1 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("doc_start[0] = 1"), std::string::npos) << e.what();
  }
}

// Backend results equal the cpu:: templates (float32 and float64 paths).
TEST(CpuBackend, DispatchMatchesTemplates) {
  auto be = make_cpu_backend();
  const int64_t H = 4, Hkv = 2, d = 4;
  const Ids ds = doc_starts({4, 5});
  const int64_t S = static_cast<int64_t>(ds.size());
  const Vec q = rnd(S * H * d, 100), k = rnd(S * Hkv * d, 101), v = rnd(S * Hkv * d, 102), g = rnd(S * H * d, 103);
  Vec out(S * H * d), lse(H * S), dq(S * H * d), dk(S * Hkv * d), dv(S * Hkv * d);
  cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), S, H, Hkv, d, 0.5);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), out.data(), lse.data(), q.data(), k.data(),
                          v.data(), ds.data(), S, H, Hkv, d, 0.5);

  Tensor tds = host(ds, {S});
  Tensor tq = host(q, {S, H, d}), tk = host(k, {S, Hkv, d}), tv = host(v, {S, Hkv, d}), tg = host(g, {S, H, d});
  Tensor to_ = be->empty({S, H, d}, DType::F64), tl = be->empty({H, S}, DType::F64);
  Tensor tdq = be->empty({S, H, d}, DType::F64), tdk = be->empty({S, Hkv, d}, DType::F64),
         tdv = be->empty({S, Hkv, d}, DType::F64);
  const Documents docs = make_documents(*be, tds);
  be->attention_forward(to_, tl, tq, tk, tv, docs, 0.5);
  be->attention_backward(tdq, tdk, tdv, tg, to_, tl, tq, tk, tv, docs, 0.5);
  EXPECT_EQ(values<double>(to_), out);
  EXPECT_EQ(values<double>(tl), lse);
  EXPECT_EQ(values<double>(tdq), dq);
  EXPECT_EQ(values<double>(tdk), dk);
  EXPECT_EQ(values<double>(tdv), dv);

  Tensor fq = be->empty({S, H, d}, DType::F32), fo = be->empty({S, H, d}, DType::F32);
  be->copy(fq, tq);
  std::vector<float> pf(S * H * d);
  const std::vector<float> inv = {1.0f, 0.01f};
  const Ids pos = {0, 1, 2, 3, 0, 1, 2, 3, 4};
  cpu::rope_forward(pf.data(), fq.data<float>(), pos.data(), inv.data(), S, H, d);
  be->rope_forward(fo, fq, host(pos, {S}), host(inv, {2}));
  EXPECT_EQ(values<float>(fo), pf);

  // cross-entropy: float64 logits may write float32 losses.
  const int64_t N = 3, V = 5;
  const Vec lg = rnd(N * V, 104);
  const Ids tg2 = {4, -100, 0};
  Vec losses(N), dl(N * V);
  cpu::cross_entropy_forward_backward(dl.data(), losses.data(), lg.data(), tg2.data(), N, V, 1.0);
  Tensor tlg = host(lg, {N, V}), tloss = be->empty({N}, DType::F32);
  be->cross_entropy_forward_backward(tlg, tloss, tlg, host(tg2, {N}), 1.0);  // dlogits aliases logits
  EXPECT_EQ(values<double>(tlg), dl);
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(tloss.data<float>()[n], static_cast<float>(losses[n]));
  EXPECT_DOUBLE_EQ(be->sum(tloss), double(float(losses[0])) + double(float(losses[2])));

  // copy_heads: heads [1, 3) of src into heads [0, 2) of dst, then accumulated.
  Tensor src = host(q, {S, H, d}), dst = be->empty({S, 2, d}, DType::F64);
  be->copy_heads(dst, 0, src, 1, 2, false);
  be->copy_heads(dst, 0, src, 1, 2, true);
  for (int64_t n = 0; n < S; ++n)
    for (int64_t c = 0; c < 2 * d; ++c) ASSERT_EQ(dst.data<double>()[n * 2 * d + c], 2 * q[(n * H + 1) * d + c]);
  EXPECT_THROW(be->copy_heads(dst, 1, src, 0, 2, false), Error);
}

TEST(CpuBackend, RejectsBadArguments) {
  auto be = make_cpu_backend();
  auto F = [&](const Shape& s) { return be->empty(s, DType::F32); };
  auto D = [&](const Shape& s) { return be->empty(s, DType::F64); };
  auto I = [](const Ids& v) { return host(v, {static_cast<int64_t>(v.size())}); };

  // embedding
  Tensor table = F({5, 4}), out = F({3, 4});
  EXPECT_NO_THROW(be->embedding_forward(out, I({0, 4, 2}), table));
  EXPECT_THROW(be->embedding_forward(out, I({0, 5, 2}), table), Error);  // id out of range
  EXPECT_THROW(be->embedding_forward(out, I({0, -1, 2}), table), Error);
  EXPECT_THROW(be->embedding_forward(out, F({3}), table), Error);  // float ids
  EXPECT_THROW(be->embedding_forward(out, I({0, 1}), table), Error);
  EXPECT_THROW(be->embedding_forward(out, I({0, 1, 2}), D({5, 4})), Error);  // mixed float dtypes
  EXPECT_THROW(be->embedding_backward(table, F({3, 5}), I({0, 1, 2})), Error);
  Tensor i64 = be->empty({4}, DType::I64);
  EXPECT_THROW(be->embedding_forward(table, i64, table), Error);

  // rmsnorm
  Tensor x = F({3, 8}), y = F({3, 8}), rstd = F({3}), w = F({8});
  EXPECT_NO_THROW(be->rmsnorm_forward(y, rstd, x, w, 1e-5));
  EXPECT_THROW(be->rmsnorm_forward(y, rstd, x, F({7}), 1e-5), Error);
  Tensor rstd2 = F({2});
  EXPECT_THROW(be->rmsnorm_forward(y, rstd2, x, w, 1e-5), Error);
  Tensor dx = F({3, 8}), dw = F({8}), dw_bad = F({9});
  EXPECT_THROW(be->rmsnorm_backward(dx, dw_bad, y, x, w, rstd), Error);
  Tensor bf = be->empty({3, 8}, DType::BF16);
  EXPECT_THROW(be->rmsnorm_forward(y, rstd, bf, w, 1e-5), Error);

  // rope
  Tensor qx = F({3, 2, 6}), qo = F({3, 2, 6});
  const std::vector<float> inv = {1.f, .1f, .01f};
  EXPECT_NO_THROW(be->rope_forward(qo, qx, I({0, 1, 2}), host(inv, {3})));
  EXPECT_THROW(be->rope_forward(qo, qx, I({0, 1}), host(inv, {3})), Error);
  EXPECT_THROW(be->rope_forward(qo, qx, I({0, 1, 2}), host(std::vector<float>{1.f, .1f}, {2})), Error);
  EXPECT_THROW(be->rope_forward(qo, qx, I({0, 1, 2}), D({3})), Error);  // inv_freq must be float32
  Tensor odd = F({3, 2, 5});
  EXPECT_THROW(be->rope_backward(odd, odd, I({0, 1, 2}), host(std::vector<float>{1.f, .1f}, {2})), Error);

  // attention
  const Ids ds = {0, 0, 2, 2};
  Tensor q = F({4, 4, 2}), k = F({4, 2, 2}), v = F({4, 2, 2}), o = F({4, 4, 2}), lse = F({4, 4});
  be->zero(q), be->zero(k), be->zero(v);
  const Documents docs = make_documents(*be, I(ds));
  EXPECT_NO_THROW(be->attention_forward(o, lse, q, k, v, docs, 1.0));
  Tensor k3 = F({4, 3, 2}), lse_t = F({4, 3});
  EXPECT_THROW(be->attention_forward(o, lse, q, k3, k3, docs, 1.0), Error);  // H % Hkv != 0
  EXPECT_THROW(be->attention_forward(o, lse_t, q, k, v, docs, 1.0), Error);
  EXPECT_THROW(be->attention_forward(o, lse, q, k, F({4, 2, 3}), docs, 1.0), Error);
  EXPECT_THROW(make_documents(*be, I({0, 0, 3, 2})), Error);  // doc_start[2] > 2
  EXPECT_THROW(make_documents(*be, I({0, 1, 0, 2})), Error);  // documents must be contiguous
  EXPECT_THROW(be->attention_forward(o, lse, q, k, v, make_documents(*be, I({0, 0, 2})), 1.0), Error);
  EXPECT_THROW(be->attention_forward(o, lse, q, k, v, Documents{}, 1.0), Error);
  Tensor dq = F({4, 4, 2}), dk = F({4, 2, 2}), dv = F({4, 2, 2}), dv_bad = F({4, 4, 2});
  EXPECT_NO_THROW(be->attention_backward(dq, dk, dv, o, o, lse, q, k, v, docs, 1.0));
  EXPECT_THROW(be->attention_backward(dq, dk, dv_bad, o, o, lse, q, k, v, docs, 1.0), Error);

  // gated activation
  Tensor gt = F({2, 6}), up = F({2, 6}), hh = F({2, 6}), up_bad = F({2, 5});
  EXPECT_THROW(be->gated_activation_forward(hh, gt, up_bad, Activation::SiLU), Error);
  EXPECT_THROW(be->gated_activation_backward(hh, up_bad, gt, gt, up, Activation::SiLU), Error);

  // cross-entropy
  Tensor logits = F({2, 5}), losses = F({2});
  be->zero(logits);
  EXPECT_NO_THROW(be->cross_entropy_forward_backward(logits, losses, logits, I({4, -100}), 1.0));
  EXPECT_THROW(be->cross_entropy_forward_backward(logits, losses, logits, I({5, 0}), 1.0), Error);
  EXPECT_THROW(be->cross_entropy_forward_backward(logits, losses, logits, I({-1, 0}), 1.0), Error);
  Tensor losses_bad = F({3}), losses_i = be->empty({2}, DType::I32);
  EXPECT_THROW(be->cross_entropy_forward_backward(logits, losses_bad, logits, I({0, 0}), 1.0), Error);
  EXPECT_THROW(be->cross_entropy_forward_backward(logits, losses_i, logits, I({0, 0}), 1.0), Error);

  // matmul, add, axpy
  Tensor A = F({3, 4}), B = F({4, 5}), C = F({3, 5});
  be->zero(A), be->zero(B);
  EXPECT_NO_THROW(be->matmul(C, A, B, false, false));
  EXPECT_THROW(be->matmul(C, A, B, true, false), Error);   // op(A) [4, 3] x [4, 5]
  EXPECT_THROW(be->matmul(C, A, B, false, true), Error);   // [3, 4] x op(B) [5, 4]
  Tensor C_bad = F({5, 3}), A3 = F({3, 4, 1});
  EXPECT_THROW(be->matmul(C_bad, A, B, false, false), Error);
  EXPECT_THROW(be->matmul(C, A3, B, false, false), Error);
  EXPECT_THROW(be->matmul(C, A, D({4, 5}), false, false), Error);
  EXPECT_THROW(be->add(C, A, B), Error);
  EXPECT_THROW(be->axpy(C, A, 1.0), Error);
  EXPECT_NO_THROW(be->matmul_add(C, A, B, false, false, C));
  EXPECT_THROW(be->matmul_add(C, A, B, false, false, F({5, 3})), Error);   // residual of another shape
  EXPECT_THROW(be->matmul_add(C, A, B, false, false, D({3, 5})), Error);   // residual of another dtype
  EXPECT_THROW(be->matmul_add(C_bad, A, B, false, false, C), Error);

  // The messages name the op and the shapes.
  try {
    be->matmul(C_bad, A, B, false, false);
    FAIL() << "matmul accepted a wrong output shape";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5, 3]"), std::string::npos) << m;
  }
}

}  // namespace
TEST(CpuBackend, MatmulAddIsTheProductPlusTheResidual) {
  auto be = make_cpu_backend();
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, -1, 2, 0.5f, 1}, r = {10, 20, 30, 40};
  Tensor A = host(a, {2, 3}), B = host(b, {3, 2}), R = host(r, {2, 2}), D = Tensor::empty({2, 2}, DType::F32);
  be->matmul_add(D, A, B, false, false, R);
  // A B = [[1*1 + 2*(-1) + 3*0.5, 0 + 4 + 3], [4 - 5 + 3, 0 + 10 + 6]] = [[0.5, 7], [2, 16]]
  EXPECT_EQ(values<float>(D), (std::vector<float>{10.5f, 27, 32, 56}));
  EXPECT_EQ(values<float>(R), r);  // the residual is read, not written
  be->matmul_add(R, A, B, false, false, R);  // in place
  EXPECT_EQ(values<float>(R), (std::vector<float>{10.5f, 27, 32, 56}));
}

}  // namespace ulysses
