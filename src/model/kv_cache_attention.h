// The attention of `ulysses generate`: new queries over a growing cache of keys and values.
//
// It is a SequenceAttention, so the decoder runs the model's own layer forward (the same
// projections, norms, RoPE and MLP as training) with this in place of the training attention.
// Each forward() call is the next layer's: layer 0 .. L-1 for the tokens of one feed, then
// advance() moves the cache past them. The attention itself runs on the host in float32 (one
// query row per new token: cheap next to the projections), so it is the same on every backend;
// on CUDA the q/k/v rows cross to the host and back (correct, not fast).
#pragma once
#include <cstdint>
#include <vector>

#include "io/hf_config.h"
#include "parallel/sequence_attention.h"

namespace ulysses {

class KvCacheAttention final : public SequenceAttention {
 public:
  // max_tokens: prompt + generated tokens the cache holds.
  KvCacheAttention(Backend& backend, const ModelConfig& config, int64_t max_tokens);

  int64_t length() const { return length_; }  // tokens cached (by completed feeds)
  // The n tokens the last layer's forward() appended are now part of the cache.
  void advance(int64_t n);

  // q: [n, H, d], k, v: [n, Hkv, d] for the n new tokens at positions [length(), length() + n);
  // appends k, v to the current layer's cache and writes out [n, H, d]. docs are not read: the
  // cache holds one sequence, attended causally (and within the sliding window, if any).
  void forward(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
               const Documents& docs) override;
  // Decoding has no backward pass: these refuse.
  void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const AttentionSaved& saved,
                const Documents& docs) override;
  void restore(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
               const Documents& docs, const Tensor& kept_out, const Tensor& kept_lse) override;
  void prepare_backward(AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out_local) override;

 private:
  void attend(int64_t layer, const float* q, int64_t n, float* out) const;  // q, out: [n, H, d]

  Backend& be_;
  const ModelConfig& c_;
  int64_t max_tokens_, length_ = 0;
  int64_t layer_ = 0;  // the layer the next forward() serves
  std::vector<float> k_cache_, v_cache_;  // [layers, max_tokens, Hkv, d]
  std::vector<float> q_host_, out_host_;  // one feed's rows, reused across layers
};

}  // namespace ulysses
