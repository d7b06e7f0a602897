// config.json parsing: both transformers layouts, defaults, write-back, named
// shapes, and every validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "expect_error.h"
#include "io/hf_config.h"
#include "model/rope.h"
#include "test_util.h"

namespace ulysses {
namespace {

using nlohmann::json;


// Llama-3.1-8B as published (transformers 4.x layout).
const char* kLlama31_v4 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same config after LlamaConfig.from_json_file(...).to_json_string() in transformers 5.24.
const char* kLlama31_v5 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pad_token_id": null,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_type": "llama3"},
  "tie_word_embeddings": false, "transformers_version": "5.24.0", "use_cache": true, "vocab_size": 128256})";

// A minimal config: only the required fields.
json minimal() {
  return json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},       {"vocab_size", 256},
              {"hidden_size", 64},                     {"intermediate_size", 128},    {"num_hidden_layers", 2},
              {"num_attention_heads", 4}};
}

ModelConfig parse(const json& j) { return parse_hf_config(j, "cfg.json"); }

// Every parsed field (not `raw`).
void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
  EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
  EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
}

TEST(HfConfig, Llama31BothLayoutsParseTheSame) {
  const ModelConfig v4 = parse(json::parse(kLlama31_v4));
  const ModelConfig v5 = parse(json::parse(kLlama31_v5));
  expect_same(v4, v5);
  EXPECT_EQ(v4.vocab_size, 128256);
  EXPECT_EQ(v4.hidden_size, 4096);
  EXPECT_EQ(v4.intermediate_size, 14336);
  EXPECT_EQ(v4.num_hidden_layers, 32);
  EXPECT_EQ(v4.num_attention_heads, 32);
  EXPECT_EQ(v4.num_key_value_heads, 8);
  EXPECT_EQ(v4.head_dim, 128);  // absent in v4: hidden / heads
  EXPECT_EQ(v4.q_dim(), 4096);
  EXPECT_EQ(v4.kv_dim(), 1024);
  EXPECT_EQ(v4.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(v4.rms_norm_eps, 1e-5);
  EXPECT_EQ(v4.rope.type, "llama3");
  EXPECT_EQ(v4.rope.theta, 500000.0);
  EXPECT_EQ(v4.rope.factor, 8.0);
  EXPECT_EQ(v4.rope.low_freq_factor, 1.0);
  EXPECT_EQ(v4.rope.high_freq_factor, 4.0);
  EXPECT_EQ(v4.rope.original_max_position_embeddings, 8192);
  EXPECT_FALSE(v4.tie_word_embeddings);
  EXPECT_EQ(v4.torch_dtype, "bfloat16");
  EXPECT_EQ(v4.raw, json::parse(kLlama31_v4));
}

TEST(HfConfig, DefaultsAndOptionalFields) {
  const ModelConfig c = parse(minimal());
  EXPECT_EQ(c.num_key_value_heads, 4);  // = heads
  EXPECT_EQ(c.head_dim, 16);            // = hidden / heads
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.torch_dtype, "float32");

  json j = minimal();
  j["head_dim"] = 32;  // explicit head_dim need not equal hidden / heads
  j["num_key_value_heads"] = 2;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = "float16";
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = 1e6;
  j["pad_token_id"] = nullptr;
  const ModelConfig d = parse(j);
  EXPECT_EQ(d.head_dim, 32);
  EXPECT_EQ(d.q_dim(), 128);
  EXPECT_EQ(d.kv_dim(), 64);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.torch_dtype, "float16");
  EXPECT_EQ(d.rope.type, "default");
  EXPECT_EQ(d.rope.theta, 1e6);

  j["head_dim"] = nullptr;  // null means absent, as in transformers
  EXPECT_EQ(parse(j).head_dim, 16);
  // 5.x `dtype` wins over a leftover `torch_dtype`.
  j["dtype"] = "bfloat16";
  EXPECT_EQ(parse(j).torch_dtype, "bfloat16");
}

