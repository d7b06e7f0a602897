#include "io/peft_adapter.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/limits.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"
#include "io/regular_file.h"
#include "io/safetensors.h"

namespace ulysses {

using json = nlohmann::json;

namespace {

// r and alpha as a train config or a Hub adapter may hold them: ranks up to 64K (LoRA's ranks are
// 4 to 256), alpha a finite positive number.
constexpr IntRange kLoraRank{1, 65536, "the adapters' rank"};
constexpr RealRange kLoraAlpha{0, 1e9, true, false, "the scaling's numerator"};

// A field PEFT may hold that names a feature we do not run: refused unless it is absent or
// holds its off value.
void refuse_set(const json& j, const char* key, const json& off, const std::string& path, const char* what) {
  if (!j.contains(key) || j[key].is_null() || j[key] == off) return;
  if (off.is_object() && j[key].is_object() && j[key].empty()) return;
  ULY_FAIL(path << ": field '" << key << "' is " << j[key].dump() << ": " << what
                << " is not supported yet (an adapter with '" << key << "': " << (off.is_null() ? "null" : off.dump())
                << " is)");
}

}  // namespace

std::string lora_module_path(LoraTarget t) {
  const int i = static_cast<int>(t);
  return std::string(i < 4 ? "self_attn." : "mlp.") + kLoraTargetNames[i];
}

double LoraConfig::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

std::vector<std::string> LoraConfig::target_names() const {
  std::vector<std::string> out;
  for (int i = 0; i < kNumLoraTargets; ++i)
    if (targets[i]) out.emplace_back(kLoraTargetNames[i]);
  return out;
}

void check_lora_config(const LoraConfig& c, const std::string& source) {
  check_in_range(source + ": field 'r'", c.r, kLoraRank);
  check_in_range(source + ": field 'alpha'", c.alpha, kLoraAlpha);
  ULY_CHECK(c.dropout >= 0 && c.dropout < 1,
            source << ": field 'dropout' must be in [0, 1), got " << c.dropout);
  ULY_CHECK(c.dropout == 0, source << ": LoRA dropout " << c.dropout
                                   << " is not supported yet; set dropout to 0 (lora_dropout in adapter_config.json)");
  bool any = false;
  for (bool t : c.targets) any = any || t;
  ULY_CHECK(any, source << ": 'target_modules' names no projection; give some of q_proj, k_proj, v_proj, o_proj, "
                           "gate_proj, up_proj, down_proj");
}

std::array<bool, kNumLoraTargets> parse_lora_targets(const json& list, const std::string& source,
                                                     const std::string& field) {
  std::array<bool, kNumLoraTargets> out{};
  if (list.is_string() && list.get<std::string>() == "all-linear") {
    out.fill(true);
    return out;
  }
  ULY_CHECK(list.is_array(), source << ": field '" << field << "' must be a list of module names (or \"all-linear\"), "
                                    << "got " << list.dump() << " (a regular expression is not supported)");
  for (const json& e : list) {
    ULY_CHECK(e.is_string(), source << ": field '" << field << "' holds " << e.dump() << ", not a module name");
    const std::string name = e.get<std::string>();
    int found = -1;
    for (int i = 0; i < kNumLoraTargets; ++i)
      if (name == kLoraTargetNames[i]) found = i;
    ULY_CHECK(found >= 0, source << ": field '" << field << "' names '" << name
                                 << "'; LoRA wraps q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    out[found] = true;
  }
  return out;
}

LoraConfig read_peft_adapter_config(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  const std::string text = read_text_file(path, "adapter config", limits::kMaxJsonBytes);
  check_json_depth(text, path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    ULY_FAIL(path << ": malformed JSON: " << e.what());
  }
  ULY_CHECK(j.is_object(), path << ": must hold a JSON object (PEFT's adapter_config.json)");
  const JsonFields f(j, path);
  const std::string type = f.opt_string("peft_type").value_or("");
  ULY_CHECK(type == "LORA", path << ": field 'peft_type' is '" << type << "'; only LORA adapters are read");
  const std::string task = f.opt_string("task_type").value_or("CAUSAL_LM");
  ULY_CHECK(task == "CAUSAL_LM", path << ": field 'task_type' is '" << task << "'; the engine trains CAUSAL_LM models");
  refuse_set(j, "use_dora", false, path, "DoRA");
  refuse_set(j, "rank_pattern", json::object(), path, "a rank per module");
  refuse_set(j, "alpha_pattern", json::object(), path, "an alpha per module");
  refuse_set(j, "layers_to_transform", nullptr, path, "LoRA on some layers only");
  refuse_set(j, "exclude_modules", nullptr, path, "excluding modules");
  refuse_set(j, "bias", "none", path, "training biases");
  refuse_set(j, "lora_bias", false, path, "LoRA's bias on B");
  refuse_set(j, "modules_to_save", nullptr, path, "training whole modules beside the adapters");
  refuse_set(j, "fan_in_fan_out", false, path, "fan_in_fan_out (Conv1D) weights");
  refuse_set(j, "use_qalora", false, path, "QA-LoRA");
  refuse_set(j, "target_parameters", nullptr, path, "LoRA on parameters");
  refuse_set(j, "trainable_token_indices", nullptr, path, "trainable tokens");
  LoraConfig c;
  c.r = f.integer("r");
  c.alpha = f.number("lora_alpha");
  c.dropout = f.has("lora_dropout") ? f.number("lora_dropout") : 0.0;
  c.use_rslora = f.opt_bool("use_rslora", false);
  ULY_CHECK(f.has("target_modules"), path << ": missing required field 'target_modules'");
  c.targets = parse_lora_targets(j["target_modules"], path, "target_modules");
  c.base_model = f.opt_string("base_model_name_or_path").value_or("");
  check_lora_config(c, path);
  return c;
}

std::string peft_adapter_config_json(const LoraConfig& c) {
  json j = json::object();
  j["alpha_pattern"] = json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = c.base_model.empty() ? json(nullptr) : json(c.base_model);
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  // PEFT keeps the number as given: an integral alpha is written as an integer.
  j["lora_alpha"] = c.alpha == std::floor(c.alpha) && std::fabs(c.alpha) < 1e15 ? json(static_cast<int64_t>(c.alpha))
                                                                                 : json(c.alpha);
  j["lora_dropout"] = c.dropout;
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = c.r;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  j["target_modules"] = c.target_names();
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = c.use_rslora;
  return j.dump(2) + "\n";
}

void save_peft_adapter(const std::string& dir, const LoraConfig& c,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir + "/adapter_config.json", peft_adapter_config_json(c));
}

std::string peft_tensor_name(int64_t layer, LoraTarget t, bool is_b) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + lora_module_path(t) +
         (is_b ? ".lora_B.weight" : ".lora_A.weight");
}

}  // namespace ulysses
