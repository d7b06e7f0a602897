// Host side of the Hopper kernels' TMA (cp.async.bulk.tensor) operands: tiled tensor maps over the
// row-major [S, heads, d] tensors of attention, encoded with the driver's cuTensorMapEncodeTiled
// (found through the runtime's cudaGetDriverEntryPointByVersion, ABI 12.0, so that nothing links
// -lcuda). Used by hopper_attention_forward.cu (K, V) and hopper_attention_backward.cu (Q, dO, the
// fp32 dQ accumulator).
#pragma once
#include <cudaTypedefs.h>  // CUtensorMap, PFN_cuTensorMapEncodeTiled_v12000

#include <cstdint>

namespace ulysses::cuda {

// The tensor map of a row-major [rows, heads, cols] tensor of bf16 or fp32 elements (`elem_bytes`
// 2 or 4) at `ptr` (16-byte aligned), box {box_cols, 1, box_rows} (innermost first; box_cols x
// elem_bytes must be 128: the 128-byte swizzle's span), SWIZZLE_128B, L2 promotion 256 B, elements
// out of bounds read as zeros and never written. `op` names the caller in errors.
CUtensorMap hopper_tensor_map(const void* ptr, int elem_bytes, int64_t rows, int64_t heads, int64_t cols,
                              int box_cols, int box_rows, const char* op);

}  // namespace ulysses::cuda
