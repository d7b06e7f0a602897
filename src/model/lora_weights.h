// LoRA adapters (Hu et al.) on a decoder's projections, as PEFT holds them: for each wrapped
// projection W [out, in] of each layer, A [r, in] and B [out, r], the layer computing
// y = x W^T + s (x A^T) B^T with s = alpha / r (or alpha / sqrt(r), rsLoRA). Named as in PEFT's
// adapter_model.safetensors, float32 gradients, replicated on every rank (they are small: the
// step all-reduces their gradients as it does the base's). The base stays frozen
// (ParameterSet::freeze); the model's use of the adapters is model/lora_linear.h.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "io/peft_adapter.h"
#include "model/llama_weights.h"
#include "model/parameter_set.h"

namespace ulysses {

struct LoraAdapter {
  Parameter* a = nullptr;  // [r, in]
  Parameter* b = nullptr;  // [out, r]
};

class LoraWeights : public ParameterSet {
 public:
  // Names and shapes for `model`'s layers; no memory yet. The config must pass check_lora_config.
  LoraWeights(const ModelConfig& model, const LoraConfig& lora);

  // PEFT's initialisation, so that the first step starts from the base model: A uniform in
  // ±1/sqrt(in) (Kaiming-uniform with a = sqrt(5)), B zero; deterministic in `seed`.
  void init(Backend& backend, uint64_t seed);
  // DIR/adapter_model.safetensors: every adapter's A and B by PEFT's names and shapes, and nothing
  // else (a tensor for a module the config does not target is refused).
  void load(const std::string& dir, Backend& backend);

  // W += s B A for every wrapped projection of `base` (whole, unsharded values): the merged model,
  // which computes what base + adapters compute.
  void merge_into(LlamaWeights& base, Backend& backend) const;

  const LoraConfig& config() const { return config_; }
  double scaling() const { return scaling_; }
  // Layer l's adapter on projection t, or null when t is not wrapped.
  const LoraAdapter* adapter(int64_t l, LoraTarget t) const {
    const LoraAdapter& a = layers_[static_cast<size_t>(l)][static_cast<int>(t)];
    return a.a ? &a : nullptr;
  }
  // Layer l's adapters' parameters (its gradients are final once the layer's backward is done).
  std::vector<Parameter*> layer_params(int64_t l) const;

 private:
  LoraConfig config_;
  double scaling_;
  std::vector<std::array<LoraAdapter, kNumLoraTargets>> layers_;
};

}  // namespace ulysses
