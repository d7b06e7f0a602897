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
    set_value(backend, p, file.read_f32(p.name));
  }
}

void LlamaWeights::init_random(Backend& backend, uint64_t seed) {
  allocate(backend);
  // A counter-based generator (splitmix64 of seed, tensor, index): parallel,
  // and the same values whatever the thread count. Uniform with std 0.02.
  const float a = 0.02f * std::sqrt(3.0f);
  for (size_t t = 0; t < params().size(); ++t) {
    Parameter& p = params()[t];
    Tensor host = Tensor::empty(p.shape, DType::F32);
    float* x = host.data<float>();
    const int64_t n = host.numel();
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = p.shape.size() == 1 && !is_bias;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      uint64_t z = seed * 0x9E3779B97F4A7C15ull + (static_cast<uint64_t>(t) << 40) + static_cast<uint64_t>(i);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      x[i] = is_bias ? 0.0f : is_norm ? 1.0f : (2.0f * u - 1.0f) * a;
    }
    set_value(backend, p, host);
  }
}

}  // namespace ulysses
