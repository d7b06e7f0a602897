// SwiGLU: h = silu(gate) * up, silu(g) = g * sigmoid(g), evaluated in double.
#include <cmath>
#include <cstdint>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;
namespace {
inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }
}  // namespace

template <class T>
void swiglu_forward(T* h, const T* gate, const T* up, int64_t N, int64_t F) {
  const int64_t n = N * F;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(gate[i]);
    h[i] = static_cast<T>(g * sigmoid(g) * static_cast<double>(up[i]));
  }
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t N, int64_t F) {
  // d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g).
  const int64_t n = N * F;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(gate[i]), u = static_cast<double>(up[i]), d = static_cast<double>(dh[i]);
    const double s = sigmoid(g);
    dgate[i] = static_cast<T>(d * u * s * (1.0 + g * (1.0 - s)));
    dup[i] = static_cast<T>(d * g * s);
  }
}

#define ULY_INSTANTIATE(T)                                                                          \
  template void swiglu_forward<T>(T*, const T*, const T*, int64_t, int64_t);                       \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
