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

// Query row i is global token q0 + i and key row j global token k0 + j; doc_start
// is indexed by global token. Query q0 + i sees key k0 + j when
// doc_start[q0 + i] <= k0 + j <= q0 + i. A row that sees no key of the block
// gets out = 0 and lse = -inf (its weight in an lse merge is zero).
template <class T>
void attention_forward_block(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* doc_start,
                             int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H, int64_t Hkv, int64_t d,
                             double scale) {
  const int64_t group = H / Hkv;
#pragma omp parallel if (H * Sq * Sk * d >= 2 * kParallelMin)
  {
    std::vector<double> scores(static_cast<size_t>(Sk)), acc(static_cast<size_t>(d));
    // Later rows see more keys: dynamic chunks balance the causal triangle.
#pragma omp for collapse(2) schedule(dynamic, 16)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t g = h / group;
        // Visible keys of the block: local j in [j0, j1].
        const int64_t j0 = std::max<int64_t>(0, doc_start[q0 + i] - k0);
        const int64_t j1 = std::min<int64_t>(Sk - 1, q0 + i - k0);
        const T* qi = q + (i * H + h) * d;
        T* oi = out + (i * H + h) * d;
        if (j0 > j1) {
          std::fill(oi, oi + d, T(0));
          lse[h * Sq + i] = static_cast<T>(-INFINITY);
          continue;
        }
        double m = -INFINITY;
        for (int64_t j = j0; j <= j1; ++j) {
          const double s = scale * dot(qi, k + (j * Hkv + g) * d, d);
          scores[j] = s;
          m = std::max(m, s);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double l = 0;
        for (int64_t j = j0; j <= j1; ++j) {
          const double p = std::exp(scores[j] - m);
          l += p;
          axpy_d(acc.data(), p, v + (j * Hkv + g) * d, d);
        }
        for (int64_t t = 0; t < d; ++t) oi[t] = static_cast<T>(acc[t] / l);
        lse[h * Sq + i] = static_cast<T>(m + std::log(l));
      }
    }
  }
}

template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* doc_start, int64_t S,
                       int64_t H, int64_t Hkv, int64_t d, double scale) {
  attention_forward_block(out, lse, q, k, v, doc_start, S, S, 0, 0, H, Hkv, d, scale);
}

// Two race-free passes instead of scattering into shared rows:
//   pass 1 (per query row): dQ_i = scale * sum_j dS_ij k_j
//   pass 2 (per kv head and key row): dV_j = sum_{h in group, i} P_ij dout_i,
//                                     dK_j = scale * sum_{h in group, i} dS_ij q_i
// with P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dout_i . v_j - D_i), D_i = dout_i . out_i.
// Scores are recomputed in each pass (as FlashAttention does) rather than stored.
// In the block form, out and lse are those of the query rows over all their keys
// (the merged result), so the block's dq, dk, dv are its exact share of the gradients.
template <class T>
void attention_backward_block(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q,
                              const T* k, const T* v, const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0,
                              int64_t k0, int64_t H, int64_t Hkv, int64_t d, double scale) {
  const int64_t group = H / Hkv;
  std::vector<double> D(static_cast<size_t>(H * Sq));
  // suffix_min[i] = min over i' >= i of doc_start[q0 + i']: key k0 + j can be seen
  // by no query row at or after the first i with suffix_min[i] > k0 + j, which ends
  // pass 2's scan at the end of the key's document.
  std::vector<int64_t> suffix_min(static_cast<size_t>(Sq) + 1);
  suffix_min[Sq] = INT64_MAX;
  for (int64_t i = Sq - 1; i >= 0; --i) suffix_min[i] = std::min<int64_t>(suffix_min[i + 1], doc_start[q0 + i]);

#pragma omp parallel if (H * Sq * Sk * d >= 2 * kParallelMin)
  {
    std::vector<double> acc_a(static_cast<size_t>(d)), acc_b(static_cast<size_t>(d));

#pragma omp for collapse(2) schedule(static)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) D[h * Sq + i] = dot(dout + (i * H + h) * d, out + (i * H + h) * d, d);

    // Pass 1: dQ.
#pragma omp for collapse(2) schedule(dynamic, 16)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t g = h / group;
        const T* qi = q + (i * H + h) * d;
        const T* doi = dout + (i * H + h) * d;
        const double li = static_cast<double>(lse[h * Sq + i]), Di = D[h * Sq + i];
        std::fill(acc_a.begin(), acc_a.end(), 0.0);
        const int64_t j1 = std::min<int64_t>(Sk - 1, q0 + i - k0);
        for (int64_t j = std::max<int64_t>(0, doc_start[q0 + i] - k0); j <= j1; ++j) {
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
      for (int64_t j = 0; j < Sk; ++j) {
        const int64_t kg = k0 + j;  // the key's global index
        const T* kj = k + (j * Hkv + g) * d;
        const T* vj = v + (j * Hkv + g) * d;
        std::fill(acc_a.begin(), acc_a.end(), 0.0);  // dK_j
        std::fill(acc_b.begin(), acc_b.end(), 0.0);  // dV_j
        for (int64_t i = std::max<int64_t>(0, kg - q0); i < Sq && suffix_min[i] <= kg; ++i) {
          if (doc_start[q0 + i] > kg) continue;
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            const T* qi = q + (i * H + h) * d;
            const T* doi = dout + (i * H + h) * d;
            const double p = std::exp(scale * dot(qi, kj, d) - static_cast<double>(lse[h * Sq + i]));
            axpy_d(acc_b.data(), p, doi, d);
            const double ds = p * (dot(doi, vj, d) - D[h * Sq + i]);
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

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                        const T* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv, int64_t d,
                        double scale) {
  attention_backward_block(dq, dk, dv, dout, out, lse, q, k, v, doc_start, S, S, 0, 0, H, Hkv, d, scale);
}

// Merges a block's (out, lse) into the running (acc, acc_lse) of the same query rows:
// lse' = log(e^acc_lse + e^lse), acc' = acc e^(acc_lse - lse') + out e^(lse - lse').
template <class A, class T>
void attention_merge(A* acc, A* acc_lse, const T* out, const T* lse, int64_t S, int64_t H, int64_t d) {
#pragma omp parallel for collapse(2) if (H * S * d >= 2 * kParallelMin)
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      const double a = static_cast<double>(acc_lse[h * S + i]), b = static_cast<double>(lse[h * S + i]);
      if (b == -INFINITY) continue;  // the block saw no key of this row
      const double m = std::max(a, b);
      const double wa = a == -INFINITY ? 0.0 : std::exp(a - m), wb = std::exp(b - m);
      const double l = wa + wb;
      A* ai = acc + (i * H + h) * d;
      const T* oi = out + (i * H + h) * d;
      for (int64_t t = 0; t < d; ++t)
        ai[t] = static_cast<A>((wa * static_cast<double>(ai[t]) + wb * static_cast<double>(oi[t])) / l);
      acc_lse[h * S + i] = static_cast<A>(m + std::log(l));
    }
  }
}

#define ULY_INSTANTIATE(T)                                                                                      \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t,   \
                                     int64_t, int64_t, double);                                                \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,  \
                                      const int32_t*, int64_t, int64_t, int64_t, int64_t, double);  \
  template void attention_forward_block<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int64_t,     \
                                           int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, double);      \
  template void attention_backward_block<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,      \
                                            const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,      \
                                            int64_t, int64_t, int64_t, double);                                \
  template void attention_merge<T, T>(T*, T*, const T*, const T*, int64_t, int64_t, int64_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
