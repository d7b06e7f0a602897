// The CPU reference ops against naive float64 formulas (forward) and central
// finite differences of a random projection L = <R, forward(x)> (backward),
// then the same ops in float32 against the float64 ones. The Tensor-level cpu
// Backend is tested in cpu_backend_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <vector>

#include "backend/cpu/ops.h"
#include "test_util.h"

namespace ulysses {
namespace {

using test::rel_error;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kFwd64 = 1e-12;  // float64 op vs float64 reference
constexpr double kFd = 1e-7;      // float64 backward vs central differences
constexpr double kF32 = 1e-5;     // float32 op vs float64 op

Vec rnd(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) { return test::random_vector(n, seed, lo, hi); }
template <class T>
std::vector<T> to(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}
double inner(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
double rel(const Vec& a, const Vec& ref) { return rel_error(a.data(), ref.data(), a.size()); }
double rel(const std::vector<float>& a, const Vec& ref) { return rel_error(a.data(), ref.data(), a.size()); }
Vec diff(const Vec& a, const Vec& b) {
  Vec d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// Central differences of f with respect to every element of x (x is restored).
Vec fd_grad(Vec& x, const std::function<double()>& f, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

Ids doc_starts(const std::vector<int>& lengths) {
  Ids ds;
  for (int len : lengths) {
    const int32_t start = static_cast<int32_t>(ds.size());
    for (int t = 0; t < len; ++t) ds.push_back(start);
  }
  return ds;
}

// ---- embedding -------------------------------------------------------------------
TEST(CpuOps, Embedding) {
  const int64_t N = 7, V = 5, D = 70;  // D spans two column blocks of the backward
  const Ids ids = {3, 0, 3, 4, 1, 3, 0};
  Vec table = rnd(V * D, 1), R = rnd(N * D, 2);
  Vec out(N * D, kNaN);
  cpu::embedding_forward(out.data(), ids.data(), table.data(), N, D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < D; ++c) ASSERT_EQ(out[n * D + c], table[ids[n] * D + c]);

  const Vec prefill = rnd(V * D, 3);
  Vec dtable = prefill;
  cpu::embedding_backward(dtable.data(), R.data(), ids.data(), N, D);  // accumulates
  Vec o(N * D);
  const Vec g = fd_grad(table, [&] {
    cpu::embedding_forward(o.data(), ids.data(), table.data(), N, D);
    return inner(R, o);
  });
  EXPECT_LE(rel(diff(dtable, prefill), g), kFd);

  auto tf = to<float>(table), Rf = to<float>(R), dtf = to<float>(prefill);
  std::vector<float> of(N * D);
  cpu::embedding_forward(of.data(), ids.data(), tf.data(), N, D);
  cpu::embedding_backward(dtf.data(), Rf.data(), ids.data(), N, D);
  EXPECT_LE(rel(of, out), kF32);
  EXPECT_LE(rel(dtf, dtable), kF32);
}

// ---- RMSNorm ---------------------------------------------------------------------
void ref_rmsnorm(Vec& y, Vec& rstd, const Vec& x, const Vec& w, int64_t N, int64_t D, double eps) {
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < D; ++c) ms += x[n * D + c] * x[n * D + c] / D;
    rstd[n] = 1.0 / std::sqrt(ms + eps);
    for (int64_t c = 0; c < D; ++c) y[n * D + c] = w[c] * x[n * D + c] / std::sqrt(ms + eps);
  }
}

TEST(CpuOps, RmsNorm) {
  const int64_t N = 5, D = 70;
  const double eps = 1e-5;
  Vec x = rnd(N * D, 10), w = rnd(D, 11, 0.5, 1.5), R = rnd(N * D, 12);
  Vec y(N * D, kNaN), rstd(N, kNaN), yr(N * D), rr(N);
  cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, D, eps);
  ref_rmsnorm(yr, rr, x, w, N, D, eps);
  EXPECT_LE(rel(y, yr), kFwd64);
  EXPECT_LE(rel(rstd, rr), kFwd64);

  const Vec dw0 = rnd(D, 13);
  Vec dx(N * D, kNaN), dw = dw0;
  cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, D);
  Vec yy(N * D), rs(N);
  auto L = [&] {
    cpu::rmsnorm_forward(yy.data(), rs.data(), x.data(), w.data(), N, D, eps);
    return inner(R, yy);
  };
  EXPECT_LE(rel(dx, fd_grad(x, L)), kFd);
  EXPECT_LE(rel(diff(dw, dw0), fd_grad(w, L)), kFd);

