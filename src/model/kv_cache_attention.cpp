#include "model/kv_cache_attention.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"

namespace ulysses {

KvCacheAttention::KvCacheAttention(Backend& backend, const ModelConfig& config, int64_t max_tokens)
    : be_(backend), c_(config), max_tokens_(max_tokens) {
  ULY_CHECK(max_tokens > 0, "generate: the token budget must be positive, got " << max_tokens);
  // Both caches are float32 on the host: checked against what the host has before allocating
  // (in long double: a hostile --max-new-tokens times the model's shape must not wrap).
  const long double bytes = 2.0L * 4.0L * static_cast<long double>(max_tokens) * c_.num_key_value_heads *
                            c_.head_dim * c_.num_hidden_layers;
  const long double available = static_cast<long double>(host_memory_available());
  ULY_CHECK(bytes <= available, "generate: the KV cache for " << max_tokens << " tokens needs "
                                    << static_cast<double>(bytes / (1024.0L * 1024 * 1024)) << " GiB of host memory and "
                                    << static_cast<double>(available / (1024.0L * 1024 * 1024))
                                    << " GiB are available; lower --max-new-tokens or shorten the prompt");
  const size_t per_layer = static_cast<size_t>(max_tokens) * c_.num_key_value_heads * c_.head_dim;
  k_cache_.assign(per_layer * c_.num_hidden_layers, 0.0f);
  v_cache_.assign(per_layer * c_.num_hidden_layers, 0.0f);
}

void KvCacheAttention::advance(int64_t n) {
  ULY_CHECK(layer_ == c_.num_hidden_layers, "generate: the KV cache advanced after " << layer_ << " of "
                                                                                     << c_.num_hidden_layers << " layers");
  length_ += n;
  layer_ = 0;
}

void KvCacheAttention::forward(Tensor& out, AttentionSaved&, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents&) {
  const int64_t n = q.dim(0), H = c_.num_attention_heads, Hkv = c_.num_key_value_heads, d = c_.head_dim;
  ULY_CHECK(layer_ < c_.num_hidden_layers, "generate: more attention calls than layers in one feed");
  ULY_CHECK(length_ + n <= max_tokens_, "generate: " << length_ + n << " tokens exceed the cache of " << max_tokens_);
  // The new keys and values go straight into the layer's cache rows.
  const size_t base = (static_cast<size_t>(layer_) * max_tokens_ + length_) * Hkv * d;
  Tensor kh = Tensor::borrow(k_cache_.data() + base, k.shape(), DType::F32);
  Tensor vh = Tensor::borrow(v_cache_.data() + base, v.shape(), DType::F32);
  q_host_.resize(static_cast<size_t>(n * H * d));
  out_host_.resize(q_host_.size());
  Tensor qh = Tensor::borrow(q_host_.data(), q.shape(), DType::F32);
  be_.copy(qh, q);
  be_.copy(kh, k);
  be_.copy(vh, v);
  be_.synchronize();
  attend(layer_, q_host_.data(), n, out_host_.data());
  be_.copy(out, Tensor::borrow(out_host_.data(), out.shape(), DType::F32));
  ++layer_;
}

void KvCacheAttention::attend(int64_t layer, const float* q, int64_t n, float* out) const {
  const int64_t H = c_.num_attention_heads, Hkv = c_.num_key_value_heads, d = c_.head_dim, group = H / Hkv;
  const float* K = k_cache_.data() + static_cast<size_t>(layer) * max_tokens_ * Hkv * d;
  const float* V = v_cache_.data() + static_cast<size_t>(layer) * max_tokens_ * Hkv * d;
  const float scale = static_cast<float>(c_.attention_scale());
  const int64_t first = length_;  // position of the first new token
#pragma omp parallel for collapse(2) schedule(static) if (n * H > 16)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = h / group, keys = first + i + 1;  // causal: up to and including itself
      // A sliding window of W sees the last W keys only.
      const int64_t j0 = c_.sliding_window > 0 ? std::max<int64_t>(0, keys - c_.sliding_window) : 0;
      const float* qi = q + (i * H + h) * d;
      std::vector<float> p(keys);
      float m = -INFINITY;
      for (int64_t j = j0; j < keys; ++j) {
        const float* kj = K + (j * Hkv + kv) * d;
        float s = 0;
        for (int64_t e = 0; e < d; ++e) s += qi[e] * kj[e];
        p[j] = s * scale;
        m = std::max(m, p[j]);
      }
      double z = 0;
      for (int64_t j = j0; j < keys; ++j) z += (p[j] = std::exp(p[j] - m));
      float* o = out + (i * H + h) * d;
      std::fill(o, o + d, 0.0f);
      for (int64_t j = j0; j < keys; ++j) {
        const float a = static_cast<float>(p[j] / z);
        const float* vj = V + (j * Hkv + kv) * d;
        for (int64_t e = 0; e < d; ++e) o[e] += a * vj[e];
      }
    }
}

void KvCacheAttention::backward(Tensor&, Tensor&, Tensor&, const Tensor&, const AttentionSaved&, const Documents&) {
  ULY_FAIL("generate: the KV-cache attention decodes only; it has no backward pass");
}

void KvCacheAttention::restore(Tensor&, AttentionSaved&, const Tensor&, const Tensor&, const Tensor&,
                               const Documents&, const Tensor&, const Tensor&) {
  ULY_FAIL("generate: the KV-cache attention keeps no attention outputs to restore");
}

void KvCacheAttention::prepare_backward(AttentionSaved&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&) {
  ULY_FAIL("generate: the KV-cache attention decodes only; it has no backward pass");
}

}  // namespace ulysses
