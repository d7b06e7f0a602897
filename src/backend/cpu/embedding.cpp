// Embedding lookup and its scatter-add gradient.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;

template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static) if (N * D >= kParallelMin)
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(out + n * D, table + static_cast<int64_t>(ids[n]) * D, static_cast<size_t>(D) * sizeof(T));
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t D) {
  // Repeated ids would race if rows were split across threads, so threads own
  // column blocks instead and each walks all tokens in order (deterministic).
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (D + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * D >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = std::min(D, c0 + kBlock);
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dtable + static_cast<int64_t>(ids[n]) * D;
      const T* src = dout + n * D;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

#define ULY_INSTANTIATE(T)                                                                    \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t);        \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