  auto xf = to<float>(x), wf = to<float>(w), Rf = to<float>(R), dwf = to<float>(dw0);
  std::vector<float> yf(N * D), rf(N), dxf(N * D);
  cpu::rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), N, D, eps);
  cpu::rmsnorm_backward(dxf.data(), dwf.data(), Rf.data(), xf.data(), wf.data(), rf.data(), N, D);
  EXPECT_LE(rel(yf, y), kF32);
  EXPECT_LE(rel(rf, rstd), kF32);
  EXPECT_LE(rel(dxf, dx), kF32);
  EXPECT_LE(rel(dwf, dw), kF32);
}

// ---- RoPE ------------------------------------------------------------------------
TEST(CpuOps, Rope) {
  const int64_t N = 6, H = 3, d = 8, half = d / 2;
  const Ids pos = {0, 5, 17, 3, 1000, 70001};
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, static_cast<double>(2 * i) / d));
  Vec x = rnd(N * H * d, 20), R = rnd(N * H * d, 21);

  // Reference: x * cos(emb) + rotate_half(x) * sin(emb), emb = cat(freqs, freqs).
  Vec ref(N * H * d);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < d; ++c) {
        const float a = static_cast<float>(pos[n]) * inv_freq[c % half];
        const double* xr = &x[(n * H + h) * d];
        const double rot = c < half ? -xr[c + half] : xr[c - half];
        ref[(n * H + h) * d + c] = xr[c] * std::cos(static_cast<double>(a)) + rot * std::sin(static_cast<double>(a));
      }
  Vec out(N * H * d, kNaN);
  cpu::rope_forward(out.data(), x.data(), pos.data(), inv_freq.data(), N, H, d);
  EXPECT_LE(rel(out, ref), kFwd64);
  Vec inplace = x;
  cpu::rope_forward(inplace.data(), inplace.data(), pos.data(), inv_freq.data(), N, H, d);
  EXPECT_EQ(inplace, out);

  Vec dx(N * H * d, kNaN), o(N * H * d);
  cpu::rope_backward(dx.data(), R.data(), pos.data(), inv_freq.data(), N, H, d);
  EXPECT_LE(rel(dx, fd_grad(x, [&] {
              cpu::rope_forward(o.data(), x.data(), pos.data(), inv_freq.data(), N, H, d);
              return inner(R, o);
            })),
            kFd);
  Vec dx_inplace = R;
  cpu::rope_backward(dx_inplace.data(), dx_inplace.data(), pos.data(), inv_freq.data(), N, H, d);
  EXPECT_EQ(dx_inplace, dx);
  // A rotation: backward undoes forward.
  Vec back(N * H * d);
  cpu::rope_backward(back.data(), out.data(), pos.data(), inv_freq.data(), N, H, d);
  EXPECT_LE(rel(back, x), kFwd64);

  auto xf = to<float>(x), Rf = to<float>(R);
  std::vector<float> of(N * H * d), dxf(N * H * d);
  cpu::rope_forward(of.data(), xf.data(), pos.data(), inv_freq.data(), N, H, d);
  cpu::rope_backward(dxf.data(), Rf.data(), pos.data(), inv_freq.data(), N, H, d);
  EXPECT_LE(rel(of, out), kF32);
  EXPECT_LE(rel(dxf, dx), kF32);
}

// ---- attention -------------------------------------------------------------------
// The obvious version: a full S x S masked softmax per head (test only). window > 0: query i
// also sees only keys j > i - window.
void ref_attention(Vec& out, Vec& lse, const Vec& q, const Vec& k, const Vec& v, const Ids& ds, int64_t S, int64_t H,
                   int64_t Hkv, int64_t d, double scale, int64_t window = 0) {
  Vec P(S * S);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    for (int64_t i = 0; i < S; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double s = -INFINITY;
        if (j <= i && j >= ds[i] && (window == 0 || i - j < window)) {
          s = 0;
          for (int64_t t = 0; t < d; ++t) s += q[(i * H + h) * d + t] * k[(j * Hkv + g) * d + t];
          s *= scale;
        }
        P[i * S + j] = s;
        m = std::max(m, s);
      }
      double Z = 0;
      for (int64_t j = 0; j < S; ++j) Z += std::exp(P[i * S + j] - m);
      lse[h * S + i] = m + std::log(Z);
      for (int64_t t = 0; t < d; ++t) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += std::exp(P[i * S + j] - m) / Z * v[(j * Hkv + g) * d + t];
        out[(i * H + h) * d + t] = acc;
      }
    }
  }
}

