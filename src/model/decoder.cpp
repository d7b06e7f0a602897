#include "model/decoder.h"

#include "core/error.h"

namespace ulysses {

KvCacheDecoder::KvCacheDecoder(LlamaWeights& weights, Backend& backend, int64_t max_tokens)
    : w_(weights), be_(backend), c_(weights.config()) {
  ULY_CHECK(!weights.weights_sharded(), "generate: the decoder needs whole weights on this rank (not ZeRO stage 3)");
  auto cache = std::make_unique<KvCacheAttention>(backend, c_, max_tokens);
  cache_ = cache.get();
  StepOptions plain;  // no tiling, no checkpoints: one feed is a few tokens
  plain.grad_dtype = weights.grad_dtype();
  model_ = std::make_unique<LlamaModel>(weights, backend, std::move(cache), plain);
}

KvCacheDecoder::~KvCacheDecoder() = default;

std::vector<float> KvCacheDecoder::feed(const std::vector<int32_t>& ids) {
  const auto n = static_cast<int64_t>(ids.size());
  ULY_CHECK(n > 0, "generate: nothing to feed (an empty prompt?)");
  const int64_t first = cache_->length(), D = c_.hidden_size, V = c_.vocab_size;  // the cache checks its room
  for (int32_t id : ids)
    ULY_CHECK(id >= 0 && id < V, "generate: token id " << id << " is outside the model's vocabulary [0, " << V << ")");
  // The new tokens as one shard of a sequence: their positions follow the cache; one document (the
  // cache attention reads no documents); no targets; dynamic RoPE scaled to the whole length so far,
  // while the keys already cached keep the rotation they were given, as transformers decodes.
  SequenceShard shard;
  shard.S_global = n;
  shard.offset = first;
  shard.ids = ids;
  shard.targets.assign(static_cast<size_t>(n), kIgnoreIndex);
  shard.positions.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) shard.positions[i] = static_cast<int32_t>(first + i);
  shard.doc_start.assign(static_cast<size_t>(n), 0);
  shard.rope_length = first + n;
  const Tensor x = model_->forward_hidden(shard);
  cache_->advance(n);

  const DType t = be_.act_dtype();
  const Tensor last = x.slice(n - 1, n);
  Tensor last_n = be_.empty({1, D}, t), last_rstd = be_.empty({1}, DType::F32), logits = be_.empty({1, V}, t);
  be_.rmsnorm_forward(last_n, last_rstd, last, w_.final_norm().value, c_.rms_norm_eps);
  be_.matmul(logits, last_n, w_.lm_head().value, false, true);
  std::vector<float> out(V);
  Tensor out_t = Tensor::borrow(out.data(), {1, V}, DType::F32);
  be_.copy(out_t, logits);
  be_.synchronize();
  return out;
}

}  // namespace ulysses
