// Causal attention with grouped-query heads and packed documents: the CPU
// reference. Never forms an S x S matrix: each (head, query row) computes its
// scores over the visible keys into a per-thread scratch row.
//
// Query i of head h sees keys j in [doc_start[i], i] of kv head h / (H / Hkv).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;
namespace {

// Dot product in double. `omp simd` lets the compiler split the sum into
// vector lanes: a fixed order for a given build, so still deterministic.
template <class T>
inline double dot(const T* a, const T* b, int64_t d) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t t = 0; t < d; ++t) s += static_cast<double>(a[t]) * static_cast<double>(b[t]);
  return s;
}

template <class T>
inline void axpy_d(double* acc, double alpha, const T* x, int64_t d) {
#pragma omp simd
  for (int64_t t = 0; t < d; ++t) acc[t] += alpha * static_cast<double>(x[t]);
}

}  // namespace

template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* doc_start, int64_t S,
                       int64_t H, int64_t Hkv, int64_t d, double scale) {
  const int64_t group = H / Hkv;
#pragma omp parallel if (H * S * S * d >= 2 * kParallelMin)
  {
    std::vector<double> scores(static_cast<size_t>(S)), acc(static_cast<size_t>(d));
    // Later rows see more keys: dynamic chunks balance the causal triangle.
#pragma omp for collapse(2) schedule(dynamic, 16)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        const int64_t g = h / group;
        const int64_t j0 = doc_start[i];
        const T* qi = q + (i * H + h) * d;
        double m = -INFINITY;
        for (int64_t j = j0; j <= i; ++j) {
          const double s = scale * dot(qi, k + (j * Hkv + g) * d, d);
          scores[j] = s;
          m = std::max(m, s);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double l = 0;
        for (int64_t j = j0; j <= i; ++j) {
          const double p = std::exp(scores[j] - m);
          l += p;
          axpy_d(acc.data(), p, v + (j * Hkv + g) * d, d);
        }
        T* oi = out + (i * H + h) * d;
        for (int64_t t = 0; t < d; ++t) oi[t] = static_cast<T>(acc[t] / l);
        lse[h * S + i] = static_cast<T>(m + std::log(l));
      }
    }
  }
}

// Two race-free passes instead of scattering into shared rows:
//   pass 1 (per query row): dQ_i = scale * sum_j dS_ij k_j
//   pass 2 (per kv head and key row): dV_j = sum_{h in group, i} P_ij dout_i,
//                                     dK_j = scale * sum_{h in group, i} dS_ij q_i
// with P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dout_i . v_j - D_i), D_i = dout_i . out_i.
// Scores are recomputed in each pass (as FlashAttention does) rather than stored.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                        const T* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv, int64_t d,
                        double scale) {
  const int64_t group = H / Hkv;
  std::vector<double> D(static_cast<size_t>(H * S));
  // suffix_min[i] = min over i' >= i of doc_start[i']: key j can be seen by no
  // query at or after the first i with suffix_min[i] > j, which ends pass 2's
  // scan at the end of j's document for any doc_start, contiguous or not.
  std::vector<int64_t> suffix_min(static_cast<size_t>(S) + 1);
  suffix_min[S] = INT64_MAX;
  for (int64_t i = S - 1; i >= 0; --i) suffix_min[i] = std::min<int64_t>(suffix_min[i + 1], doc_start[i]);

#pragma omp parallel if (H * S * S * d >= 2 * kParallelMin)
  {
    std::vector<double> acc_a(static_cast<size_t>(d)), acc_b(static_cast<size_t>(d));

#pragma omp for collapse(2) schedule(static)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) D[h * S + i] = dot(dout + (i * H + h) * d, out + (i * H + h) * d, d);

    // Pass 1: dQ.
#pragma omp for collapse(2) schedule(dynamic, 16)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        const int64_t g = h / group;
        const T* qi = q + (i * H + h) * d;
        const T* doi = dout + (i * H + h) * d;
        const double li = static_cast<double>(lse[h * S + i]), Di = D[h * S + i];
        std::fill(acc_a.begin(), acc_a.end(), 0.0);
        for (int64_t j = doc_start[i]; j <= i; ++j) {
          const T* kj = k + (j * Hkv + g) * d;
          const double p = std::exp(scale * dot(qi, kj, d) - li);
          const double ds = p * (dot(doi, v + (j * Hkv + g) * d, d) - Di);
          axpy_d(acc_a.data(), ds, kj, d);
        }
        T* dqi = dq + (i * H + h) * d;
        for (int64_t t = 0; t < d; ++t) dqi[t] = static_cast<T>(scale * acc_a[t]);
      }
    }

    // Pass 2: dK and dV; one thread owns each (kv head, key row), so the query
    // heads sharing that kv head are summed without contention.
#pragma omp for collapse(2) schedule(dynamic, 16)
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t j = 0; j < S; ++j) {
        const T* kj = k + (j * Hkv + g) * d;
        const T* vj = v + (j * Hkv + g) * d;
        std::fill(acc_a.begin(), acc_a.end(), 0.0);  // dK_j
        std::fill(acc_b.begin(), acc_b.end(), 0.0);  // dV_j
        for (int64_t i = j; i < S && suffix_min[i] <= j; ++i) {
          if (doc_start[i] > j) continue;
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            const T* qi = q + (i * H + h) * d;
            const T* doi = dout + (i * H + h) * d;
            const double p = std::exp(scale * dot(qi, kj, d) - static_cast<double>(lse[h * S + i]));
            axpy_d(acc_b.data(), p, doi, d);
            const double ds = p * (dot(doi, vj, d) - D[h * S + i]);
            axpy_d(acc_a.data(), ds, qi, d);
          }
        }
        T* dkj = dk + (j * Hkv + g) * d;
        T* dvj = dv + (j * Hkv + g) * d;
        for (int64_t t = 0; t < d; ++t) {
          dkj[t] = static_cast<T>(scale * acc_a[t]);
          dvj[t] = static_cast<T>(acc_b[t]);
        }
      }
    }
  }
}

#define ULY_INSTANTIATE(T)                                                                                      \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t,   \
                                     int64_t, int64_t, double);                                                \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,  \
                                      const int32_t*, int64_t, int64_t, int64_t, int64_t, double);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
