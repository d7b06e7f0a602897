#include "io/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/json_depth.h"
#include "core/error.h"
#include "core/limits.h"
#include "io/json_fields.h"
#include "io/regular_file.h"

namespace ulysses {
namespace {

using nlohmann::json;

// What each architecture's decoder layer holds, as its transformers modeling file builds it.
// attention_bias: the config field turns on q/k/v/o biases (Llama, Qwen3); Qwen2 always has
// q/k/v biases and none on o. sliding_window: Mistral's applies to every layer when set;
// Qwen2/Qwen3 apply theirs only with use_sliding_window, to layers past max_window_layers.
struct Architecture {
  const char* name;
  const char* model_type;
  bool fixed_qkv_bias;        // q/k/v biases regardless of the config
  bool reads_attention_bias;  // attention_bias: true adds q/k/v/o biases
  bool qk_norm;
  enum class Window { None, Mistral, Qwen } window;
};

constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false, true, false, Architecture::Window::None},
    {"MistralForCausalLM", "mistral", false, false, false, Architecture::Window::Mistral},
    {"Qwen2ForCausalLM", "qwen2", true, false, false, Architecture::Window::Qwen},
    {"Qwen3ForCausalLM", "qwen3", false, true, true, Architecture::Window::Qwen},
};

const Architecture* find_architecture(const std::string& name, bool by_model_type) {
  for (const Architecture& a : kArchitectures)
    if (name == (by_model_type ? a.model_type : a.name)) return &a;
  return nullptr;
}

// The attention window from config.json, as the architecture applies it.
int64_t parse_window(const JsonFields& f, const json& j, const Architecture& arch, const std::string& src,
                     int64_t layers) {
  if (arch.window == Architecture::Window::None) return 0;
  if (arch.window == Architecture::Window::Mistral)
    return f.has("sliding_window") ? check_in_range(src + ": field 'sliding_window'", f.positive("sliding_window"),
                                                    limits::kPositions)
                                   : 0;
  // Qwen2/Qwen3: a window only on some layers, and only with use_sliding_window.
  bool sliding = f.opt_bool("use_sliding_window", false) && f.has("sliding_window") &&
                 f.opt_positive("max_window_layers", layers) < layers;
  if (f.has("layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array()) f.wrong_type("layer_types", "a list of strings");
    for (const json& t : types) sliding = sliding || t == "sliding_attention";
  }
  ULY_CHECK(!sliding, src << ": " << arch.name << " with sliding-window layers (use_sliding_window true, or "
                          << "'sliding_attention' in layer_types) is not supported; every released Qwen2/Qwen3 "
                          << "model sets use_sliding_window false");
  return 0;
}

}  // namespace

std::string supported_architectures() {
  std::string s;
  for (const Architecture& a : kArchitectures) s += std::string(s.empty() ? "" : ", ") + a.name;
  return s;
}

double ModelConfig::attention_scale() const {
  const double af = rope.type == "yarn" ? rope.attention_factor : 1.0;
  return af * af / std::sqrt(static_cast<double>(head_dim));
}

int64_t model_parameter_count(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  int64_t per_layer = h * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * h + 3 * h * c.intermediate_size + 2 * h;
  if (c.qkv_bias) per_layer += c.q_dim() + 2 * c.kv_dim();
  if (c.o_bias) per_layer += h;
  if (c.qk_norm) per_layer += 2 * c.head_dim;
  return c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * per_layer + h;
}

