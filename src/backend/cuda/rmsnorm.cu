#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/rmsnorm.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;
using detail::kVec;
using detail::Pack;

// One block per row; each thread reads and writes the same indices in both
// passes, so y may alias x.
template <class T>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* w, int64_t D, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * D;
  T* yr = y + row * D;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float v = to_f(xr[j]);
    ss += v * v;
  }
  ss = detail::block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) yr[j] = from_f<T>(to_f(w[j]) * (to_f(xr[j]) * r));
}

// dx_i = r * (w_i dy_i - x_i * r^2 * mean_j(w_j dy_j x_j)). One block per row.
template <class T>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const T* w, const float* rstd, int64_t D,
                                           bool accumulate) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* dyr = dy + row * D;
  const T* xr = x + row * D;
  T* dxr = dx + row * D;
  const float r = rstd[row];
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) dot += to_f(w[j]) * to_f(dyr[j]) * to_f(xr[j]);
  dot = detail::block_sum(dot, scratch);
  const float c = dot * r * r / static_cast<float>(D);
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float g = r * (to_f(w[j]) * to_f(dyr[j]) - to_f(xr[j]) * c);
    dxr[j] = from_f<T>(accumulate ? to_f(dxr[j]) + g : g);
  }
}

constexpr int kDwCols = 32, kDwRows = 8;

// dw_j += sum_n dy[n, j] x[n, j] rstd[n]. Block (32, 8) covers 32 columns of
// one chunk of rows; the chunk's partial sum goes into dw with one atomic per column.
template <class T>
__global__ void rmsnorm_backward_dw_kernel(float* dw, const T* dy, const T* x, const float* rstd, int64_t N, int64_t D,
                                           int64_t rows_per_chunk) {
  __shared__ float part[kDwRows][kDwCols + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kDwCols + threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t row1 = min(N, row0 + rows_per_chunk);
  float acc = 0.f;
  if (col < D)
    for (int64_t n = row0 + threadIdx.y; n < row1; n += kDwRows) acc += to_f(dy[n * D + col]) * to_f(x[n * D + col]) * rstd[n];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < D) {
    float s = 0.f;
    for (int i = 0; i < kDwRows; ++i) s += part[i][threadIdx.x];
    atomicAdd(dw + col, s);
  }
}


// The vectorised forms, used when rows split into 16-byte vectors (D a multiple of 8 in bf16, 4
// in fp32, 16-byte-aligned rows): each thread holds C vectors of a row in registers, so x is read
// once (the scalar kernels above read it twice), with 16-byte loads.
// One block per row.
template <class T, int C>
__global__ void rmsnorm_forward_vec_kernel(T* y, float* rstd, const T* x, const T* w, int64_t D, float eps) {
  constexpr int V = kVec<T>;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, nvec = D / V;
  const auto* xr = reinterpret_cast<const Pack<T>*>(x + row * D);
  float xv[C][V];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (i < nvec) {
      const Pack<T> p = xr[i];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        xv[c][k] = to_f(p.v[k]);
        ss += xv[c][k] * xv[c][k];
      }
    }
  }
  ss = detail::block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  const auto* wr = reinterpret_cast<const Pack<T>*>(w);
  auto* yr = reinterpret_cast<Pack<T>*>(y + row * D);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (i < nvec) {
      const Pack<T> wp = wr[i];
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = from_f<T>(to_f(wp.v[k]) * (xv[c][k] * r));
      yr[i] = out;
    }
  }
}

// dx and dw in one pass over dy and x (the scalar kernels read them twice): a block takes R rows
// at a time (blockIdx.x·R, then + gridDim.x·R, ...), all R rows' loads issued before the first is
// reduced (so that fewer blocks still keep enough loads in flight),
// keeps its columns' dw partial sums in registers and adds them into dw once at the end. Each row is
// read whole before its dx is written, so dx may alias dy.
template <class T, int C, int R>
__global__ void rmsnorm_backward_vec_kernel(T* dx, float* dw, const T* dy, const T* x, const T* w,
                                            const float* rstd, int64_t N, int64_t D, bool accumulate) {
  constexpr int V = kVec<T>;
  __shared__ float scratch[32 * R];
  const int64_t nvec = D / V;
  float wv[C][V], acc[C][V];
  const auto* wr = reinterpret_cast<const Pack<T>*>(w);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    Pack<T> wp{};
    if (i < nvec) wp = wr[i];
#pragma unroll
    for (int k = 0; k < V; ++k) wv[c][k] = to_f(wp.v[k]), acc[c][k] = 0.f;
  }
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * R; row0 < N; row0 += static_cast<int64_t>(gridDim.x) * R) {
    Pack<T> gp[R][C], xp[R][C], prev[R][C];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x, row = row0 + r;
        gp[r][c] = Pack<T>{}, xp[r][c] = Pack<T>{}, prev[r][c] = Pack<T>{};
        if (i < nvec && row < N) {
          gp[r][c] = reinterpret_cast<const Pack<T>*>(dy + row * D)[i];
          xp[r][c] = reinterpret_cast<const Pack<T>*>(x + row * D)[i];
          if (accumulate) prev[r][c] = reinterpret_cast<const Pack<T>*>(dx + row * D)[i];
        }
      }
    float dot[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      dot[r] = 0.f;
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int k = 0; k < V; ++k) dot[r] += wv[c][k] * to_f(gp[r][c].v[k]) * to_f(xp[r][c].v[k]);
    }
    detail::block_sum_n<R>(dot, scratch);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r;
      if (row >= N) break;
      const float rs = rstd[row];
      const float coef = dot[r] * rs * rs / static_cast<float>(D);
      auto* dxr = reinterpret_cast<Pack<T>*>(dx + row * D);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
        if (i < nvec) {
          Pack<T> out;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float g = to_f(gp[r][c].v[k]), xv = to_f(xp[r][c].v[k]);
            const float grad = rs * (wv[c][k] * g - xv * coef);
            out.v[k] = from_f<T>(accumulate ? to_f(prev[r][c].v[k]) + grad : grad);
            acc[c][k] += g * xv * rs;
          }
          dxr[i] = out;
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (i < nvec)
#pragma unroll
      for (int k = 0; k < V; ++k) atomicAdd(dw + i * V + k, acc[c][k]);
  }
}

