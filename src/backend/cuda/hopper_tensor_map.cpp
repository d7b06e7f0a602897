#include "backend/cuda/hopper_tensor_map.h"

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace ulysses::cuda {
namespace {

// Looked up once; an error names the caller.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_fn(const char* op) {
  static void* fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<void*>(nullptr);
    }
    return f;
  }();
  ULY_CHECK(fn != nullptr, op << ": the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or later is "
                                 "needed for the Hopper kernels)");
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

}  // namespace

CUtensorMap hopper_tensor_map(const void* ptr, int elem_bytes, int64_t rows, int64_t heads, int64_t cols,
                              int box_cols, int box_rows, const char* op) {
  ULY_CHECK((elem_bytes == 2 || elem_bytes == 4) && box_cols * elem_bytes == 128 && box_rows >= 1 && box_rows <= 256,
            op << ": bad tensor map box (" << box_cols << " x " << box_rows << " of " << elem_bytes << "-byte elements)");
  ULY_CHECK(reinterpret_cast<uintptr_t>(ptr) % 16 == 0, op << ": a tensor of the Hopper kernel is not 16-byte aligned");
  CUtensorMap m;
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(heads), cuuint64_t(rows)};
  const cuuint64_t strides[2] = {cuuint64_t(cols) * elem_bytes, cuuint64_t(heads) * cols * elem_bytes};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), 1, cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = encode_tiled_fn(op)(&m, type, 3, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ULY_CHECK(r == CUDA_SUCCESS, op << ": cuTensorMapEncodeTiled failed (CUresult " << int(r) << ", rows = " << rows
                                  << ", heads = " << heads << ", cols = " << cols << ")");
  return m;
}

}  // namespace ulysses::cuda
