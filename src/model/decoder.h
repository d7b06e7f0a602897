// Autoregressive decoding with a KV cache, for `ulysses generate`.
//
// Each call to feed() runs the new tokens through the model with the backend's ops
// (embedding, RMSNorm, the layer's q/k/v as model/attention_inputs makes them for training,
// gated MLP, lm_head), appends their keys and
// values to the cache and returns the last token's logits. The attention of the new
// queries over the cache is computed on the host in float32 (one query row per new
// token: cheap next to the projections), so it runs unchanged on every backend; on
// CUDA the q/k/v rows cross to the host and back each step (correct, not fast).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/llama_weights.h"

namespace ulysses {

class KvCacheDecoder {
 public:
  // max_tokens: prompt + generated tokens the cache holds.
  KvCacheDecoder(LlamaWeights& weights, Backend& backend, int64_t max_tokens);

  // Runs ids at positions [length(), length() + n); returns the logits [vocab] of the last.
  std::vector<float> feed(const std::vector<int32_t>& ids);
  int64_t length() const { return length_; }

 private:
  void attend(int64_t layer, const float* q, int64_t n, float* out) const;  // q, out: [n, H, d]

  LlamaWeights& w_;
  Backend& be_;
  const ModelConfig& c_;
  int64_t max_tokens_, length_ = 0;
  Tensor inv_freq_;
  // Dynamic RoPE, as transformers decodes: the frequencies grow with the sequence past
  // max_position_embeddings, and the keys already cached keep the rotation they were given.
  int64_t inv_freq_length_ = 0;
  std::vector<float> k_cache_, v_cache_;  // [layers, max_tokens, Hkv, d]
};

}  // namespace ulysses