TEST(HfConfig, RopeVariants) {
  json j = minimal();
  j["rope_scaling"] = {{"type", "llama3"},           {"factor", 32.0},          {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["rope_theta"] = 500000.0;
  const ModelConfig old_spelling = parse(j);  // 4.x files may say "type" instead of "rope_type"
  EXPECT_EQ(old_spelling.rope.type, "llama3");
  EXPECT_EQ(old_spelling.rope.factor, 32.0);

  json v5 = minimal();
  v5["rope_parameters"] = {{"rope_type", "llama3"},      {"rope_theta", 500000.0},
                           {"factor", 32.0},             {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},    {"original_max_position_embeddings", 8192}};
  expect_same(parse(v5), old_spelling);

  json def5 = minimal();
  def5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 123.0}};
  EXPECT_EQ(parse(def5).rope.type, "default");
  EXPECT_EQ(parse(def5).rope.theta, 123.0);

  json def4 = minimal();
  def4["rope_scaling"] = {{"rope_type", "default"}};
  def4["rope_theta"] = 321.0;
  EXPECT_EQ(parse(def4).rope.type, "default");
  EXPECT_EQ(parse(def4).rope.theta, 321.0);
}

// The families beyond Llama: what each layer holds, read from config.json and written back.
TEST(HfConfig, Architectures) {
  json q2 = minimal();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  q2["model_type"] = "qwen2";
  q2["use_sliding_window"] = false;
  q2["sliding_window"] = 4096;  // not used without use_sliding_window, as in the released configs
  q2["max_window_layers"] = 28;
  const ModelConfig a = parse(q2);
  EXPECT_EQ(a.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(a.qkv_bias);
  EXPECT_FALSE(a.o_bias);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_EQ(a.sliding_window, 0);
  ModelConfig base = parse(minimal());
  EXPECT_EQ(model_parameter_count(a), model_parameter_count(base) + 2 * (64 + 64 + 64));

  json q3 = minimal();
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3["model_type"] = "qwen3";
  q3["head_dim"] = 32;
  const ModelConfig b = parse(q3);
  EXPECT_TRUE(b.qk_norm);
  EXPECT_FALSE(b.qkv_bias);
  q3["attention_bias"] = true;
  const ModelConfig b2 = parse(q3);
  EXPECT_TRUE(b2.qkv_bias && b2.o_bias);

  json mi = minimal();
  mi["architectures"] = {"MistralForCausalLM"};
  mi["model_type"] = "mistral";
  mi["sliding_window"] = nullptr;
  EXPECT_EQ(parse(mi).sliding_window, 0);
  mi["sliding_window"] = 4096;
  const ModelConfig m = parse(mi);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(hf_config_json(m)["sliding_window"], 4096);
  expect_same(parse(hf_config_json(m)), m);
  EXPECT_EQ(parse(hf_config_json(m)).sliding_window, 4096);

  // Llama's attention_bias: q/k/v/o biases.
  json lb = minimal();
  lb["attention_bias"] = true;
  const ModelConfig l = parse(lb);
  EXPECT_TRUE(l.qkv_bias && l.o_bias);
  EXPECT_TRUE(parse(hf_config_json(l)).o_bias);
}

TEST(HfConfig, RopeScalings) {
  json lin = minimal();
  lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig a = parse(lin);
  EXPECT_EQ(a.rope.type, "linear");
  EXPECT_EQ(a.rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(a.attention_scale(), 1.0 / 4.0);  // head_dim 16, no attention factor
  expect_same(parse(hf_config_json(a)), a);

  // YaRN as Qwen2.5's model card writes it: factor and original context; the attention factor
  // from 0.1 ln(factor) + 1, the betas 32 / 1.
  json y = minimal();
  y["max_position_embeddings"] = 131072;
  y["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const ModelConfig b = parse(y);
  EXPECT_EQ(b.rope.type, "yarn");
  EXPECT_EQ(b.rope.original_max_position_embeddings, 32768);
  EXPECT_EQ(b.rope.beta_fast, 32.0);
  EXPECT_EQ(b.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(b.rope.attention_factor, 0.1 * std::log(4.0) + 1.0);
  const double af = 0.1 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(b.attention_scale(), af * af / 4.0);
  const json back = hf_config_json(b);
  EXPECT_EQ(back["rope_scaling"]["type"], "yarn");  // the file's own spelling kept
  EXPECT_EQ(parse(back).rope.scaling_fields(), b.rope.scaling_fields());

  // mscale / mscale_all_dim (DeepSeek's spelling), and the factor from the contexts when absent.
  json y5 = minimal();
  y5["max_position_embeddings"] = 4096;
  y5["rope_parameters"] = {{"rope_type", "yarn"},   {"rope_theta", 1e4}, {"original_max_position_embeddings", 1024},
                           {"mscale", 0.707},       {"mscale_all_dim", 0.707}};
  const ModelConfig c = parse(y5);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope.attention_factor, 1.0);
  // Without an original context in the block, max_position_embeddings (or the top-level field).
  json y6 = minimal();
  y6["original_max_position_embeddings"] = 512;
  y6["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(parse(y6).rope.original_max_position_embeddings, 512);
}

// Dynamic (NTK) scaling: default frequencies up to max_position_embeddings; past it the base is
// theta * (factor * L / max - (factor - 1)) ** (d / (d - 2)), as transformers raises it.
TEST(HfConfig, DynamicRope) {
  json j = minimal();
  j["max_position_embeddings"] = 1024;
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope.type, "dynamic");
  EXPECT_EQ(c.rope.original_max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  const json back = hf_config_json(c);
  EXPECT_EQ(back["rope_scaling"], json({{"rope_type", "dynamic"}, {"factor", 2.0}}));
  json plain = minimal();
  plain["max_position_embeddings"] = 1024;
  const ModelConfig p = parse(plain);
  const int64_t d = c.head_dim;
  EXPECT_EQ(rope_inv_freq(c.rope, d, 1024), rope_inv_freq(p.rope, d));  // up to max: unchanged
  EXPECT_EQ(rope_inv_freq(c.rope, d, 0), rope_inv_freq(p.rope, d));
  const std::vector<float> inv = rope_inv_freq(c.rope, d, 4096), base = rope_inv_freq(p.rope, d);
  const double theta = c.rope.theta * std::pow(2.0 * 4096 / 1024 - 1.0, static_cast<double>(d) / (d - 2));
  EXPECT_EQ(inv[0], 1.0f);
  for (int64_t i = 1; i < d / 2; ++i) {
    EXPECT_LT(inv[i], base[i]);  // slower rotations: the context stretched
    EXPECT_NEAR(inv[i], 1.0 / std::pow(theta, 2.0 * i / d), 2e-6 * inv[i]) << i;
  }
}

TEST(HfConfig, WriteBackKeepsLayoutAndUnknownFields) {
  for (const char* text : {kLlama31_v4, kLlama31_v5}) {
    const json in = json::parse(text);
    ModelConfig c = parse(in);
    const bool v5 = in.contains("rope_parameters");
    json out = hf_config_json(c);
    EXPECT_EQ(out.contains("rope_parameters"), v5);
    EXPECT_EQ(out.contains("rope_scaling"), !v5);
    EXPECT_EQ(out.contains("dtype"), v5);
    EXPECT_EQ(out.contains("torch_dtype"), !v5);
    EXPECT_EQ(out["bos_token_id"], 128000);  // fields we do not model survive
    EXPECT_EQ(out["initializer_range"], 0.02);
    expect_same(parse(out), c);

    // Changed fields are written in the file's own layout.
    c.rope.theta = 2e6;
    c.rope.factor = 16.0;
    c.max_position_embeddings = 1 << 20;
    c.torch_dtype = "float32";
    out = hf_config_json(c);
    const json& rope = v5 ? out["rope_parameters"] : out["rope_scaling"];
    EXPECT_EQ(rope["factor"], 16.0);
    EXPECT_EQ(v5 ? rope["rope_theta"] : out["rope_theta"], 2e6);
    EXPECT_EQ(out[v5 ? "dtype" : "torch_dtype"], "float32");
    expect_same(parse(out), c);

    // Switching to default rope drops the llama3 fields.
    c.rope.type = "default";
    out = hf_config_json(c);
    if (v5) {
      EXPECT_EQ(out["rope_parameters"]["rope_type"], "default");
      EXPECT_FALSE(out["rope_parameters"].contains("factor"));
    } else {
      EXPECT_TRUE(out["rope_scaling"].is_null());
    }
    EXPECT_EQ(parse(out).rope.type, "default");
  }
}

TEST(HfConfig, NamedConfigs) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("llama-3.1-8b", &c));
  expect_same(c, parse(json::parse(kLlama31_v4)));
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FALSE(c.raw.empty());
  expect_same(parse(c.raw), c);
  expect_same(parse(hf_config_json(c)), c);

  ASSERT_TRUE(named_model_config("llama-3.2-1b", &c));
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  expect_same(parse(c.raw), c);

  ASSERT_TRUE(named_model_config("llama-3.2-3b", &c));
  EXPECT_EQ(c.hidden_size, 3072);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 24);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  expect_same(parse(c.raw), c);

  ASSERT_TRUE(named_model_config("tiny", &c));
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.raw["rope_scaling"].is_null());
  expect_same(parse(c.raw), c);

  ASSERT_TRUE(named_model_config("qwen2.5-7b", &c));
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.vocab_size, 152064);
  expect_same(parse(c.raw), c);
  ASSERT_TRUE(named_model_config("qwen3-8b", &c));
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.intermediate_size, 12288);
  ASSERT_TRUE(named_model_config("mistral-7b", &c));
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.sliding_window, 0);
  ASSERT_TRUE(named_model_config("qwen2.5-1.5b", &c));
  EXPECT_TRUE(c.tie_word_embeddings);

  EXPECT_FALSE(named_model_config("gpt-2", &c));
}