// The vector form's launch shape for rows of D elements: threads per block (a multiple of 32,
// at most 256) and vectors per thread C in {1, 2, 4, 8}; C = 0 when the scalar kernels must run.
struct VecShape {
  int threads = 0, per_thread = 0;
};

template <class T>
VecShape vec_shape(int64_t D, std::initializer_list<const void*> rows) {
  VecShape s;
  if (D % kVec<T> != 0 || !detail::aligned16(rows)) return s;
  const int64_t nvec = D / kVec<T>;
  s.threads = static_cast<int>(std::min<int64_t>(256, (nvec + 31) / 32 * 32));
  const int64_t need = (nvec + s.threads - 1) / s.threads;
  for (int c : {1, 2, 4, 8})
    if (need <= c) {
      s.per_thread = c;
      break;
    }
  return s;
}

// Calls f.template operator()<C>() for the shape's C (a compile-time constant).
template <class F>
void with_per_thread(int c, F&& f) {
  switch (c) {
    case 1: f.template operator()<1>(); break;
    case 2: f.template operator()<2>(); break;
    case 4: f.template operator()<4>(); break;
    default: f.template operator()<8>(); break;
  }
}

}  // namespace

template <class T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* w, int64_t N, int64_t D, double eps,
                     cudaStream_t stream) {
  detail::check_rows(N, "rmsnorm_forward");
  ULY_CHECK(D > 0 || N == 0, "rmsnorm_forward: D must be positive, got " << D);
  if (N == 0) return;
  ULY_CHECK(N <= 2147483647LL, "rmsnorm_forward: " << N << " rows exceed one launch");
  const VecShape vs = vec_shape<T>(D, {y, x, w});
  if (vs.per_thread > 0) {
    with_per_thread(vs.per_thread, [&]<int C>() {
      rmsnorm_forward_vec_kernel<T, C><<<static_cast<unsigned>(N), vs.threads, 0, stream>>>(
          y, rstd, x, w, D, static_cast<float>(eps));
    });
    CUDA_CHECK_LAUNCH("rmsnorm_forward_vec_kernel");
    return;
  }
  rmsnorm_forward_kernel<T><<<static_cast<unsigned>(N), detail::row_threads(D), 0, stream>>>(
      y, rstd, x, w, D, static_cast<float>(eps));
  CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

template <class T>
void rmsnorm_backward(T* dx, float* dw, const T* dy, const T* x, const T* w, const float* rstd, int64_t N, int64_t D,
                      cudaStream_t stream, bool accumulate_dx) {
  detail::check_rows(N, "rmsnorm_backward");
  ULY_CHECK(D > 0 || N == 0, "rmsnorm_backward: D must be positive, got " << D);
  if (N == 0) return;
  const VecShape vs = vec_shape<T>(D, {dx, dy, x, w});
  if (vs.per_thread > 0) {
    // Two blocks per multiprocessor, each with two rows in flight when a row is one vector per
    // thread: every block adds its dw partials with one atomic per column at the end, and with one
    // block per 16 rows those same-address atomics took a third of the kernel's time (H200, 16K x
    // 2048: 0.156 ms with 1024 blocks of one row, 0.117 ms like this; docs/benchmarks.md).
    with_per_thread(vs.per_thread, [&]<int C>() {
      constexpr int R = C == 1 ? 2 : 1;
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((N + R - 1) / R, 2 * detail::sm_count()));
      rmsnorm_backward_vec_kernel<T, C, R><<<blocks, vs.threads, 0, stream>>>(dx, dw, dy, x, w, rstd, N, D,
                                                                             accumulate_dx);
    });
    CUDA_CHECK_LAUNCH("rmsnorm_backward_vec_kernel");
    return;
  }
  // dw first: it reads dy, which dx may overwrite.
  const int64_t col_blocks = (D + kDwCols - 1) / kDwCols;
  ULY_CHECK(col_blocks <= 2147483647LL, "rmsnorm_backward: D = " << D << " too large");
  int64_t chunks = std::max<int64_t>(1, 2048 / col_blocks);
  chunks = std::min<int64_t>(chunks, (N + 63) / 64);  // at least ~64 rows per chunk
  chunks = std::max<int64_t>(chunks, 1);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const int64_t grid_y = (N + rows_per_chunk - 1) / rows_per_chunk;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(grid_y));
  rmsnorm_backward_dw_kernel<T><<<grid, dim3(kDwCols, kDwRows), 0, stream>>>(dw, dy, x, rstd, N, D, rows_per_chunk);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_dw_kernel");
  rmsnorm_backward_dx_kernel<T><<<static_cast<unsigned>(N), detail::row_threads(D), 0, stream>>>(dx, dy, x, w, rstd,
                                                                                                D, accumulate_dx);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, double,
                                     cudaStream_t);
template void rmsnorm_forward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, const __nv_bfloat16*,
                                             int64_t, int64_t, double, cudaStream_t);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int64_t,
                                      int64_t, cudaStream_t, bool);
template void rmsnorm_backward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, const __nv_bfloat16*,
                                              const __nv_bfloat16*, const float*, int64_t, int64_t, cudaStream_t,
                                              bool);

}  // namespace ulysses::cuda
