// Rotary position embedding, Hugging Face "rotate_half" layout.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;
namespace {

// sign = +1 rotates by +a (forward), -1 by -a (backward, the transpose).
template <class T>
void rope_apply(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d,
                int sign) {
  const int64_t half = d / 2;
#pragma omp parallel if (N * H * d >= kParallelMin)
  {
    std::vector<double> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < half; ++i) {
        // The angle is a float32 product, exactly as transformers forms it; only
        // cos/sin are then evaluated in double and rounded to T.
        const float a = static_cast<float>(pos[n]) * inv_freq[i];
        cs[i] = static_cast<double>(static_cast<T>(std::cos(static_cast<double>(a))));
        sn[i] = sign * static_cast<double>(static_cast<T>(std::sin(static_cast<double>(a))));
      }
      for (int64_t h = 0; h < H; ++h) {
        const T* xr = x + (n * H + h) * d;
        T* orow = out + (n * H + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          // Both halves are read before either is written: out may alias x.
          const double x1 = static_cast<double>(xr[i]), x2 = static_cast<double>(xr[i + half]);
          orow[i] = static_cast<T>(x1 * cs[i] - x2 * sn[i]);
          orow[i + half] = static_cast<T>(x2 * cs[i] + x1 * sn[i]);
        }
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d) {
  rope_apply(out, x, pos, inv_freq, N, H, d, +1);
}

template <class T>
void rope_backward(T* dx, const T* dout, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d) {
  rope_apply(dx, dout, pos, inv_freq, N, H, d, -1);
}

#define ULY_INSTANTIATE(T)                                                                                   \
  template void rope_forward<T>(T*, const T*, const int32_t*, const float*, int64_t, int64_t, int64_t);     \
  template void rope_backward<T>(T*, const T*, const int32_t*, const float*, int64_t, int64_t, int64_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
