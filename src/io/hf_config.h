// Hugging Face config.json for Llama-family models, in both the transformers 4.x
// layout (rope_theta, rope_scaling) and the 5.x layout (rope_parameters).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ulysses {

struct RopeConfig {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  double factor = 1.0;  // llama3 only
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";
  std::string model_type = "llama";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  // the dtype of the stored weights
  nlohmann::json raw;                   // the file as read; written back on save

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

// Parses and validates; errors name the file and the field ("config.json: field
// 'num_key_value_heads' (3) must divide num_attention_heads (8)").
// Every size is checked against its stated limit (core/limits.h), and the whole model
// against limits::kMaxParameters, before anything is allocated for it.
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& source_name);
// Parameters of the model (embeddings, layers, final norm, lm_head unless tied).
int64_t model_parameter_count(const ModelConfig& c);
ModelConfig load_hf_config(const std::string& path);
// The JSON to write back: `raw` with our fields updated (transformers 5.x readers
// accept the 4.x layout, so we keep whatever layout was read).
nlohmann::json hf_config_json(const ModelConfig& c);

// Named shapes for benchmarks and planning ("llama-3.1-8b", "llama-3.2-1b", "tiny").
bool named_model_config(const std::string& name, ModelConfig* out);

}  // namespace ulysses
