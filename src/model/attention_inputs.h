// q, k and v of a decoder layer from its normed input, as the architecture says
// (ModelConfig): the projections, their biases (Qwen2; attention_bias), RMSNorm over each
// head of q and k (Qwen3), then RoPE; and the way back. The training step (whole layers or
// one chunk of heads at a time) and the KV-cache decoder share it.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "model/gradient_accumulator.h"
#include "model/llama_weights.h"
#include "model/lora_weights.h"

namespace ulysses {

// Which heads: query heads [q0, q0 + q), key/value heads [kv0, kv0 + kv) (all of them, or a chunk).
struct HeadRange {
  int64_t q0 = 0, q = 0, kv0 = 0, kv = 0;
  static HeadRange all(const ModelConfig& c) { return {0, c.num_attention_heads, 0, c.num_key_value_heads}; }
};

// What the q/k norms' backward needs (qk_norm only): q and k before their norms, and the
// norms' 1/rms per (token, head).
struct QkNormSaved {
  Tensor q_pre, k_pre;    // [N, h, d], [N, hkv, d]
  Tensor rstd_q, rstd_k;  // [N h], [N hkv] float32
};

// q: [N, h, d], k and v: [N, hkv, d] (allocated here, in the backend's act_dtype) from
// xn: [N, D]; pos: [N] int32 global positions; inv_freq: [d/2]. saved (may be null when
// nothing goes backward) receives what the q/k norms' backward needs. lora (may be null): layer
// `layer`'s adapters on q, k and v are added to the projections (their rows of the range).
void qkv_forward(Backend& be, const ModelConfig& c, const LlamaWeights::Layer& L, const HeadRange& r,
                 const Tensor& xn, const Tensor& pos, const Tensor& inv_freq, Tensor& q, Tensor& k, Tensor& v,
                 QkNormSaved* saved, const LoraWeights* lora = nullptr, int64_t layer = 0);

// dq: [N, h, d] and dk: [N, hkv, d], the gradients of the attention's q and k, become in place
// the gradients of the projections' outputs (through RoPE and the q/k norms: the norms' weight
// gradients added); the biases' gradients (dv: [N, hkv, d] for v's) added too. The caller then
// runs the projections' backward (qkv_projections_backward).
void qkv_backward(Backend& be, GradientAccumulator& grads, const ModelConfig& c, const LlamaWeights::Layer& L,
                  const HeadRange& r, const Tensor& pos, const Tensor& inv_freq, Tensor& dq, Tensor& dk,
                  const Tensor& dv, const QkNormSaved& saved);

// dxn: [N, D] (=, or += with accumulate) the gradient of the normed input through the q, k and v
// projections of the range (dq, dk, dv as qkv_backward leaves them); their weights' gradients
// added, or skipped when the weights are frozen (grads' model is LoRA's), and the adapters'
// (lora, may be null) added.
void qkv_projections_backward(Backend& be, GradientAccumulator& grads, const ModelConfig& c,
                              const LlamaWeights::Layer& L, const HeadRange& r, const Tensor& xn, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, Tensor& dxn, bool accumulate,
                              const LoraWeights* lora, int64_t layer);

}  // namespace ulysses
