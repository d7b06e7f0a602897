// Autoregressive decoding with a KV cache, for `ulysses generate`.
//
// Each call to feed() runs the new tokens through the model's own forward (LlamaModel with a
// KvCacheAttention in place of the training attention: the same projections, norms, RoPE and
// MLP), the cache growing by their keys and values, and returns the last token's logits.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/kv_cache_attention.h"
#include "model/llama.h"
#include "model/llama_weights.h"

namespace ulysses {

class KvCacheDecoder {
 public:
  // max_tokens: prompt + generated tokens the cache holds.
  KvCacheDecoder(LlamaWeights& weights, Backend& backend, int64_t max_tokens);
  ~KvCacheDecoder();

  // Runs ids at positions [length(), length() + n); returns the logits [vocab] of the last.
  std::vector<float> feed(const std::vector<int32_t>& ids);
  int64_t length() const { return cache_->length(); }

 private:
  LlamaWeights& w_;
  Backend& be_;
  const ModelConfig& c_;
  KvCacheAttention* cache_;  // owned by model_
  std::unique_ptr<LlamaModel> model_;
};

}  // namespace ulysses
