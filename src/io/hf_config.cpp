#include "io/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/limits.h"
#include "io/regular_file.h"

namespace ulysses {
namespace {

using nlohmann::json;

constexpr const char* kSupportedArch = "LlamaForCausalLM (model_type 'llama')";
constexpr const char* kSupportedRope = "default, llama3";

// Typed access to one JSON object; every error names the source and the field
// path ("rope_scaling.factor"). A null value counts as absent, as transformers
// treats it.
class Fields {
 public:
  Fields(const json& j, const std::string& source, std::string prefix = "")
      : j_(j), source_(source), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  std::string name(const char* key) const { return prefix_ + key; }

  [[noreturn]] void wrong_type(const char* key, const char* want) const {
    ULY_FAIL(source_ << ": field '" << name(key) << "' must be " << want << ", got " << j_[key].type_name() << " "
                     << j_[key].dump());
  }

  int64_t integer(const char* key) const {
    ULY_CHECK(has(key), source_ << ": missing required field '" << name(key) << "'");
    const json& v = j_[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    wrong_type(key, "an integer");
  }
  std::optional<int64_t> opt_integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    return integer(key);
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    ULY_CHECK(v > 0, source_ << ": field '" << name(key) << "' (" << v << ") must be positive");
    return v;
  }
  int64_t opt_positive(const char* key, int64_t fallback) const { return has(key) ? positive(key) : fallback; }
  // A positive count no larger than the stated limit (core/limits.h).
  int64_t count(const char* key, const IntRange& range) const {
    return check_in_range(source_ + ": field '" + name(key) + "'", positive(key), range);
  }
  int64_t opt_count(const char* key, int64_t fallback, const IntRange& range) const {
    return has(key) ? count(key, range) : fallback;
  }

  double number(const char* key) const {
    ULY_CHECK(has(key), source_ << ": missing required field '" << name(key) << "'");
    const json& v = j_[key];
    if (v.is_number()) return v.get<double>();
    wrong_type(key, "a number");
  }
  double positive_number(const char* key) const {
    const double v = number(key);
    ULY_CHECK(v > 0, source_ << ": field '" << name(key) << "' (" << v << ") must be positive");
    return v;
  }
  double opt_positive_number(const char* key, double fallback) const {
    return has(key) ? positive_number(key) : fallback;
  }

  bool opt_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (j_[key].is_boolean()) return j_[key].get<bool>();
    wrong_type(key, "true or false");
  }
  std::optional<std::string> opt_string(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (j_[key].is_string()) return j_[key].get<std::string>();
    wrong_type(key, "a string");
  }
  const json& object(const char* key) const {
    if (!j_[key].is_object()) wrong_type(key, "an object");
    return j_[key];
  }

 private:
  const json& j_;
  const std::string& source_;
  std::string prefix_;
};

// Reads a rope block: the 4.x `rope_scaling` object or the 5.x `rope_parameters`.
void parse_rope_block(const json& block, const char* block_name, const std::string& source, RopeConfig* rope) {
  Fields f(block, source, std::string(block_name) + ".");
  std::optional<std::string> type = f.opt_string("rope_type");
  if (!type) type = f.opt_string("type");  // the older spelling in 4.x configs
  rope->type = type.value_or("default");
  if (rope->type == "default") return;
  ULY_CHECK(rope->type == "llama3", source << ": rope type '" << rope->type << "' in '" << block_name
                                           << "' is not supported (supported: " << kSupportedRope << ")");
  rope->factor = f.positive_number("factor");
  rope->low_freq_factor = f.positive_number("low_freq_factor");
  rope->high_freq_factor = f.positive_number("high_freq_factor");
  rope->original_max_position_embeddings = f.positive("original_max_position_embeddings");
  // The llama3 schedule interpolates between the two wavelengths 1/low and 1/high.
  ULY_CHECK(rope->high_freq_factor > rope->low_freq_factor,
            source << ": field '" << block_name << ".high_freq_factor' (" << rope->high_freq_factor
                   << ") must be larger than '" << block_name << ".low_freq_factor' (" << rope->low_freq_factor
                   << ")");
}

}  // namespace

int64_t model_parameter_count(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t per_layer = h * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * h + 3 * h * c.intermediate_size + 2 * h;
  return c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * per_layer + h;
}

