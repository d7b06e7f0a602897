// Gated activations h = act(gate) * up (core/activation.h), evaluated in double.
#include <cstdint>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;

template <class T>
void gated_activation_forward(T* h, const T* gate, const T* up, int64_t n, Activation act) {
  dispatch_activation(act, [&]<class A>() {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i)
      h[i] = static_cast<T>(A::value(static_cast<double>(gate[i])) * static_cast<double>(up[i]));
  });
}

template <class T>
void gated_activation_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n,
                               Activation act) {
  dispatch_activation(act, [&]<class A>() {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const double g = static_cast<double>(gate[i]), u = static_cast<double>(up[i]), d = static_cast<double>(dh[i]);
      dgate[i] = static_cast<T>(d * u * A::derivative(g));
      dup[i] = static_cast<T>(d * A::value(g));
    }
  });
}

#define ULY_INSTANTIATE(T)                                                                             \
  template void gated_activation_forward<T>(T*, const T*, const T*, int64_t, Activation);             \
  template void gated_activation_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, Activation);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