struct AttnCase {
  int64_t H, Hkv;
  int64_t window = 0;  // a sliding window, folded into the per-token first keys as make_documents does
};

// The first key each token sees: its document's start, or with a window the later of that and i - W + 1.
Ids first_keys(const Ids& ds, int64_t window) {
  Ids lo = ds;
  if (window > 0)
    for (size_t i = 0; i < lo.size(); ++i) lo[i] = std::max<int32_t>(lo[i], static_cast<int32_t>(i) - window + 1);
  return lo;
}

class CpuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CpuAttention, ForwardBackward) {
  const int64_t H = GetParam().H, Hkv = GetParam().Hkv, d = 5, W = GetParam().window;
  const Ids docs = doc_starts({5, 3, 6});  // three packed documents of uneven lengths
  const Ids ds = first_keys(docs, W);
  const int64_t S = static_cast<int64_t>(ds.size());
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Vec q = rnd(S * H * d, 30, -2, 2), k = rnd(S * Hkv * d, 31, -2, 2), v = rnd(S * Hkv * d, 32), R = rnd(S * H * d, 33);

  Vec out(S * H * d, kNaN), lse(H * S, kNaN), out_ref(S * H * d), lse_ref(H * S);
  cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), S, H, Hkv, d, scale);
  ref_attention(out_ref, lse_ref, q, k, v, docs, S, H, Hkv, d, scale, W);
  EXPECT_LE(rel(out, out_ref), kFwd64);
  EXPECT_LE(rel(lse, lse_ref), kFwd64);

  Vec dq(S * H * d, kNaN), dk(S * Hkv * d, kNaN), dv(S * Hkv * d, kNaN);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), out.data(), lse.data(), q.data(), k.data(),
                          v.data(), ds.data(), S, H, Hkv, d, scale);
  Vec o(S * H * d), l(H * S);
  auto L = [&] {
    cpu::attention_forward(o.data(), l.data(), q.data(), k.data(), v.data(), ds.data(), S, H, Hkv, d, scale);
    return inner(R, o);
  };
  EXPECT_LE(rel(dq, fd_grad(q, L)), kFd);
  EXPECT_LE(rel(dk, fd_grad(k, L)), kFd);
  EXPECT_LE(rel(dv, fd_grad(v, L)), kFd);

  auto qf = to<float>(q), kf = to<float>(k), vf = to<float>(v), Rf = to<float>(R);
  std::vector<float> of(S * H * d), lf(H * S), dqf(S * H * d), dkf(S * Hkv * d), dvf(S * Hkv * d);
  cpu::attention_forward(of.data(), lf.data(), qf.data(), kf.data(), vf.data(), ds.data(), S, H, Hkv, d, scale);
  cpu::attention_backward(dqf.data(), dkf.data(), dvf.data(), Rf.data(), of.data(), lf.data(), qf.data(), kf.data(),
                          vf.data(), ds.data(), S, H, Hkv, d, scale);
  EXPECT_LE(rel(of, out), kF32);
  EXPECT_LE(rel(lf, lse), kF32);
  EXPECT_LE(rel(dqf, dq), kF32);
  EXPECT_LE(rel(dkf, dk), kF32);
  EXPECT_LE(rel(dvf, dv), kF32);
}

INSTANTIATE_TEST_SUITE_P(Gqa, CpuAttention,
                         ::testing::Values(AttnCase{4, 2}, AttnCase{4, 1}, AttnCase{3, 3}, AttnCase{4, 2, 2},
                                           AttnCase{3, 1, 4}),
                         [](const auto& info) {
                           return "H" + std::to_string(info.param.H) + "_Hkv" + std::to_string(info.param.Hkv) +
                                  (info.param.window ? "_W" + std::to_string(info.param.window) : "");
                         });

