// Dense algebra for the CPU reference: GEMM through OpenBLAS, elementwise adds
// through OpenMP. BLAS runs its own threads, so it is never called from inside
// an OpenMP parallel region.
#include <cblas.h>

#include <climits>
#include <cstdint>

#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ulysses::cpu {

// Below this much work a parallel region costs more than it saves (small tiles, tests).
constexpr int64_t kParallelMin = int64_t{1} << 14;
namespace {

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K, double alpha, const float* A,
          blasint lda, const float* B, blasint ldb, double beta, float* C, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, static_cast<float>(alpha), A, lda, B, ldb, static_cast<float>(beta), C,
              ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K, double alpha, const double* A,
          blasint lda, const double* B, blasint ldb, double beta, double* C, blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

template <class T>
void matmul(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, double alpha,
            double beta) {
  ULY_CHECK(M >= 0 && N >= 0 && K >= 0, "matmul: negative size M=" << M << " N=" << N << " K=" << K);
  // OpenBLAS takes 32-bit sizes and leading dimensions.
  ULY_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX,
            "matmul: M=" << M << " N=" << N << " K=" << K << " exceeds the 32-bit BLAS interface; tile the product");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // BLAS rejects lda = 0; the product is empty, so C = beta * C (beta = 0 clears, even NaN).
    const int64_t n = M * N;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) C[i] = beta == 0.0 ? T(0) : static_cast<T>(beta * C[i]);
    return;
  }
  const blasint lda = static_cast<blasint>(trans_a ? M : K);
  const blasint ldb = static_cast<blasint>(trans_b ? K : N);
  gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
       static_cast<blasint>(N), static_cast<blasint>(K), alpha, A, lda, B, ldb, beta, C, static_cast<blasint>(N));
}

template <class T>
void add(T* y, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <class T>
void axpy(T* y, const T* x, double alpha, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(static_cast<double>(y[i]) + alpha * static_cast<double>(x[i]));
}

void axpy_bf16(Bf16* y, const float* x, double alpha, int64_t n) {
  const auto a = static_cast<float>(alpha);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i].bits = float_to_bf16(bf16_to_float(y[i].bits) + a * x[i]);
}

#define ULY_INSTANTIATE(T)                                                                                      \
  template void matmul<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, bool, bool, double, double);      \
  template void add<T>(T*, const T*, const T*, int64_t);                                                        \
  template void axpy<T>(T*, const T*, double, int64_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(double)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cpu
