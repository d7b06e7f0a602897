// Causal attention forward for Hopper (sm_90a), FlashAttention-3 style: a CTA of three warpgroups,
// one producer streaming K/V tiles into a shared-memory ring guarded by mbarriers and two consumers
// of 64 query rows each running Q K^T and P V on wgmma. Same semantics and output format as
// ulysses::cuda::attention_forward (attention.h): query i sees keys j with doc_start[i] <= j <= i,
// GQA with H % Hkv == 0, out [S, H, d] bf16, lse [H, S] float natural-log. Only the full form
// (no block offsets, no window beyond what doc_start says) and d = 64 or 128; callers check
// hopper_attention_supported and fall back to attention_forward elsewhere. The backward is
// attention_backward (or cuDNN's), which reads this kernel's out and lse, or (opt-in) the Hopper
// backward below. See docs/attention.md.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ulysses::cuda {

// Whether hopper_attention_forward runs this problem on the current device: an sm_90 GPU,
// d = 64 or 128, H % Hkv == 0. `why` (if given) gets the reason when not.
bool hopper_attention_supported(int64_t d, int64_t H, int64_t Hkv, std::string* why = nullptr);

// Arguments as attention_forward (attention.h). Throws an Error on an unsupported problem. Runs the
// variant that ULYSSES_HOPPER_VARIANT names (hopper_attention_variant).
void hopper_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv,
                              int64_t d, double scale, cudaStream_t stream);

// The kernel variant the environment asks for (read at each call; the CUDA backend reads it once, when
// it is made): ULYSSES_HOPPER_VARIANT=3 (or unset: the default) is the pipelined kernel (intra-warpgroup
// overlap of softmax and GEMMs, ping-pong between the two consumer warpgroups, 3 stages) with a TMA
// producer (K and V through tensor maps; see docs/attention.md), 4 variant 3 persistent (one CTA per SM
// walking the blocks; correct on an H100, 2026-12-07, faster than 3 on short documents, slower on long
// sequences). Variants 1 and 2 (cp.async loads) were removed. Anything else throws an Error naming the
// variable.
int hopper_attention_variant();

// The CTA order of the Hopper forward and backward (read at each call, for A/B runs):
// ULYSSES_HOPPER_CTA_ORDER=heads-inside dispatches the heaviest blocks of every head first (blockIdx.x
// walks the heads of one block), heads-outer the blocks of one head after another; unset, each kernel
// picks (hopper_cta_heads_inside_default). Anything else throws an Error naming the variable.
enum class HopperCtaOrder { kAuto, kHeadsInside, kHeadsOuter };
HopperCtaOrder hopper_cta_order();

// The order a kernel takes under kAuto. The forward: heads inside. The backward: heads inside where
// the longest document is shorter than 16K tokens, where the tail of heavy key blocks started late
// would cost most (a list-scheduling model, tools/cta_order_model.py: the heads-outer makespan 1.59x
// the mean load at 4K, 1.14x for 16K of 4K documents, 1.013x for one 16K sequence); heads outer from
// 16K, where neighbouring key blocks of one head running together share Q, dO and the dQ rows in L2
// (measured, H100, 2026-12-07: the backward at 32K 3.5% faster heads-outer, mean of two runs each).
bool hopper_cta_heads_inside_default(bool backward, int64_t longest);

// hopper_attention_forward with the variant given (3 or 4), for tests and benchmarks that run both.
void hopper_attention_forward_variant(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q,
                                      const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start,
                                      int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale, cudaStream_t stream,
                                      int variant);

// The backward (hopper_attention_backward.cu; correct on an H100, 2026-12-06): FlashAttention-3-style
// warp-specialised wgmma kernel with attention_backward's arguments, semantics and workspace
// (attention_backward_workspace_bytes(S, H, Hkv, d) bytes). Supported where the forward is.
bool hopper_attention_backward_supported(int64_t d, int64_t H, int64_t Hkv, std::string* why = nullptr);

// Arguments as attention_backward (attention.h). Throws an Error on an unsupported problem.
// `variant` 2: TMA loads of Q and dO, dQ through shared memory and TMA reductions; 3: variant 2 with
// its two consumer warpgroups coupled one pair late rather than in lockstep (docs/attention.md); 4:
// variant 2 with K and V held in registers at d 64 (variant 2 itself at d 128); 5: variant 4 with dV
// issued before dS^T is computed; 6: variant 5 with a pair's dQ reductions issued under the next
// pair's scores; 7: variant 5 with the dQ reductions issued by a producer warp (all correct on an
// H100, 2026-12-07; 6 the fastest at d 128, 7 at d 64); 9: the consumers split by product (one S^T,
// P^T and dV, the other dP^T, dS^T, dK and dQ; written 2026-12-07, not yet run on a GPU). Variant 1 (a cp.async producer, dQ by
// red.global.add) was removed: asked for, it throws. `deterministic` (variant 3 only): dQ's partial
// sums are added in a fixed order, so dq is bitwise the same from run to run (dk and dv always are).
// `longest`: the longest document's length where known (0: S), for the CTA order.
void hopper_attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                               const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                               const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start, int64_t S,
                               int64_t H, int64_t Hkv, int64_t d, double scale, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream, int variant = 6,
                               bool deterministic = false, int64_t longest = 0);

}  // namespace ulysses::cuda