ModelConfig parse_hf_config(const json& j, const std::string& src) {
  ULY_CHECK(j.is_object(), src << ": a config must be a JSON object, got " << j.type_name());
  JsonFields f(j, src);
  ModelConfig c;
  c.raw = j;

  const bool has_arch = f.has("architectures");
  const std::optional<std::string> model_type = f.opt_string("model_type");
  ULY_CHECK(has_arch || model_type,
            src << ": neither 'architectures' nor 'model_type' is set; supported: " << supported_architectures());
  const Architecture* arch = nullptr;
  if (has_arch) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) f.wrong_type("architectures", "a non-empty list of strings");
    const std::string name = a[0].get<std::string>();
    arch = find_architecture(name, false);
    ULY_CHECK(arch, src << ": architecture '" << name << "' is not supported (supported: "
                        << supported_architectures() << ")");
  }
  if (model_type) {
    const Architecture* by_type = find_architecture(*model_type, true);
    ULY_CHECK(by_type, src << ": model_type '" << *model_type << "' is not supported (supported: "
                           << supported_architectures() << ")");
    ULY_CHECK(!arch || arch == by_type, src << ": architecture '" << arch->name << "' and model_type '" << *model_type
                                            << "' disagree (" << arch->name << " has model_type '"
                                            << arch->model_type << "')");
    arch = by_type;
  }
  c.architecture = arch->name;
  c.model_type = arch->model_type;
  if (auto act = f.opt_string("hidden_act"))
    ULY_CHECK(*act == "silu", src << ": field 'hidden_act' ('" << *act << "') is not supported (supported: silu)");
  if (arch->reads_attention_bias) {
    c.qkv_bias = c.o_bias = f.opt_bool("attention_bias", false);
  } else {
    ULY_CHECK(!f.opt_bool("attention_bias", false),
              src << ": field 'attention_bias' is true, which " << arch->name << " does not define");
  }
  c.qkv_bias = c.qkv_bias || arch->fixed_qkv_bias;
  c.qk_norm = arch->qk_norm;
  ULY_CHECK(!f.opt_bool("mlp_bias", false),
            src << ": field 'mlp_bias' is true; biases on the MLP projections are not supported");

  c.vocab_size = f.count("vocab_size", limits::kVocab);
  c.hidden_size = f.count("hidden_size", limits::kHidden);
  c.intermediate_size = f.count("intermediate_size", limits::kIntermediate);
  c.num_hidden_layers = f.count("num_hidden_layers", limits::kLayers);
  c.num_attention_heads = f.count("num_attention_heads", limits::kHeads);
  c.num_key_value_heads = f.opt_count("num_key_value_heads", c.num_attention_heads, limits::kHeads);
  ULY_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
            src << ": field 'num_key_value_heads' (" << c.num_key_value_heads << ") must divide num_attention_heads ("
                << c.num_attention_heads << ")");
  if (f.has("head_dim")) {
    c.head_dim = f.count("head_dim", limits::kHeadDim);
  } else {
    ULY_CHECK(c.hidden_size % c.num_attention_heads == 0,
              src << ": 'head_dim' is absent and hidden_size (" << c.hidden_size
                  << ") is not divisible by num_attention_heads (" << c.num_attention_heads
                  << "); set 'head_dim' explicitly");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  ULY_CHECK(c.head_dim % 2 == 0,
            src << ": head_dim (" << c.head_dim << ") must be even (rotary embeddings rotate pairs of dimensions)");
  c.max_position_embeddings = f.opt_count("max_position_embeddings", c.max_position_embeddings, limits::kPositions);
  c.rms_norm_eps = f.opt_positive_number("rms_norm_eps", c.rms_norm_eps);
  c.tie_word_embeddings = f.opt_bool("tie_word_embeddings", false);
  c.sliding_window = parse_window(f, j, *arch, src, c.num_hidden_layers);
  const int64_t params = model_parameter_count(c);
  ULY_CHECK(params <= limits::kMaxParameters, src << ": the shape makes " << params << " parameters, over the limit of "
                                                  << limits::kMaxParameters << "; is a field off by a few digits?");

  // transformers 5.x writes `dtype`; 4.x wrote `torch_dtype`.
  if (auto d = f.opt_string("dtype")) c.torch_dtype = *d;
  else if (auto td = f.opt_string("torch_dtype")) c.torch_dtype = *td;

  c.rope = parse_rope(j, src, c.max_position_embeddings);
  return c;
}

ModelConfig load_hf_config(const std::string& path) {
  const std::string text = read_text_file(path, "config", limits::kMaxJsonBytes);
  json j;
  check_json_depth(text, path);
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    ULY_FAIL(path << ": malformed JSON: " << e.what());
  }
  return parse_hf_config(j, path);
}

json hf_config_json(const ModelConfig& c) {
  json j = c.raw.is_object() ? c.raw : json::object();
  const bool v5 = j.contains("rope_parameters") && !j["rope_parameters"].is_null();

  j["architectures"] = json::array({c.architecture});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  // What a reader of the architecture would otherwise assume, written out so the file stands alone.
  if (!j.contains("hidden_act")) j["hidden_act"] = "silu";
  if (c.model_type == "llama" || c.model_type == "qwen3") j["attention_bias"] = c.o_bias;
  if (c.model_type == "llama" && !j.contains("mlp_bias")) j["mlp_bias"] = false;
  if (c.model_type == "mistral")
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  write_rope(c.rope, j);

  const bool has_dtype = j.contains("dtype"), has_torch_dtype = j.contains("torch_dtype");
  if (has_dtype || (!has_torch_dtype && v5)) j["dtype"] = c.torch_dtype;
  if (has_torch_dtype || (!has_dtype && !v5)) j["torch_dtype"] = c.torch_dtype;
  return j;
}

