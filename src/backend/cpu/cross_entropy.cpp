// Cross-entropy over a tile of logits, forward and backward in one pass over
// each row (the tiled loss never keeps a [S, vocab] matrix).
#include <cmath>
#include <cstdint>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;

template <class T>
void cross_entropy_forward_backward(T* dlogits, T* losses, const T* logits, const int32_t* targets, int64_t N,
                                    int64_t V, double grad_scale) {
#pragma omp parallel for schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T* dx = dlogits + n * V;
    const int32_t t = targets[n];
    if (t == -100) {
      losses[n] = T(0);
      for (int64_t j = 0; j < V; ++j) dx[j] = T(0);
      continue;
    }
    // Every read of the row (max, sum, target logit) happens before the first
    // write: dlogits may alias logits. The final loop reads x[j] before writing dx[j].
    // Everything is taken relative to the row's max m and lse is never formed: at |m| ~ 1e30,
    // m + log(sum) rounds to m, and (m + log V) - x[t] gave a loss of 0 where ln V is right.
    // With the differences x - m (exact for nearby values) the loss and the gradient are
    // accurate for every finite row; a non-finite logit gives a non-finite loss, for the
    // caller's non-finite policy to refuse.
    double m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) m = std::fmax(m, static_cast<double>(x[j]));
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(x[j]) - m);
    losses[n] = static_cast<T>(std::log(sum) - (static_cast<double>(x[t]) - m));
    const double inv_sum = 1.0 / sum;
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(static_cast<double>(x[j]) - m) * inv_sum;
      dx[j] = static_cast<T>((p - (j == t ? 1.0 : 0.0)) * grad_scale);
    }
  }
}

#define ULY_INSTANTIATE(T) \
  template void cross_entropy_forward_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, double);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
