// RMSNorm as Llama uses it: y = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps),
// with the reductions in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;

template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t D, double eps) {
#pragma omp parallel for schedule(static) if (N * D >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    double ss = 0;
    for (int64_t c = 0; c < D; ++c) ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    rstd[n] = static_cast<T>(r);
    T* yr = y + n * D;
    for (int64_t c = 0; c < D; ++c) yr[c] = static_cast<T>(static_cast<double>(w[c]) * (static_cast<double>(xr[c]) * r));
  }
}

template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t D,
                      bool accumulate_dx) {
  // dx_c = r * w_c dy_c - r^3 / D * x_c * sum_k(w_k dy_k x_k)
#pragma omp parallel for schedule(static) if (N * D >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    const T* dyr = dy + n * D;
    const double r = static_cast<double>(rstd[n]);
    double dot = 0;
    for (int64_t c = 0; c < D; ++c)
      dot += static_cast<double>(w[c]) * static_cast<double>(dyr[c]) * static_cast<double>(xr[c]);
    const double k = r * r * r * dot / static_cast<double>(D);
    T* dxr = dx + n * D;
    for (int64_t c = 0; c < D; ++c) {
      const T g = static_cast<T>(r * static_cast<double>(w[c]) * static_cast<double>(dyr[c]) -
                                 k * static_cast<double>(xr[c]));
      dxr[c] = accumulate_dx ? dxr[c] + g : g;
    }
  }
  // dw_c += sum_n dy_nc x_nc r_n: threads own column blocks so that the sum
  // over rows needs no reduction across threads.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (D + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * D >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = std::min(D, c0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const double r = static_cast<double>(rstd[n]);
      const T* xr = x + n * D;
      const T* dyr = dy + n * D;
      for (int64_t c = c0; c < c1; ++c)
        acc[c - c0] += static_cast<double>(dyr[c]) * static_cast<double>(xr[c]) * r;
    }
    for (int64_t c = c0; c < c1; ++c) dw[c] = static_cast<T>(static_cast<double>(dw[c]) + acc[c - c0]);
  }
}

#define ULY_INSTANTIATE(T)                                                                                     \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);                     \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, bool);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