bool named_model_config(const std::string& name_in, ModelConfig* out) {
  std::string name = name_in;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  ModelConfig c;
  json extra = json::object();
  auto llama3_rope = [&](double factor) {
    c.rope.type = "llama3";
    c.rope.theta = 500000.0;
    c.rope.factor = factor;
    c.rope.low_freq_factor = 1.0;
    c.rope.high_freq_factor = 4.0;
    c.rope.original_max_position_embeddings = 8192;
  };
  auto llama3_common = [&]() {
    c.vocab_size = 128256;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 131072;
    c.rms_norm_eps = 1e-5;
    c.torch_dtype = "bfloat16";
    extra = {{"bos_token_id", 128000}, {"eos_token_id", 128001}};
  };
  if (name == "llama-3.1-8b") {
    llama3_common();
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.head_dim = 128;
    llama3_rope(8.0);
    c.tie_word_embeddings = false;
  } else if (name == "llama-3.2-1b") {
    llama3_common();
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 16;
    c.num_attention_heads = 32;
    c.head_dim = 64;
    llama3_rope(32.0);
    c.tie_word_embeddings = true;
  } else if (name == "llama-3.2-3b") {
    llama3_common();
    c.hidden_size = 3072;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 28;
    c.num_attention_heads = 24;
    c.head_dim = 128;
    llama3_rope(32.0);
    c.tie_word_embeddings = true;
  } else if (name == "qwen2.5-7b" || name == "qwen2.5-1.5b") {
    const bool big = name == "qwen2.5-7b";
    c.architecture = "Qwen2ForCausalLM";
    c.model_type = "qwen2";
    c.vocab_size = big ? 152064 : 151936;
    c.hidden_size = big ? 3584 : 1536;
    c.intermediate_size = big ? 18944 : 8960;
    c.num_hidden_layers = 28;
    c.num_attention_heads = big ? 28 : 12;
    c.num_key_value_heads = big ? 4 : 2;
    c.head_dim = 128;
    c.max_position_embeddings = 32768;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 1000000.0;
    c.tie_word_embeddings = !big;
    c.torch_dtype = "bfloat16";
    extra = {{"bos_token_id", 151643}, {"eos_token_id", 151643}, {"use_sliding_window", false}};
  } else if (name == "qwen3-8b") {
    c.architecture = "Qwen3ForCausalLM";
    c.model_type = "qwen3";
    c.vocab_size = 151936;
    c.hidden_size = 4096;
    c.intermediate_size = 12288;
    c.num_hidden_layers = 36;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.max_position_embeddings = 40960;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 1000000.0;
    c.tie_word_embeddings = false;
    c.torch_dtype = "bfloat16";
    extra = {{"bos_token_id", 151643}, {"eos_token_id", 151645}, {"use_sliding_window", false}};
  } else if (name == "mistral-7b") {  // v0.3: no sliding window
    c.architecture = "MistralForCausalLM";
    c.model_type = "mistral";
    c.vocab_size = 32768;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.max_position_embeddings = 32768;
    c.rms_norm_eps = 1e-5;
    c.rope.theta = 1000000.0;
    c.tie_word_embeddings = false;
    c.torch_dtype = "bfloat16";
    extra = {{"bos_token_id", 1}, {"eos_token_id", 2}};
  } else if (name == "tiny") {
    c.vocab_size = 256;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.max_position_embeddings = 2048;
    c.rms_norm_eps = 1e-5;
    c.rope = RopeConfig{};  // default rope, theta 10000
    c.tie_word_embeddings = false;
    c.torch_dtype = "float32";
  } else {
    return false;
  }
  json raw = extra;
  raw["architectures"] = json::array({c.architecture});
  c.raw = raw;
  raw = hf_config_json(c);
  // Parsing our own output both fills `raw` and proves the shape is one we accept.
  *out = parse_hf_config(raw, "named model config '" + name + "'");
  return true;
}

}  // namespace ulysses

namespace ulysses {

std::string named_model_configs() {
  return "llama-3.1-8b, llama-3.2-1b, llama-3.2-3b, qwen2.5-7b, qwen2.5-1.5b, qwen3-8b, mistral-7b, tiny";
}

}  // namespace ulysses