// A long sequence in float32: fast enough for the reference role, sampled rows
// against the obvious formula, and the backward against two exact identities
// per document: sum_j dV_j = sum_i dout_i (softmax rows sum to 1) and
// sum_j dK_j = 0 (sum_j dS_ij = 0).
TEST(CpuOps, AttentionLongSequence) {
  const int64_t H = 4, Hkv = 2, d = 16, group = H / Hkv;
  const std::vector<int> docs = {1500, 2596};
  const Ids ds = doc_starts(docs);
  const int64_t S = static_cast<int64_t>(ds.size());
  const double scale = 0.25;
  auto q = test::random_vector_f(S * H * d, 40, -2, 2), k = test::random_vector_f(S * Hkv * d, 41, -2, 2);
  auto v = test::random_vector_f(S * Hkv * d, 42), dout = test::random_vector_f(S * H * d, 43);
  std::vector<float> out(S * H * d), lse(H * S), dq(S * H * d), dk(S * Hkv * d), dv(S * Hkv * d);

  const auto t0 = std::chrono::steady_clock::now();
  cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), S, H, Hkv, d, scale);
  const auto t1 = std::chrono::steady_clock::now();
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                          v.data(), ds.data(), S, H, Hkv, d, scale);
  const auto t2 = std::chrono::steady_clock::now();
  const double fwd_s = std::chrono::duration<double>(t1 - t0).count();
  const double bwd_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("attention S=%lld H=%lld Hkv=%lld d=%lld float32: forward %.3f s, backward %.3f s\n",
              static_cast<long long>(S), static_cast<long long>(H), static_cast<long long>(Hkv),
              static_cast<long long>(d), fwd_s, bwd_s);
  // Typically ~0.3 s forward and ~1 s backward on one core; the bound only
  // catches an algorithmic regression (an O(S^3) loop), as CI cores are shared.
  EXPECT_LT(fwd_s + bwd_s, 30.0);

  for (int64_t h : {int64_t{0}, int64_t{3}})
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{1499}, int64_t{1500}, int64_t{1501}, int64_t{2777}, S - 1}) {
      const int64_t g = h / group;
      Vec sc;
      double m = -INFINITY;
      for (int64_t j = ds[i]; j <= i; ++j) {
        double s = 0;
        for (int64_t t = 0; t < d; ++t) s += double(q[(i * H + h) * d + t]) * k[(j * Hkv + g) * d + t];
        sc.push_back(s * scale);
        m = std::max(m, s * scale);
      }
      double Z = 0;
      for (double s : sc) Z += std::exp(s - m);
      Vec ref(d, 0.0);
      for (int64_t j = ds[i]; j <= i; ++j)
        for (int64_t t = 0; t < d; ++t) ref[t] += std::exp(sc[j - ds[i]] - m) / Z * v[(j * Hkv + g) * d + t];
      EXPECT_LE(rel_error(&out[(i * H + h) * d], ref.data(), d), kF32) << "h=" << h << " i=" << i;
      EXPECT_NEAR(lse[h * S + i], m + std::log(Z), 1e-5 * std::max(1.0, std::fabs(m))) << "h=" << h << " i=" << i;
    }

  int64_t begin = 0;
  for (int len : docs) {
    for (int64_t g = 0; g < Hkv; ++g) {
      Vec sum_dv(d, 0.0), sum_dout(d, 0.0), sum_dk(d, 0.0);
      double abs_dk = 0;
      for (int64_t j = begin; j < begin + len; ++j)
        for (int64_t t = 0; t < d; ++t) {
          sum_dv[t] += dv[(j * Hkv + g) * d + t];
          sum_dk[t] += dk[(j * Hkv + g) * d + t];
          abs_dk += std::fabs(dk[(j * Hkv + g) * d + t]);
          for (int64_t h = g * group; h < (g + 1) * group; ++h) sum_dout[t] += dout[(j * H + h) * d + t];
        }
      EXPECT_LE(rel(sum_dv, sum_dout), kF32) << "doc at " << begin << ", kv head " << g;
      for (int64_t t = 0; t < d; ++t) EXPECT_LE(std::fabs(sum_dk[t]), 1e-8 * abs_dk) << "doc at " << begin;
    }
    begin += len;
  }
  for (float x : dq) ASSERT_TRUE(std::isfinite(x));
}

