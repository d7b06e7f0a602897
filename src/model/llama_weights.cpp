#include "model/llama_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ulysses {

LlamaWeights::LlamaWeights(const ModelConfig& c, DType grad_dtype, ParameterSharding sharding)
    : ParameterSet(grad_dtype, sharding), config_(c) {
  const int64_t D = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  embed_ = add("model.embed_tokens.weight", {V, D});
  constexpr size_t kNone = SIZE_MAX;
  struct Idx { size_t in, q, k, v, o, post, g, u, d, qb = kNone, kb = kNone, vb = kNone, ob = kNone, qn = kNone, kn = kNone; };
  std::vector<Idx> idx;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Idx i;
    i.in = add(p + "input_layernorm.weight", {D});
    i.q = add(p + "self_attn.q_proj.weight", {c.q_dim(), D});
    i.k = add(p + "self_attn.k_proj.weight", {c.kv_dim(), D});
    i.v = add(p + "self_attn.v_proj.weight", {c.kv_dim(), D});
    i.o = add(p + "self_attn.o_proj.weight", {D, c.q_dim()});
    i.post = add(p + "post_attention_layernorm.weight", {D});
    i.g = add(p + "mlp.gate_proj.weight", {F, D});
    i.u = add(p + "mlp.up_proj.weight", {F, D});
    i.d = add(p + "mlp.down_proj.weight", {D, F});
    if (c.qkv_bias) {
      i.qb = add(p + "self_attn.q_proj.bias", {c.q_dim()});
      i.kb = add(p + "self_attn.k_proj.bias", {c.kv_dim()});
      i.vb = add(p + "self_attn.v_proj.bias", {c.kv_dim()});
    }
    if (c.o_bias) i.ob = add(p + "self_attn.o_proj.bias", {D});
    if (c.qk_norm) {
      i.qn = add(p + "self_attn.q_norm.weight", {c.head_dim});
      i.kn = add(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    idx.push_back(i);
  }
  final_norm_ = add("model.norm.weight", {D});
  lm_head_ = c.tie_word_embeddings ? embed_ : add("lm_head.weight", {V, D});
  // Pointers only after params() stops growing.
  const auto at = [&](size_t i) { return i == kNone ? nullptr : &params()[i]; };
  for (const Idx& i : idx) {
    Layer L{&params()[i.in], &params()[i.q], &params()[i.k], &params()[i.v], &params()[i.o],
            &params()[i.post], &params()[i.g], &params()[i.u], &params()[i.d]};
    L.q_bias = at(i.qb);
    L.k_bias = at(i.kb);
    L.v_bias = at(i.vb);
    L.o_bias = at(i.ob);
    L.q_norm = at(i.qn);
    L.k_norm = at(i.kn);
    layers_.push_back(L);
  }
}

void LlamaWeights::load(const ModelFolder& folder, Backend& backend) {
  allocate(backend);
  folder.read_ahead();  // the disk reads ahead while earlier tensors are converted and uploaded
  for (auto& p : params()) {
    ULY_CHECK(folder.contains(p.name), folder.dir() << ": tensor '" << p.name
                                                    << "' is missing from the weights (expected shape "
                                                    << shape_str(p.shape) << " from config.json)");
    const SafetensorsInfo& info = folder.info(p.name);
    const SafetensorsFile& file = folder.file_of(p.name);
    ULY_CHECK(is_float(info.dtype), file.path() << ": tensor '" << p.name << "' has dtype "
                                                << dtype_name(info.dtype) << "; weights must be F32, BF16 or F16");
    ULY_CHECK(info.shape == p.shape, file.path() << ": tensor '" << p.name << "' has shape " << shape_str(info.shape)
                                                 << " but config.json implies " << shape_str(p.shape)
                                                 << " (check hidden_size, intermediate_size, heads, head_dim, "
                                                    "vocab_size)");
    // Stored in the dtype the weights are kept in (a bf16 checkpoint on CUDA, float32 on the CPU):
    // the mapped bytes go to the device as they are, one copy, no conversion on the host.
    const DType kept = weights_sharded() ? p.shard.dtype() : p.value.dtype();
    set_value(backend, p, info.dtype == kept ? file.view(p.name) : file.read_f32(p.name));
  }
}

void LlamaWeights::init_random(Backend& backend, uint64_t seed) {
  allocate(backend);
  // Matrices: uniform with std 0.02 from the counter-based generator (core/counter_uniform.h), made
  // on the device where they live (no host copy, no upload); biases 0 and norms 1 from the host
  // (vectors: small).
  const float bound = 0.02f * std::sqrt(3.0f);
  for (size_t t = 0; t < params().size(); ++t) {
    Parameter& p = params()[t];
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = p.shape.size() == 1 && !is_bias;
    if (is_bias || is_norm) {
      Tensor host = Tensor::empty(p.shape, DType::F32);
      std::fill(host.data<float>(), host.data<float>() + host.numel(), is_norm ? 1.0f : 0.0f);
      set_value(backend, p, host);
      continue;
    }
    if (!weights_sharded()) {
      backend.init_uniform(p.value, seed, t, 0, bound);
      continue;
    }
    const ElementRange r = grad_range(p);
    if (r.hi == r.lo) continue;
    Tensor dst = p.shard.slice(0, r.hi - r.lo);
    backend.init_uniform(dst, seed, t, r.lo, bound);
  }
}

}  // namespace ulysses
