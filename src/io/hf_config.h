// Hugging Face config.json of the decoder families the engine runs (Llama, Mistral, Qwen2,
// Qwen3), in both the transformers 4.x layout (rope_theta, rope_scaling) and the 5.x layout
// (rope_parameters). ModelConfig is also the model's description: what a decoder layer holds
// (biases, q/k norms, head_dim) and does (RoPE variant, attention window); the model, the
// weights, the planner and the decoder follow it.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/activation.h"
#include "io/rope_config.h"

namespace ulysses {

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
  // What a decoder layer holds beyond Llama's (see kArchitectures in hf_config.cpp for who sets what).
  bool qkv_bias = false;        // q/k/v projections carry a bias (Qwen2; attention_bias in Llama/Qwen3)
  bool o_bias = false;          // the output projection carries one (attention_bias in Llama/Qwen3)
  bool qk_norm = false;         // RMSNorm over each head of q and of k before RoPE (Qwen3): weights [head_dim]
  int64_t sliding_window = 0;   // causal attention limited to the last W tokens, itself included (Mistral); 0: none
  Activation hidden_act = Activation::SiLU;  // the MLP's gate activation: act(gate) * up
  std::string torch_dtype = "float32";  // the dtype of the stored weights
  nlohmann::json raw;                   // the file as read; written back on save

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // The softmax scale of the attention: 1/sqrt(head_dim), times YaRN's attention factor squared
  // (transformers scales cos and sin by it, so q.k carries it twice).
  double attention_scale() const;
};

// The architectures the engine runs, for messages: "LlamaForCausalLM, MistralForCausalLM, ...".
std::string supported_architectures();

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

// Named shapes for benchmarks and planning ("llama-3.1-8b", "llama-3.2-1b", "qwen2.5-7b", "qwen3-8b",
// "mistral-7b", "tiny", ...); named_model_configs() lists them.
bool named_model_config(const std::string& name, ModelConfig* out);
std::string named_model_configs();

}  // namespace ulysses