// ---- errors ------------------------------------------------------------------

TEST(HfConfigErrors, MissingRequiredField) {
  for (const char* field :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json j = minimal();
    j.erase(field);
    EXPECT_ERROR(parse(j), "cfg.json", std::string("missing required field '") + field + "'");
  }
  json j = minimal();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  EXPECT_ERROR(parse(j), "cfg.json", "missing required field 'rope_scaling.factor'");
  json k = minimal();
  k["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}};
  EXPECT_ERROR(parse(k), "cfg.json", "'rope_parameters.original_max_position_embeddings'");
}

TEST(HfConfigErrors, WrongJsonType) {
  auto with = [](const char* key, json v) {
    json j = minimal();
    j[key] = std::move(v);
    return j;
  };
  EXPECT_ERROR(parse(with("hidden_size", "64")), "cfg.json", "'hidden_size' must be an integer", "\"64\"");
  EXPECT_ERROR(parse(with("num_hidden_layers", 2.5)), "cfg.json", "'num_hidden_layers' must be an integer");
  EXPECT_ERROR(parse(with("tie_word_embeddings", "yes")), "cfg.json", "'tie_word_embeddings' must be true or false");
  EXPECT_ERROR(parse(with("rope_theta", "big")), "cfg.json", "'rope_theta' must be a number");
  EXPECT_ERROR(parse(with("rms_norm_eps", json::array())), "cfg.json", "'rms_norm_eps' must be a number");
  EXPECT_ERROR(parse(with("architectures", "LlamaForCausalLM")), "cfg.json", "'architectures' must be");
  EXPECT_ERROR(parse(with("rope_scaling", 8)), "cfg.json", "'rope_scaling' must be an object");
  EXPECT_ERROR(parse(with("model_type", 3)), "cfg.json", "'model_type' must be a string");
  EXPECT_ERROR(parse_hf_config(json::array(), "cfg.json"), "cfg.json", "must be a JSON object");
}

TEST(HfConfigErrors, NonPositiveSizes) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"}) {
    json j = minimal();
    j[field] = field[0] == 'n' ? -1 : 0;
    EXPECT_ERROR(parse(j), "cfg.json", std::string("'") + field + "'", "must be positive");
  }
  json j = minimal();
  j["rms_norm_eps"] = 0.0;  // a range now (issue 28): 0 or a denormal divides by ~0 on a zero row
  EXPECT_ERROR(parse(j), "'rms_norm_eps'", "must be in [1e-30, 1]", "got 0");
}