ModelConfig parse_hf_config(const json& j, const std::string& src) {
  ULY_CHECK(j.is_object(), src << ": a config must be a JSON object, got " << j.type_name());
  Fields f(j, src);
  ModelConfig c;
  c.raw = j;

  const bool has_arch = f.has("architectures");
  const std::optional<std::string> model_type = f.opt_string("model_type");
  ULY_CHECK(has_arch || model_type,
            src << ": neither 'architectures' nor 'model_type' is set; supported: " << kSupportedArch);
  if (has_arch) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) f.wrong_type("architectures", "a non-empty list of strings");
    c.architecture = a[0].get<std::string>();
    ULY_CHECK(c.architecture == "LlamaForCausalLM", src << ": architecture '" << c.architecture
                                                        << "' is not supported (supported: " << kSupportedArch << ")");
  }
  if (model_type) {
    c.model_type = *model_type;
    ULY_CHECK(c.model_type == "llama", src << ": model_type '" << c.model_type
                                           << "' is not supported (supported: " << kSupportedArch << ")");
  }
  if (auto act = f.opt_string("hidden_act"))
    ULY_CHECK(*act == "silu", src << ": field 'hidden_act' ('" << *act << "') is not supported (supported: silu)");
  ULY_CHECK(!f.opt_bool("attention_bias", false),
            src << ": field 'attention_bias' is true; biases on q/k/v/o projections are not supported");
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
  const int64_t params = model_parameter_count(c);
  ULY_CHECK(params <= limits::kMaxParameters, src << ": the shape makes " << params << " parameters, over the limit of "
                                                  << limits::kMaxParameters << "; is a field off by a few digits?");

  // transformers 5.x writes `dtype`; 4.x wrote `torch_dtype`.
  if (auto d = f.opt_string("dtype")) c.torch_dtype = *d;
  else if (auto td = f.opt_string("torch_dtype")) c.torch_dtype = *td;

  // RoPE: 5.x `rope_parameters` (theta inside) or 4.x `rope_theta` + `rope_scaling`.
  const double top_theta = f.opt_positive_number("rope_theta", 10000.0);
  if (f.has("rope_parameters")) {
    const json& rp = f.object("rope_parameters");
    parse_rope_block(rp, "rope_parameters", src, &c.rope);
    Fields rf(rp, src, "rope_parameters.");
    c.rope.theta = rf.opt_positive_number("rope_theta", top_theta);
  } else {
    c.rope.theta = top_theta;
    if (f.has("rope_scaling")) parse_rope_block(f.object("rope_scaling"), "rope_scaling", src, &c.rope);
  }
  return c;
}

ModelConfig load_hf_config(const std::string& path) {
  const std::string text = read_text_file(path, "config", limits::kMaxJsonBytes);
  json j;
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
  // What a Llama reader would otherwise assume, written out so the file stands alone.
  if (!j.contains("hidden_act")) j["hidden_act"] = "silu";
  if (!j.contains("attention_bias")) j["attention_bias"] = false;
  if (!j.contains("mlp_bias")) j["mlp_bias"] = false;

  const bool llama3 = c.rope.type == "llama3";
  auto set_llama3 = [&](json& block) {
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      block.erase(k);
    if (!llama3) return;
    block["factor"] = c.rope.factor;
    block["low_freq_factor"] = c.rope.low_freq_factor;
    block["high_freq_factor"] = c.rope.high_freq_factor;
    block["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
  };
  if (v5) {
    json rp = j["rope_parameters"].is_object() ? j["rope_parameters"] : json::object();
    rp.erase("type");
    rp["rope_type"] = c.rope.type;
    rp["rope_theta"] = c.rope.theta;
    set_llama3(rp);
    j["rope_parameters"] = rp;
    if (j.contains("rope_theta")) j["rope_theta"] = c.rope.theta;
  } else {
    j["rope_theta"] = c.rope.theta;
    if (!llama3) {
      j["rope_scaling"] = nullptr;
    } else {
      json rs = j.contains("rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"] : json::object();
      // Keep the key spelling the file used ("type" in older 4.x files).
      const char* key = rs.contains("type") && !rs.contains("rope_type") ? "type" : "rope_type";
      rs[key] = c.rope.type;
      set_llama3(rs);
      j["rope_scaling"] = rs;
    }
  }

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
  c.raw = raw;
  raw = hf_config_json(c);
  // Parsing our own output both fills `raw` and proves the shape is one we accept.
  *out = parse_hf_config(raw, "named model config '" + name + "'");
  return true;
}

}  // namespace ulysses
