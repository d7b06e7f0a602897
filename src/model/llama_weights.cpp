#include "model/llama_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "comm/communicator.h"
#include "parallel/collectives.h"

namespace ulysses {

ElementRange shard_range(int64_t n, int rank, int ranks) {
  ElementRange r;
  r.block = (n + ranks - 1) / ranks;
  r.lo = std::min(n, rank * r.block);
  r.hi = std::min(n, r.lo + r.block);
  return r;
}

LlamaWeights::LlamaWeights(const ModelConfig& c, DType grad_dtype, ParameterSharding sharding)
    : config_(c), grad_dtype_(grad_dtype), sharding_(sharding) {
  ULY_CHECK(grad_dtype == DType::F32 || grad_dtype == DType::BF16,
            "gradient buffers are float32 or bfloat16, not " << dtype_name(grad_dtype));
  ULY_CHECK(sharding.ranks >= 1 && sharding.rank >= 0 && sharding.rank < sharding.ranks,
            "gradient sharding: rank " << sharding.rank << " of " << sharding.ranks);
  const int64_t D = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  auto add = [&](const std::string& name, Shape shape) {
    params_.push_back(Parameter{name, std::move(shape), {}, {}, {}});
    return params_.size() - 1;
  };
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
  // Pointers only after params_ stops growing.
  const auto at = [&](size_t i) { return i == kNone ? nullptr : &params_[i]; };
  for (const Idx& i : idx) {
    Layer L{&params_[i.in], &params_[i.q], &params_[i.k], &params_[i.v], &params_[i.o],
            &params_[i.post], &params_[i.g], &params_[i.u], &params_[i.d]};
    L.q_bias = at(i.qb);
    L.k_bias = at(i.kb);
    L.v_bias = at(i.vb);
    L.o_bias = at(i.ob);
    L.q_norm = at(i.qn);
    L.k_norm = at(i.kn);
    layers_.push_back(L);
  }
}

void all_gather_blocks(Communicator& group, Backend& backend, Tensor& flat) {
  const int P = group.size(), r = group.rank();
  const int64_t n = flat.numel();
  const ElementRange mine = shard_range(n, r, P);
  const int64_t c = mine.block;
  if (n == c * P) {  // equal blocks: in place, this rank's block already where it belongs
    all_gather(group, backend, flat.slice(mine.lo, mine.hi), flat);
    return;
  }
  // Blocks of c elements, the last ones short or empty: gathered through a padded buffer.
  Tensor padded = flat.device() == Device::CPU ? Tensor::empty({c * P}, flat.dtype())
                                               : backend.empty({c * P}, flat.dtype());
  Tensor block = padded.slice(r * c, r * c + c);
  if (mine.hi > mine.lo) {
    Tensor dst = block.slice(0, mine.hi - mine.lo);
    backend.copy(dst, flat.slice(mine.lo, mine.hi));
  }
  all_gather(group, backend, block, padded);
  backend.copy(flat, padded.slice(0, n));
}

ParameterSharding zero_sharding(Communicator& group, int stage) {
  ULY_CHECK(stage >= 0 && stage <= 3, "ZeRO stage " << stage << " does not exist (0 to 3)");
  if (stage < 2) return {};
  return {&group, group.rank(), group.size(), stage >= 3};
}

ElementRange LlamaWeights::grad_range(const Parameter& p) const {
  return shard_range(shape_numel(p.shape), sharding_.rank, sharding_.ranks);
}

size_t LlamaWeights::num_elements() const {
  size_t n = 0;
  for (const auto& p : params_) n += static_cast<size_t>(shape_numel(p.shape));
  return n;
}

Tensor LlamaWeights::value_part(const Parameter& p, const ElementRange& range) const {
  if (weights_sharded()) {
    const ElementRange mine = grad_range(p);
    ULY_CHECK(range.lo >= mine.lo && range.hi <= mine.hi,
              p.name << ": elements [" << range.lo << ", " << range.hi << ") are outside this rank's shard ["
                     << mine.lo << ", " << mine.hi << ")");
    return p.shard.slice(range.lo - mine.lo, range.hi - mine.lo);
  }
  return p.value.reshape({p.value.numel()}).slice(range.lo, range.hi);
}

void LlamaWeights::set_value(Backend& backend, Parameter& p, const Tensor& host) {
  if (!weights_sharded()) {
    backend.copy(p.value, host);
    return;
  }
  const ElementRange r = grad_range(p);
  if (r.hi == r.lo) return;
  Tensor dst = p.shard.slice(0, r.hi - r.lo);
  backend.copy(dst, host.reshape({host.numel()}).slice(r.lo, r.hi));
}

void LlamaWeights::allocate(Backend& backend) {
  for (auto& p : params_) {
    const ElementRange r = grad_range(p);
    if (weights_sharded()) {
      p.value = Tensor{};
      p.shard = backend.empty({r.block}, backend.act_dtype(), Pool::Weights);
      backend.zero(p.shard);
    } else {
      p.value = backend.empty(p.shape, backend.act_dtype(), Pool::Weights);
    }
    p.grad = grads_sharded() ? backend.empty({r.hi - r.lo}, grad_dtype_, Pool::Gradients)
                             : backend.empty(p.shape, grad_dtype_, Pool::Gradients);
    backend.zero(p.grad);
  }
}

void LlamaWeights::zero_grads(Backend& backend) {
  const bool defer = grad_dtype_ == DType::F32 && !grads_sharded();
  for (auto& p : params_) {
    if (defer) p.grad_unset = true;
    else backend.zero(p.grad);
  }
}

void settle_grad(Parameter& p, Backend& backend) {
  if (!p.grad_unset) return;
  backend.zero(p.grad);
  p.grad_unset = false;
}

void LlamaWeights::settle_grads(Backend& backend) {
  for (auto& p : params_) settle_grad(p, backend);
}

void LlamaWeights::load(const ModelFolder& folder, Backend& backend) {
  allocate(backend);
  for (auto& p : params_) {
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
  for (size_t t = 0; t < params_.size(); ++t) {
    Parameter& p = params_[t];
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
