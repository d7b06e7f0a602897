#include <cmath>

#include "backend/cpu/ops.h"
#include "core/dtype.h"

namespace ulysses::cpu {
namespace {

template <class T>
T load(T g) {
  return g;
}
inline float load(Bf16 g) { return bf16_to_float(g.bits); }

}  // namespace

template <class T, class G>
void adamw_step(T* master, T* m, T* v, T* weight, const G* grad, int64_t n, double lr, double beta1, double beta2,
                double eps, double weight_decay, int64_t step, double grad_scale) {
  // The same operation order as torch.optim.AdamW's single-tensor path, in T.
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(beta1, static_cast<double>(step))));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step))));
  const T e = static_cast<T>(eps), gs = static_cast<T>(grad_scale);
  // simd: the library builds at -O2, where GCC would not vectorise this loop by itself;
  // every element's arithmetic is the same IEEE operations either way.
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const T g = static_cast<T>(load(grad[i])) * gs;
    T p = master[i] * decay;
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    p -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + e);
    master[i] = p;
    weight[i] = p;
  }
}

template <class T>
double sum_squares(const T* x, int64_t n) {
  double s = 0;
  // A fixed reduction order (no OpenMP) keeps clipping bit-reproducible.
  for (int64_t i = 0; i < n; ++i) {
    const double e = load(x[i]);
    s += e * e;
  }
  return s;
}

template void adamw_step<float>(float*, float*, float*, float*, const float*, int64_t, double, double, double, double,
                                double, int64_t, double);
template void adamw_step<double>(double*, double*, double*, double*, const double*, int64_t, double, double, double,
                                 double, double, int64_t, double);
template void adamw_step<float, Bf16>(float*, float*, float*, float*, const Bf16*, int64_t, double, double, double,
                                      double, double, int64_t, double);
template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);
template double sum_squares<Bf16>(const Bf16*, int64_t);

}  // namespace ulysses::cpu
