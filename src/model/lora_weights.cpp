#include "model/lora_weights.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace ulysses {

namespace {

// [out, in] of projection t of a layer of `c`.
std::pair<int64_t, int64_t> projection_shape(const ModelConfig& c, LoraTarget t) {
  const int64_t D = c.hidden_size, F = c.intermediate_size;
  switch (t) {
    case LoraTarget::Q: return {c.q_dim(), D};
    case LoraTarget::K:
    case LoraTarget::V: return {c.kv_dim(), D};
    case LoraTarget::O: return {D, c.q_dim()};
    case LoraTarget::Gate:
    case LoraTarget::Up: return {F, D};
    case LoraTarget::Down: return {D, F};
  }
  ULY_FAIL("unknown LoRA target");
}

}  // namespace

LoraWeights::LoraWeights(const ModelConfig& model, const LoraConfig& lora)
    : ParameterSet(DType::F32), config_(lora), scaling_(lora.scaling()) {
  check_lora_config(lora, "lora");
  struct Idx {
    int target;
    size_t a, b;
  };
  std::vector<std::vector<Idx>> idx(static_cast<size_t>(model.num_hidden_layers));
  for (int64_t l = 0; l < model.num_hidden_layers; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!lora.targets[t]) continue;
      const auto [out, in] = projection_shape(model, static_cast<LoraTarget>(t));
      const size_t a = add(peft_tensor_name(l, static_cast<LoraTarget>(t), false), {lora.r, in});
      const size_t b = add(peft_tensor_name(l, static_cast<LoraTarget>(t), true), {out, lora.r});
      idx[static_cast<size_t>(l)].push_back({t, a, b});
    }
  // Pointers only after params() stops growing.
  layers_.resize(idx.size());
  for (size_t l = 0; l < idx.size(); ++l)
    for (const Idx& i : idx[l]) layers_[l][i.target] = LoraAdapter{&params()[i.a], &params()[i.b]};
}

std::vector<Parameter*> LoraWeights::layer_params(int64_t l) const {
  std::vector<Parameter*> out;
  for (const LoraAdapter& a : layers_[static_cast<size_t>(l)])
    if (a.a) out.insert(out.end(), {a.a, a.b});
  return out;
}

void LoraWeights::init(Backend& backend, uint64_t seed) {
  allocate(backend);
  for (size_t t = 0; t < params().size(); ++t) {
    Parameter& p = params()[t];
    Tensor host = Tensor::empty(p.shape, DType::F32);
    float* x = host.data<float>();
    const bool is_a = p.name.find(".lora_A.") != std::string::npos;
    const float bound = 1.0f / std::sqrt(static_cast<float>(p.shape[1]));
    for (int64_t i = 0; i < host.numel(); ++i) {
      // splitmix64 of (seed, tensor, index): the same values whatever the order of the draws.
      uint64_t z = seed * 0x9E3779B97F4A7C15ull + (static_cast<uint64_t>(t) << 40) + static_cast<uint64_t>(i);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
      x[i] = is_a ? (2.0f * u - 1.0f) * bound : 0.0f;
    }
    set_value(backend, p, host);
  }
}

void LoraWeights::load(const std::string& dir, Backend& backend) {
  const std::string path = dir + "/adapter_model.safetensors";
  const SafetensorsFile file = SafetensorsFile::open(path);
  allocate(backend);
  std::set<std::string> expected;
  for (Parameter& p : params()) {
    expected.insert(p.name);
    ULY_CHECK(file.contains(p.name), path << ": tensor '" << p.name << "' is missing (adapter_config.json's "
                                          << "target_modules wraps it; was the adapter made for this model?)");
    const SafetensorsInfo& info = file.info(p.name);
    ULY_CHECK(is_float(info.dtype), path << ": tensor '" << p.name << "' has dtype " << dtype_name(info.dtype)
                                         << "; adapters must be F32, BF16 or F16");
    ULY_CHECK(info.shape == p.shape, path << ": tensor '" << p.name << "' has shape " << shape_str(info.shape)
                                          << " but r = " << config_.r << " and the model's config.json give "
                                          << shape_str(p.shape));
    set_value(backend, p, file.read_f32(p.name));
  }
  for (const SafetensorsInfo& e : file.entries())
    ULY_CHECK(expected.count(e.name), path << ": tensor '" << e.name << "' is not an adapter of this config "
                                           << "(adapter_config.json's target_modules and the model's layers)");
}

void LoraWeights::merge_into(LlamaWeights& base, Backend& backend) const {
  ULY_CHECK(!base.weights_sharded(), "merging LoRA adapters needs the base's whole weights (not ZeRO 3 shards)");
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LlamaWeights::Layer& L = base.layer(static_cast<int64_t>(l));
    Parameter* const projections[kNumLoraTargets] = {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down};
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraAdapter& ad = layers_[l][t];
      if (ad.a) backend.matmul(projections[t]->value, ad.b->value, ad.a->value, false, false, scaling_, 1.0);
    }
  }
}

}  // namespace ulysses
