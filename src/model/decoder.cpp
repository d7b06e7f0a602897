#include "model/decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/attention_inputs.h"
#include "model/rope.h"

namespace ulysses {

KvCacheDecoder::KvCacheDecoder(LlamaWeights& weights, Backend& backend, int64_t max_tokens)
    : w_(weights), be_(backend), c_(weights.config()), max_tokens_(max_tokens) {
  ULY_CHECK(max_tokens > 0, "generate: the token budget must be positive, got " << max_tokens);
  ULY_CHECK(!weights.weights_sharded(), "generate: the decoder needs whole weights on this rank (not ZeRO stage 3)");
  const std::vector<float> inv = rope_inv_freq(c_.rope, c_.head_dim);
  inv_freq_ = be_.empty({static_cast<int64_t>(inv.size())}, DType::F32, Pool::Weights);
  be_.copy(inv_freq_, Tensor::borrow(const_cast<float*>(inv.data()), {static_cast<int64_t>(inv.size())}, DType::F32));
  inv_freq_length_ = c_.max_position_embeddings;
  const size_t per_layer = static_cast<size_t>(max_tokens) * c_.num_key_value_heads * c_.head_dim;
  k_cache_.assign(per_layer * c_.num_hidden_layers, 0.0f);
  v_cache_.assign(per_layer * c_.num_hidden_layers, 0.0f);
}

void KvCacheDecoder::attend(int64_t layer, const float* q, int64_t n, float* out) const {
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

std::vector<float> KvCacheDecoder::feed(const std::vector<int32_t>& ids) {
  const auto n = static_cast<int64_t>(ids.size());
  ULY_CHECK(n > 0, "generate: nothing to feed (an empty prompt?)");
  ULY_CHECK(length_ + n <= max_tokens_, "generate: " << length_ + n << " tokens exceed the cache of " << max_tokens_);
  const int64_t D = c_.hidden_size, H = c_.num_attention_heads, Hkv = c_.num_key_value_heads, d = c_.head_dim,
                F = c_.intermediate_size, V = c_.vocab_size;
  for (int32_t id : ids)
    ULY_CHECK(id >= 0 && id < V, "generate: token id " << id << " is outside the model's vocabulary [0, " << V << ")");
  const DType t = be_.act_dtype();
  if (rope_depends_on_length(c_.rope) && length_ + n > inv_freq_length_) {
    inv_freq_length_ = length_ + n;
    const std::vector<float> inv = rope_inv_freq(c_.rope, c_.head_dim, inv_freq_length_);
    be_.copy(inv_freq_, Tensor::borrow(const_cast<float*>(inv.data()), {static_cast<int64_t>(inv.size())}, DType::F32));
  }
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(length_ + i);
  Tensor ids_t = be_.empty({n}, DType::I32), pos_t = be_.empty({n}, DType::I32);
  be_.copy(ids_t, Tensor::borrow(const_cast<int32_t*>(ids.data()), {n}, DType::I32));
  be_.copy(pos_t, Tensor::borrow(pos.data(), {n}, DType::I32));

  Tensor x = be_.empty({n, D}, t), xn = be_.empty({n, D}, t), rstd = be_.empty({n}, DType::F32);
  be_.embedding_forward(x, ids_t, w_.embed().value);
  std::vector<float> q_host(n * H * d), k_host(n * Hkv * d), v_host(n * Hkv * d), attn_host(n * H * d);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    LlamaWeights::Layer& L = w_.layer(l);
    be_.rmsnorm_forward(xn, rstd, x, L.input_norm->value, c_.rms_norm_eps);
    Tensor q, k, v;
    qkv_forward(be_, c_, L, HeadRange::all(c_), xn, pos_t, inv_freq_, q, k, v, nullptr);
    Tensor qh = Tensor::borrow(q_host.data(), {n, H, d}, DType::F32);
    be_.copy(qh, q);
    Tensor kh = Tensor::borrow(k_host.data(), {n, Hkv, d}, DType::F32), vh = Tensor::borrow(v_host.data(), {n, Hkv * d}, DType::F32);
    be_.copy(kh, k);
    be_.copy(vh, v);
    const size_t base = (static_cast<size_t>(l) * max_tokens_ + length_) * Hkv * d;
    std::copy(k_host.begin(), k_host.end(), k_cache_.begin() + base);
    std::copy(v_host.begin(), v_host.end(), v_cache_.begin() + base);
    attend(l, q_host.data(), n, attn_host.data());
    Tensor attn = be_.empty({n, H * d}, t);
    be_.copy(attn, Tensor::borrow(attn_host.data(), {n, H * d}, DType::F32));
    be_.matmul(x, attn, L.wo->value, false, true, 1.0, 1.0);  // x += attn Wo^T
    if (L.o_bias) be_.bias_add(x, L.o_bias->value);
    be_.rmsnorm_forward(xn, rstd, x, L.post_norm->value, c_.rms_norm_eps);
    Tensor gate = be_.empty({n, F}, t), up = be_.empty({n, F}, t), h = be_.empty({n, F}, t);
    be_.matmul(gate, xn, L.w_gate->value, false, true);
    be_.matmul(up, xn, L.w_up->value, false, true);
    be_.gated_activation_forward(h, gate, up, c_.hidden_act);
    be_.matmul(x, h, L.w_down->value, false, true, 1.0, 1.0);  // x += h Wdown^T
  }
  const Tensor last = x.slice(n - 1, n);
  Tensor last_n = be_.empty({1, D}, t), last_rstd = be_.empty({1}, DType::F32), logits = be_.empty({1, V}, t);
  be_.rmsnorm_forward(last_n, last_rstd, last, w_.final_norm().value, c_.rms_norm_eps);
  be_.matmul(logits, last_n, w_.lm_head().value, false, true);
  std::vector<float> out(V);
  Tensor out_t = Tensor::borrow(out.data(), {1, V}, DType::F32);
  be_.copy(out_t, logits);
  be_.synchronize();
  length_ += n;
  return out;
}

}  // namespace ulysses