// ---- gated activations: h = act(gate) * up --------------------------------------
// An independent formula for each activation of core/activation.h (written from its definition,
// not from the functor); the test fails for an activation that has none here.
double activation_reference(Activation act, double g) {
  switch (act) {
    case Activation::SiLU:
      return g / (1.0 + std::exp(-g));
    case Activation::GeluTanh:
      return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
  }
  return std::nan("");
}

TEST(CpuOps, GatedActivations) {
  const int64_t n = 36;
  for (const ActivationNames& a : kActivations) {
    SCOPED_TRACE(activation_name(a.act));
    Vec gate = rnd(n, 50, -8, 8), up = rnd(n, 51), R = rnd(n, 52);
    Vec h(n, kNaN), ref(n);
    cpu::gated_activation_forward(h.data(), gate.data(), up.data(), n, a.act);
    for (int64_t i = 0; i < n; ++i) ref[i] = activation_reference(a.act, gate[i]) * up[i];
    EXPECT_LE(rel(h, ref), kFwd64);

    Vec dgate(n, kNaN), dup(n, kNaN), o(n);
    cpu::gated_activation_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), n, a.act);
    auto L = [&] {
      cpu::gated_activation_forward(o.data(), gate.data(), up.data(), n, a.act);
      return inner(R, o);
    };
    EXPECT_LE(rel(dgate, fd_grad(gate, L)), kFd);
    EXPECT_LE(rel(dup, fd_grad(up, L)), kFd);

    auto gf = to<float>(gate), uf = to<float>(up), Rf = to<float>(R);
    std::vector<float> hf(n), dgf(n), duf(n);
    cpu::gated_activation_forward(hf.data(), gf.data(), uf.data(), n, a.act);
    cpu::gated_activation_backward(dgf.data(), duf.data(), Rf.data(), gf.data(), uf.data(), n, a.act);
    EXPECT_LE(rel(hf, h), kF32);
    EXPECT_LE(rel(dgf, dgate), kF32);
    EXPECT_LE(rel(duf, dup), kF32);
  }
}

// ---- cross-entropy ---------------------------------------------------------------
TEST(CpuOps, CrossEntropy) {
  const int64_t N = 6, V = 11;
  const double grad_scale = 0.37;
  const Ids targets = {3, -100, 0, 10, -100, 7};
  Vec logits = rnd(N * V, 60, -4, 4);
  Vec losses(N, kNaN), dl(N * V, kNaN), ref(N, 0.0);
  cpu::cross_entropy_forward_backward(dl.data(), losses.data(), logits.data(), targets.data(), N, V, grad_scale);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == -100) continue;
    double Z = 0;
    for (int64_t j = 0; j < V; ++j) Z += std::exp(logits[n * V + j]);
    ref[n] = -std::log(std::exp(logits[n * V + targets[n]]) / Z);
  }
  EXPECT_LE(rel(losses, ref), kFwd64);
  for (int64_t n : {1, 4}) {
    EXPECT_EQ(losses[n], 0.0);
    for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dl[n * V + j], 0.0);
  }
  Vec l(N), d(N * V);
  EXPECT_LE(rel(dl, fd_grad(logits, [&] {
              cpu::cross_entropy_forward_backward(d.data(), l.data(), logits.data(), targets.data(), N, V,
                                                  grad_scale);
              double s = 0;
              for (double x : l) s += x;
              return grad_scale * s;
            })),
            kFd);

  // dlogits written over the logits themselves.
  Vec inplace = logits, l2(N);
  cpu::cross_entropy_forward_backward(inplace.data(), l2.data(), inplace.data(), targets.data(), N, V, grad_scale);
  EXPECT_EQ(inplace, dl);
  EXPECT_EQ(l2, losses);

  // Stable at logits that overflow exp(): a shift by 1000 changes nothing, in float too.
  Vec shifted = logits;
  for (double& x : shifted) x += 1000.0;
  Vec ls(N), ds(N * V);
  cpu::cross_entropy_forward_backward(ds.data(), ls.data(), shifted.data(), targets.data(), N, V, grad_scale);
  EXPECT_LE(rel(ls, losses), 1e-11);
  EXPECT_LE(rel(ds, dl), 1e-11);

  for (const Vec* src : {&logits, &shifted}) {
    auto lf = to<float>(*src);
    std::vector<float> lossf(N), dlf(N * V);
    cpu::cross_entropy_forward_backward(dlf.data(), lossf.data(), lf.data(), targets.data(), N, V, grad_scale);
    // float32 logits near 1000 carry absolute rounding ~6e-5, so the shifted case is looser.
    const double tol = src == &logits ? kF32 : 2e-4;
    EXPECT_LE(rel(lossf, losses), tol);
    EXPECT_LE(rel(dlf, dl), tol);
  }
}

