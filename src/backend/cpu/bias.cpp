// The bias of a linear layer: added to every row, and its gradient summed over the rows
// (in double, whatever T).
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;

template <class T>
void bias_add(T* y, const T* b, int64_t N, int64_t n) {
#pragma omp parallel for schedule(static) if (N * n >= kParallelMin)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * n + j] += b[j];
}

template <class T>
void bias_backward(T* db, const T* dy, int64_t N, int64_t n) {
#pragma omp parallel for schedule(static) if (N * n >= kParallelMin)
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t i = 0; i < N; ++i) s += static_cast<double>(dy[i * n + j]);
    db[j] = static_cast<T>(static_cast<double>(db[j]) + s);
  }
}

#define ULY_INSTANTIATE(T)                                         \
  template void bias_add<T>(T*, const T*, int64_t, int64_t);      \
  template void bias_backward<T>(T*, const T*, int64_t, int64_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
