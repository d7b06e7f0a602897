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
    ULY_CHECK(parse_activation(*act, c.hidden_act), src << ": field 'hidden_act' ('" << *act
                                                        << "') is not supported (supported: "
                                                        << supported_activations() << ")");
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
  c.rms_norm_eps = f.opt_number_in("rms_norm_eps", c.rms_norm_eps, limits::kRmsNormEps);
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
  if (!j.contains("hidden_act")) j["hidden_act"] = activation_name(c.hidden_act);
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

namespace {

// A named shape: the sizes of the published config.json (bench, plan and tests use them with
// random weights). llama3_factor > 0: Llama 3's rope_scaling with that factor (theta 5e5, original 8192).
struct NamedShape {
  const char* name;
  const char* architecture;
  const char* model_type;
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_positions;
  double eps, theta, llama3_factor;
  bool tied;
  const char* dtype;
  int64_t bos, eos;  // -1: not written
  bool sliding_window_key;  // writes use_sliding_window: false (Qwen)
};

constexpr NamedShape kNamedShapes[] = {
    {"llama-3.1-8b", "LlamaForCausalLM", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 131072, 1e-5, 500000.0, 8.0,
     false, "bfloat16", 128000, 128001, false},
    {"llama-3.2-1b", "LlamaForCausalLM", "llama", 128256, 2048, 8192, 16, 32, 8, 64, 131072, 1e-5, 500000.0, 32.0,
     true, "bfloat16", 128000, 128001, false},
    {"llama-3.2-3b", "LlamaForCausalLM", "llama", 128256, 3072, 8192, 28, 24, 8, 128, 131072, 1e-5, 500000.0, 32.0,
     true, "bfloat16", 128000, 128001, false},
    {"qwen2.5-7b", "Qwen2ForCausalLM", "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, 32768, 1e-6, 1000000.0, 0.0,
     false, "bfloat16", 151643, 151643, true},
    {"qwen2.5-1.5b", "Qwen2ForCausalLM", "qwen2", 151936, 1536, 8960, 28, 12, 2, 128, 32768, 1e-6, 1000000.0, 0.0,
     true, "bfloat16", 151643, 151643, true},
    {"qwen3-8b", "Qwen3ForCausalLM", "qwen3", 151936, 4096, 12288, 36, 32, 8, 128, 40960, 1e-6, 1000000.0, 0.0, false,
     "bfloat16", 151643, 151645, true},
    // Mistral 7B v0.3: no sliding window.
    {"mistral-7b", "MistralForCausalLM", "mistral", 32768, 4096, 14336, 32, 32, 8, 128, 32768, 1e-5, 1000000.0, 0.0,
     false, "bfloat16", 1, 2, false},
    {"tiny", "LlamaForCausalLM", "llama", 256, 64, 128, 2, 4, 2, 16, 2048, 1e-5, 10000.0, 0.0, false, "float32", -1, -1,
     false},
};

}  // namespace

bool named_model_config(const std::string& name_in, ModelConfig* out) {
  std::string name = name_in;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const NamedShape* shape = nullptr;
  for (const NamedShape& s : kNamedShapes)
    if (name == s.name) shape = &s;
  if (!shape) return false;
  ModelConfig c;
  c.architecture = shape->architecture;
  c.model_type = shape->model_type;
  c.vocab_size = shape->vocab;
  c.hidden_size = shape->hidden;
  c.intermediate_size = shape->intermediate;
  c.num_hidden_layers = shape->layers;
  c.num_attention_heads = shape->heads;
  c.num_key_value_heads = shape->kv_heads;
  c.head_dim = shape->head_dim;
  c.max_position_embeddings = shape->max_positions;
  c.rms_norm_eps = shape->eps;
  c.rope.theta = shape->theta;
  if (shape->llama3_factor > 0) {
    c.rope.type = "llama3";
    c.rope.factor = shape->llama3_factor;
    c.rope.low_freq_factor = 1.0;
    c.rope.high_freq_factor = 4.0;
    c.rope.original_max_position_embeddings = 8192;
  }
  c.tie_word_embeddings = shape->tied;
  c.torch_dtype = shape->dtype;
  json raw = json::object();
  if (shape->bos >= 0) raw["bos_token_id"] = shape->bos;
  if (shape->eos >= 0) raw["eos_token_id"] = shape->eos;
  if (shape->sliding_window_key) raw["use_sliding_window"] = false;
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
  std::string names;
  for (const NamedShape& s : kNamedShapes) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}

}  // namespace ulysses
