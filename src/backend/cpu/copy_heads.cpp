#include <cstring>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

template <class T>
void copy_heads(T* dst, int64_t Hd, int64_t dst_head0, const T* src, int64_t Hs, int64_t src_head0, int64_t n_heads,
                int64_t N, int64_t d, bool accumulate) {
  const int64_t width = n_heads * d;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* out = dst + (n * Hd + dst_head0) * d;
    const T* in = src + (n * Hs + src_head0) * d;
    if (accumulate)
      for (int64_t i = 0; i < width; ++i) out[i] += in[i];
    else
      std::memcpy(out, in, sizeof(T) * width);
  }
}

template void copy_heads<float>(float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                bool);
template void copy_heads<double>(double*, int64_t, int64_t, const double*, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, bool);

}  // namespace ulysses::cpu