// Huge but finite logits (issue 28): all equal at +-1e30 the loss is ln V, not 0 (m + log V
// rounded to m); the gradient is 1/V - onehot; a non-finite logit gives a non-finite loss
// (for the non-finite policy), never a number.
TEST(CpuOps, CrossEntropyStableForEveryFiniteRow) {
  const int64_t V = 7;
  const Ids targets = {2, 5};
  for (double level : {1e30, -1e30, 1e300, 3e38}) {
    SCOPED_TRACE(level);
    Vec logits(2 * V, level), losses(2), dl(2 * V);
    cpu::cross_entropy_forward_backward(dl.data(), losses.data(), logits.data(), targets.data(), 2, V, 1.0);
    for (double l : losses) EXPECT_NEAR(l, std::log(7.0), 1e-15);
    for (int64_t j = 0; j < V; ++j) EXPECT_NEAR(dl[j], 1.0 / 7 - (j == 2 ? 1 : 0), 1e-15);
    if (std::fabs(level) < 3.4e38) {
      std::vector<float> lf(2 * V, static_cast<float>(level)), lossf(2), dlf(2 * V);
      cpu::cross_entropy_forward_backward(dlf.data(), lossf.data(), lf.data(), targets.data(), 2, V, 1.0);
      for (float l : lossf) EXPECT_NEAR(l, std::log(7.0), 1e-6);
    }
  }
  // One logit far above the rest: the loss is the gap, exactly.
  Vec logits(V, 1e30), losses(1), dl(V);
  logits[3] = 1e30 + 1e20;
  const Ids t3 = {0};
  cpu::cross_entropy_forward_backward(dl.data(), losses.data(), logits.data(), t3.data(), 1, V, 1.0);
  EXPECT_DOUBLE_EQ(losses[0], logits[3] - logits[0]);
  // Non-finite in: non-finite out.
  for (double bad : {kNaN, std::numeric_limits<double>::infinity()}) {
    Vec l2(V, 1.0), loss2(1), d2(V);
    l2[4] = bad;
    cpu::cross_entropy_forward_backward(d2.data(), loss2.data(), l2.data(), t3.data(), 1, V, 1.0);
    EXPECT_FALSE(std::isfinite(loss2[0])) << bad;
  }
}

// ---- matmul, add, axpy -----------------------------------------------------------
struct Trans {
  bool a, b;
};
class CpuMatmul : public ::testing::TestWithParam<Trans> {};

