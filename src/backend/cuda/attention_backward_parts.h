// Internal: the parts of attention_backward (attention_backward.cu) that other backward kernels
// with the same workspace share (hopper_attention_backward.cu): the workspace layout, the argument
// checks and kernel parameters, the preprocessing (dq_acc zeroed, D = rowsum(dout * out), qbmin /
// sufmin) and the final dq conversion. Not part of the public API (attention.h). CUDA sources only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention_backward_kernel.cuh"

namespace ulysses::cuda::attn_bwd {

// Byte offsets of the workspace's parts (each a multiple of 256) and its total size, for Sq query
// rows; layout in attention_backward.cu and docs/attention.md.
struct WorkspaceParts {
  size_t dq_acc = 0, dsum = 0, qbmin = 0, sufmin = 0, dq_order = 0, total = 0;
};
WorkspaceParts workspace_layout(int64_t Sq, int64_t H, int64_t d);

// Checks a backward call's workspace (size and alignment) and pointers as attention_backward_block
// does (shapes and offsets are the caller's to check first; Sq or Sk > 0) and returns its kernel
// parameters, query blocks of `br` rows (nqb = ceil(Sq / br)); *w_out gets the workspace layout.
attn::BwdParams checked_params(const char* op, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                               const __nv_bfloat16* dout, const __nv_bfloat16* out, const float* lse,
                               const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                               const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                               int64_t Hkv, int64_t d, double scale, void* workspace, size_t workspace_bytes, int br,
                               WorkspaceParts* w_out);

// Zeroes dq_acc [Sq, H, d] and dq_order, writes dsum [H, Sq] from dout and out, and qbmin / sufmin over query
// blocks of `br` rows (br = 32 or 64; ceil(Sq / br) must fit the layout's, i.e. br >= the FA2
// kernel's tile for d) from doc_start (the rows' own, q_off applied). d: 16, 32, 64 or 128.
void preprocess(char* ws, const WorkspaceParts& w, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                const int32_t* doc_start, int64_t Sq, int64_t H, int64_t d, int br, cudaStream_t stream);

// dq = bf16(scale * dq_acc), n = Sq * H * d elements.
void convert_dq(__nv_bfloat16* dq, const float* dq_acc, int64_t n, float scale, cudaStream_t stream);

}  // namespace ulysses::cuda::attn_bwd
