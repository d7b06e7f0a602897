// LoRA's settings as PEFT writes them in an adapter folder's adapter_config.json, read with
// every refusal naming the file, the field and the fix, and written back the way PEFT reads
// them (PeftModel.from_pretrained). The adapters' tensors are model/lora_weights.h.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace ulysses {

// The projections LoRA may wrap, by PEFT's target_modules names.
enum class LoraTarget { Q, K, V, O, Gate, Up, Down };
inline constexpr int kNumLoraTargets = 7;
inline constexpr std::array<const char*, kNumLoraTargets> kLoraTargetNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
// "self_attn.q_proj", "mlp.down_proj": the module's path inside a decoder layer.
std::string lora_module_path(LoraTarget t);

struct LoraConfig {
  int64_t r = 0;  // 0: LoRA off
  double alpha = 0;
  double dropout = 0;
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r
  std::array<bool, kNumLoraTargets> targets{};
  std::string base_model;  // base_model_name_or_path (may be empty)

  bool enabled() const { return r > 0; }
  bool targets_module(LoraTarget t) const { return targets[static_cast<int>(t)]; }
  double scaling() const;
  // PEFT's target_modules list, in our order.
  std::vector<std::string> target_names() const;
  bool operator==(const LoraConfig&) const = default;
};

// Checks a config from `source` (a file or a train config's `lora` block): r, alpha, at least one
// target; dropout > 0 is refused (not supported yet).
void check_lora_config(const LoraConfig& c, const std::string& source);

// target_modules from a JSON list of PEFT names (or "all-linear"), refusing anything else.
std::array<bool, kNumLoraTargets> parse_lora_targets(const nlohmann::json& list, const std::string& source,
                                                     const std::string& field);

// DIR/adapter_config.json: a LORA adapter of a causal LM, without the PEFT features we do not
// run (DoRA, per-module ranks, layer subsets, bias training, modules_to_save), each refused.
LoraConfig read_peft_adapter_config(const std::string& dir);
// adapter_config.json's text for c, as PEFT writes it.
std::string peft_adapter_config_json(const LoraConfig& c);
// Makes DIR (fresh or empty) holding adapter_config.json and adapter_model.safetensors (the
// tensors, host float32, by their PEFT names; metadata format "pt"), as PEFT's save_pretrained
// writes them, so that PeftModel.from_pretrained loads it.
void save_peft_adapter(const std::string& dir, const LoraConfig& c,
                       const std::vector<std::pair<std::string, Tensor>>& tensors);
// Inside adapter_model.safetensors: "base_model.model.model.layers.<l>.<module path>.lora_<A|B>.weight".
std::string peft_tensor_name(int64_t layer, LoraTarget t, bool is_b);

}  // namespace ulysses