TEST_P(CpuMatmul, ForwardAndGradients) {
  const bool ta = GetParam().a, tb = GetParam().b;
  const int64_t M = 5, N = 7, K = 9;
  Vec A = rnd(M * K, 70), B = rnd(K * N, 71), C0 = rnd(M * N, 72), R = rnd(M * N, 73);
  auto a_at = [&](const Vec& X, int64_t m, int64_t kk) { return ta ? X[kk * M + m] : X[m * K + kk]; };
  auto b_at = [&](const Vec& X, int64_t kk, int64_t n) { return tb ? X[n * K + kk] : X[kk * N + n]; };
  const double alpha = 0.7, beta = 0.3;
  Vec ref(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t kk = 0; kk < K; ++kk) s += a_at(A, m, kk) * b_at(B, kk, n);
      ref[m * N + n] = alpha * s + beta * C0[m * N + n];
    }
  Vec C = C0;
  cpu::matmul(C.data(), A.data(), B.data(), M, N, K, ta, tb, alpha, beta);
  EXPECT_LE(rel(C, ref), kFwd64);

  auto Af = to<float>(A), Bf = to<float>(B), Cf = to<float>(C0);
  cpu::matmul(Cf.data(), Af.data(), Bf.data(), M, N, K, ta, tb, alpha, beta);
  EXPECT_LE(rel(Cf, ref), kF32);

  // beta = 0 overwrites: NaN in C must not leak through.
  Vec Cn(M * N, kNaN), ref0(M * N);
  cpu::matmul(Cn.data(), A.data(), B.data(), M, N, K, ta, tb, 1.0, 0.0);
  for (int64_t i = 0; i < M * N; ++i) ref0[i] = (ref[i] - beta * C0[i]) / alpha;
  EXPECT_LE(rel(Cn, ref0), kFwd64);

  // The backward of C = op(A) op(B), written with the same transposes the model
  // uses: dop(A) = R op(B)^T, dop(B) = op(A)^T R.
  Vec dA(M * K), dB(K * N), P(M * N);
  if (!ta) cpu::matmul(dA.data(), R.data(), B.data(), M, K, N, false, !tb, 1.0, 0.0);
  else cpu::matmul(dA.data(), B.data(), R.data(), K, M, N, tb, true, 1.0, 0.0);
  if (!tb) cpu::matmul(dB.data(), A.data(), R.data(), K, N, M, !ta, false, 1.0, 0.0);
  else cpu::matmul(dB.data(), R.data(), A.data(), N, K, M, true, ta, 1.0, 0.0);
  auto L = [&] {
    cpu::matmul(P.data(), A.data(), B.data(), M, N, K, ta, tb, 1.0, 0.0);
    return inner(R, P);
  };
  EXPECT_LE(rel(dA, fd_grad(A, L)), kFd);
  EXPECT_LE(rel(dB, fd_grad(B, L)), kFd);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, CpuMatmul,
                         ::testing::Values(Trans{false, false}, Trans{false, true}, Trans{true, false},
                                           Trans{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.a ? "At" : "A") + (info.param.b ? "Bt" : "B");
                         });

TEST(CpuOps, MatmulEmptyInnerDimension) {
  Vec C = {1, 2, 3, 4}, none;
  cpu::matmul(C.data(), none.data(), none.data(), 2, 2, 0, false, false, 1.0, 0.5);
  EXPECT_EQ(C, (Vec{0.5, 1, 1.5, 2}));
  Vec Cn(4, kNaN);
  cpu::matmul(Cn.data(), none.data(), none.data(), 2, 2, 0, false, false, 1.0, 0.0);
  EXPECT_EQ(Cn, Vec(4, 0.0));
}

// ---- bias -----------------------------------------------------------------------
TEST(CpuOps, BiasAddAndItsGradient) {
  const int64_t N = 7, n = 5;
  const Vec y0 = rnd(N * n, 60), b = rnd(n, 61), dy = rnd(N * n, 62);
  Vec y = y0;
  cpu::bias_add(y.data(), b.data(), N, n);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(y[i * n + j], y0[i * n + j] + b[j]);
  // db accumulates: start from a known value.
  Vec db(n, 0.5);
  cpu::bias_backward(db.data(), dy.data(), N, n);
  Vec bb = b;
  Vec out(N * n);
  const Vec fd = fd_grad(bb, [&] {
    out = y0;
    cpu::bias_add(out.data(), bb.data(), N, n);
    return inner(dy, out);
  });
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(db[j] - 0.5, fd[j], 1e-8);
}

TEST(CpuOps, AddAxpy) {
  const int64_t n = 1000;
  Vec a = rnd(n, 80), b = rnd(n, 81), y(n, kNaN);
  cpu::add(y.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] + b[i]);
  Vec a2 = a;
  cpu::add(a2.data(), a2.data(), b.data(), n);  // y aliases a
  EXPECT_EQ(a2, y);
  cpu::axpy(y.data(), b.data(), -2.5, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_DOUBLE_EQ(y[i], a[i] + b[i] - 2.5 * b[i]);
  auto yf = to<float>(a), bf = to<float>(b);
  cpu::axpy(yf.data(), bf.data(), 3.0, n);
  Vec r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = a[i] + 3.0 * b[i];
  EXPECT_LE(rel(yf, r), kF32);
}

}  // namespace
}  // namespace ulysses