TEST(HfConfigErrors, HeadsAndHeadDim) {
  json j = minimal();
  j["num_key_value_heads"] = 3;
  EXPECT_ERROR(parse(j), "cfg.json", "'num_key_value_heads' (3) must divide num_attention_heads (4)");
  json k = minimal();
  k["head_dim"] = 15;
  EXPECT_ERROR(parse(k), "cfg.json", "head_dim (15) must be even");
  json l = minimal();
  l["hidden_size"] = 66;  // not divisible by 4 heads, and no head_dim
  EXPECT_ERROR(parse(l), "cfg.json", "hidden_size (66)", "set 'head_dim'");
  l["head_dim"] = 16;
  EXPECT_EQ(parse(l).head_dim, 16);
}

TEST(HfConfigErrors, UnsupportedModels) {
  json j = minimal();
  j["architectures"] = {"GemmaForCausalLM"};
  j.erase("model_type");
  EXPECT_ERROR(parse(j), "cfg.json", "architecture 'GemmaForCausalLM' is not supported",
               "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
  json k = minimal();
  k.erase("architectures");
  k["model_type"] = "phi3";
  EXPECT_ERROR(parse(k), "cfg.json", "model_type 'phi3' is not supported", "Qwen2ForCausalLM");
  json disagree = minimal();
  disagree["model_type"] = "qwen2";
  EXPECT_ERROR(parse(disagree), "cfg.json", "'LlamaForCausalLM' and model_type 'qwen2' disagree");
  json l = minimal();
  l.erase("architectures");
  l.erase("model_type");
  EXPECT_ERROR(parse(l), "cfg.json", "neither 'architectures' nor 'model_type'");
  json m = minimal();
  m["architectures"] = {"MistralForCausalLM"};
  m["model_type"] = "mistral";
  m["attention_bias"] = true;
  EXPECT_ERROR(parse(m), "cfg.json", "'attention_bias' is true", "MistralForCausalLM does not define");
  json q = minimal();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q["model_type"] = "qwen2";
  q["use_sliding_window"] = true;
  q["sliding_window"] = 4096;
  q["max_window_layers"] = 1;
  EXPECT_ERROR(parse(q), "cfg.json", "Qwen2ForCausalLM with sliding-window layers", "not supported");
  q["use_sliding_window"] = false;
  q["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_ERROR(parse(q), "cfg.json", "'sliding_attention' in layer_types");
  json n = minimal();
  n["mlp_bias"] = true;
  EXPECT_ERROR(parse(n), "cfg.json", "'mlp_bias' is true", "not supported");
  json o = minimal();
  o["hidden_act"] = "gelu";
  EXPECT_ERROR(parse(o), "cfg.json", "'hidden_act' ('gelu') is not supported");
}

// Both spellings of one thing, saying different things, are refused (issue 28): the RoPE block
// as rope_parameters and rope_scaling (another type, another factor, a yarn field present in one
// only), and the base as rope_theta beside rope_parameters.rope_theta. A base out of its stated
// range is refused at load, not blamed on the weights after the run.
TEST(HfConfigErrors, RopeGivenTwiceMustAgree) {
  json both = minimal();
  both["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1e4},
                             {"original_max_position_embeddings", 1024}};
  both["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 2048}};
  EXPECT_ERROR(parse(both), "cfg.json: 'rope_parameters'", "and 'rope_scaling'", "disagree; keep one of them");
  both["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  EXPECT_ERROR(parse(both), "disagree");
  both["rope_scaling"] = both["rope_parameters"];
  EXPECT_EQ(parse(both).rope.factor, 4.0);  // the same contents: fine
  json theta = minimal();
  theta["rope_theta"] = 500000.0;
  theta["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
  EXPECT_ERROR(parse(theta), "cfg.json: 'rope_theta' (500000) and 'rope_parameters.rope_theta' (10000) disagree");
  theta["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_EQ(parse(theta).rope.theta, 500000.0);
  for (double bad : {0.5, 1e13, 1e300}) {
    json t = minimal();
    t["rope_theta"] = bad;
    EXPECT_ERROR(parse(t), "cfg.json: field 'rope_theta' must be in [1, 1000000000000] (the RoPE base)");
    json p = minimal();
    p.erase("rope_theta");
    p["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", bad}};
    EXPECT_ERROR(parse(p), "field 'rope_parameters.rope_theta' must be in [1, 1000000000000]");
  }
}

TEST(HfConfigErrors, UnsupportedRope) {
  json j = minimal();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  EXPECT_ERROR(parse(j), "cfg.json", "rope type 'longrope'", "'rope_scaling'",
               "supported: default, linear, dynamic, yarn, llama3");
  json k = minimal();
  k["rope_parameters"] = {{"rope_type", "longrope"}, {"factor", 2.0}, {"rope_theta", 1e4}};
  EXPECT_ERROR(parse(k), "cfg.json", "rope type 'longrope'", "'rope_parameters'");
  json dyn = minimal();
  dyn["rope_scaling"] = {{"rope_type", "dynamic"}};
  EXPECT_ERROR(parse(dyn), "cfg.json", "rope_scaling.factor");
  json both = minimal();
  both["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}};
  both["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  EXPECT_ERROR(parse(both), "cfg.json", "'rope_parameters'", "and 'rope_scaling'", "disagree");
  both["rope_scaling"]["factor"] = 2.0;  // the same thing twice is accepted
  EXPECT_EQ(parse(both).rope.factor, 2.0);
  json l = minimal();
  l["rope_scaling"] = {{"rope_type", "llama3"},     {"factor", 8.0},
                       {"low_freq_factor", 4.0},    {"high_freq_factor", 1.0},
                       {"original_max_position_embeddings", 8192}};
  EXPECT_ERROR(parse(l), "cfg.json", "'rope_scaling.high_freq_factor' (1) must be larger");
  json m = minimal();
  m["rope_theta"] = -1.0;
  EXPECT_ERROR(parse(m), "cfg.json", "'rope_theta' must be in [1, 1000000000000] (the RoPE base), got -1");
}

TEST(HfConfigErrors, LoadNamesThePath) {
  const std::string dir = test::temp_dir("cfg");
  EXPECT_ERROR(load_hf_config(dir + "/config.json"), dir + "/config.json", "cannot open");
  {
    std::ofstream(dir + "/bad.json") << "{\"hidden_size\": 64,";
  }
  EXPECT_ERROR(load_hf_config(dir + "/bad.json"), "bad.json", "malformed JSON");
  {
    std::ofstream(dir + "/ok.json") << kLlama31_v5;
  }
  EXPECT_EQ(load_hf_config(dir + "/ok.json").rope.factor, 8.0);
  json j = minimal();
  j.erase("vocab_size");
  {
    std::ofstream(dir + "/novocab.json") << j.dump();
  }
  EXPECT_ERROR(load_hf_config(dir + "/novocab.json"), dir + "/novocab.json", "missing required field 'vocab_size'");
}

}  // namespace
}  // namespace ulysses
