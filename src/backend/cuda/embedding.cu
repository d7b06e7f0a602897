#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/embedding.h"
#include "backend/cuda/launch.h"

namespace ulysses::cuda {
namespace {

// One block per token row.
// Ids are validated before they reach the device (no read-back in the step); an id
// outside [0, V) all the same never reads or writes out of bounds: its row is NaN
// in forward (loud) and contributes nothing in backward.
template <class T>
__global__ void embedding_forward_kernel(T* out, const int32_t* ids, const T* table, int64_t V, int64_t D) {
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  T* dst = out + row * D;
  if (id < 0 || id >= V) {
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) dst[j] = detail::from_f<T>(__int_as_float(0x7fc00000));
    return;
  }
  const T* src = table + static_cast<int64_t>(id) * D;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) dst[j] = src[j];
}

template <class T>
__global__ void embedding_backward_kernel(float* dtable, const T* dout, const int32_t* ids, int64_t V, int64_t D) {
  const int64_t row = blockIdx.x;
  if (ids[row] < 0 || ids[row] >= V) return;
  float* dst = dtable + static_cast<int64_t>(ids[row]) * D;
  const T* src = dout + row * D;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) atomicAdd(dst + j, detail::to_f(src[j]));
}

}  // namespace

template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t V, int64_t D,
                       cudaStream_t stream) {
  detail::check_rows(N, "embedding_forward");
  detail::check_nonneg(D, "D", "embedding_forward");
  if (N == 0 || D == 0) return;
  embedding_forward_kernel<T><<<static_cast<unsigned>(N), detail::row_threads(D), 0, stream>>>(out, ids, table, V, D);
  CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

template <class T>
void embedding_backward(float* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t V, int64_t D,
                        cudaStream_t stream) {
  detail::check_rows(N, "embedding_backward");
  detail::check_nonneg(D, "D", "embedding_backward");
  if (N == 0 || D == 0) return;
  embedding_backward_kernel<T><<<static_cast<unsigned>(N), detail::row_threads(D), 0, stream>>>(dtable, dout, ids, V, D);
  CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t, cudaStream_t);
template void embedding_forward<__nv_bfloat16>(__nv_bfloat16*, const int32_t*, const __nv_bfloat16*, int64_t, int64_t,
                                               int64_t, cudaStream_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, cudaStream_t);
template void embedding_backward<__nv_bfloat16>(float*, const __nv_bfloat16*, const int32_t*, int64_t, int64_t, int64_t,
                                                cudaStream_t);

}  // namespace ulysses::cuda
