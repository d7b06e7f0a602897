#include "train/train_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/limits.h"
#include "core/nearest.h"
#include "io/peft_adapter.h"
#include "io/regular_file.h"
#include "train/engine_option_table.h"
#include "train/yaml_reader.h"

namespace ulysses {
namespace {

// The schema: every key with its default. Nested maps are sections.
const char* kDefaultsYaml = R"(# ulysses train: every key and its default.
model: ""               # Hugging Face model folder to start from
model_config: ""        # or: a named shape (tiny, llama-3.2-1b, ...) or a config.json, randomly initialised
num_layers: 0           # > 0: override the number of layers (random init only)
rope_scaling: null      # a RoPE scaling to train with instead of the model's, e.g. a context extension
                        # {rope_type: yarn, factor: 4.0, original_max_position_embeddings: 32768} (types: default,
                        # linear, yarn, llama3; fields as in config.json); written into the checkpoints' config.json
init_seed: 0
data:
  train: ""             # folder of shards from `ulysses prepare` (train-*.tokens) or one .tokens file
  val: ""               # evaluation shards; default: val-*.tokens next to the training shards
  seq_len: 1024         # tokens per sequence; must divide by the sequence-parallel degree
  mode: pack            # pack: documents packed, positions restart per document; long: one window per long document
  seed: 0               # shuffling seed
batch_size: 1           # sequences per micro-batch (whole world); rows are dealt to the data-parallel groups
grad_accum: 1           # micro-batches per optimizer step
steps: 100
optimizer:
  lr: 3.0e-4            # peak learning rate
  min_lr: null          # cosine decays to this at the last step; null (the default): 0.1 x lr. At most lr
  warmup_steps: 10      # linear warmup from 0
  weight_decay: 0.1     # on matrices only, not on norms
  beta1: 0.9
  beta2: 0.95
  eps: 1.0e-8
  grad_clip: 1.0        # global gradient-norm clip; 0 = off
eval_every: 0           # steps between evaluations; 0 = never
eval_batches: 4
checkpoint_every: 0     # steps between checkpoints; 0 = only at the end (and on SIGINT/SIGTERM)
skip_nonfinite: 0       # steps with a non-finite loss or gradient norm skipped (no update) before the run stops
log_every: 1
tensorboard: true       # TensorBoard event files (events.out.tfevents.*) beside metrics.jsonl
out_dir: runs/train     # metrics.jsonl, events.out.tfevents.*, checkpoints/, loss.png
resume: false           # continue from out_dir's latest complete checkpoint
reshard: false          # with resume: accept a checkpoint written on another mesh (ranks, sp, sp_ring, zigzag);
                        # the run goes on with the same data and maths, summed in another order (not bit for bit)
overwrite: false        # a fresh run may write into an out_dir that holds another run's results
save_dtype: bfloat16    # dtype of the checkpoints' Hugging Face weights (bfloat16, float16 or float32); masters stay fp32
keep_last: 0            # > 0: keep only the newest N checkpoints (never removing the one 'latest' names)
tokenizer: ""           # folder whose tokenizer/chat-template files go into every checkpoint's model/;
                        # default: the model folder's, else the tokenizer data.train was prepared with
lora:                   # LoRA (docs/fine-tuning.md): the base frozen, only low-rank adapters trained; needs 'model'
  r: 0                  # the adapters' rank; 0 = off (full fine-tuning)
  alpha: 16.0           # scaling alpha / r (alpha / sqrt(r) with use_rslora)
  dropout: 0.0          # only 0 is supported yet
  target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]  # PEFT's names, or all-linear
  use_rslora: false
  adapter: ""           # a PEFT adapter folder (adapter_config.json + adapter_model.safetensors) to continue
                        # from; its r, alpha and target_modules must be the ones above
# The engine (the same options as the flags of bench, loss-grad and plan: train/engine_option_table.cpp):
)";

void collect_keys(const nlohmann::json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) collect_keys(*it, k, out);
    else out.push_back(k);
  }
}

// A value as JSON text for a message; bytes that are not UTF-8 shown as U+FFFD, not thrown over.
std::string shown(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string leaf_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// True when every character of `small` appears in `big` in order ("lr" in "learning_rate").
bool is_subsequence(const std::string& small, const std::string& big) {
  size_t j = 0;
  for (size_t i = 0; i < big.size() && j < small.size(); ++i)
    if (big[i] == small[j]) ++j;
  return j == small.size();
}

// The key an unknown one most likely meant. Keys are dotted, and people type a leaf
// without its section ("lr", "seq_len"), a flag's spelling ("seq-len"), a long form
// ("learning_rate" for "lr") or a typo; edit distance over whole keys alone answers
// "lr" with "sp" and "learning_rat" with "sp_ring".
std::string suggest_key(const std::string& word, const std::vector<std::string>& keys) {
  const std::string wleaf = leaf_of(word);
  for (const auto& k : keys)  // the same name in another section: "lr" -> "optimizer.lr"
    if (leaf_of(k) == wleaf) return k;
  // A typo of a whole key or of a leaf, of at most 2 edits and at most half the word.
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& k : keys) {
    const size_t d = std::min(edit_distance(word, k), edit_distance(wleaf, leaf_of(k)));
    if (d < best_d) best_d = d, best = k;
  }
  if (best_d <= std::min<size_t>(2, wleaf.size() / 2)) return best;
  // An abbreviation either way, from the same first letter: "learning_rat" -> "optimizer.lr".
  for (const auto& k : keys) {
    const std::string kleaf = leaf_of(k);
    if (!wleaf.empty() && !kleaf.empty() && kleaf[0] == wleaf[0] &&
        (is_subsequence(kleaf, wleaf) || is_subsequence(wleaf, kleaf)))
      return k;
  }
  return nearest(word, keys);
}

// Merges `user` into `base`, checking every key exists in the schema with a compatible type.
void merge_checked(nlohmann::json& base, const nlohmann::json& user, const std::string& prefix,
                   const std::vector<std::string>& all_keys, const std::string& source) {
  ULY_CHECK(user.is_object(), source << ": " << (prefix.empty() ? "the file" : "'" + prefix + "'")
                                     << " must be a mapping of keys to values");
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
    ULY_CHECK(k != "memory.checkpoint_every",
              source << ": 'memory.checkpoint_every' was renamed 'memory.checkpoint_segment' (layers per checkpoint "
                        "segment; the top-level 'checkpoint_every' is the steps between saves)");
    ULY_CHECK(base.contains(it.key()),
              source << ": unknown key '" << k << "' (did you mean '" << suggest_key(k, all_keys) << "'?)");
    nlohmann::json& slot = base[it.key()];
    if (k == "lora.target_modules") {  // a list (or "all-linear"), checked where it is read
      slot = *it;
      continue;
    }
    if (k == "rope_scaling") {  // a free-form block, checked where it is read (parse_rope)
      ULY_CHECK(it->is_object() || it->is_null(), source << ": key '" << k << "' expects a mapping, got " << shown(*it));
      slot = *it;
      continue;
    }
    if (slot.is_object()) {
      merge_checked(slot, *it, k, all_keys, source);
      continue;
    }
    const nlohmann::json& v = *it;
    // A null default is a number worked out from other keys unless given (optimizer.min_lr).
    const bool ok = (slot.is_boolean() && v.is_boolean()) || (slot.is_number() && v.is_number()) ||
                    (slot.is_string() && (v.is_string() || v.is_number() || v.is_boolean())) ||
                    (slot.is_null() && (v.is_number() || v.is_null()));
    ULY_CHECK(ok, source << ": key '" << k << "' expects " << (slot.is_boolean() ? "true or false"
                                                              : slot.is_string() ? "a string"
                                                                                 : "a number")
                         << ", got " << shown(v));
    if (slot.is_number_integer() && v.is_number_float())
      ULY_FAIL(source << ": key '" << k << "' expects an integer, got " << shown(v));
    if (v.is_string())
      try {
        (void)v.dump();
      } catch (const nlohmann::json::type_error&) {
        ULY_FAIL(source << ": key '" << k << "' holds bytes that are not UTF-8 text: " << shown(v));
      }
    slot = slot.is_string() && (v.is_number() || v.is_boolean()) ? nlohmann::json(v.dump()) : v;
  }
}

// The range of every numeric key, stated once; checked before any value is used.
struct KeyRange {
  const char* key;  // dotted
  bool integer;
  IntRange ints;
  RealRange reals;
};
KeyRange int_key(const char* key, IntRange r) { return {key, true, r, {}}; }
KeyRange real_key(const char* key, RealRange r) { return {key, false, {}, r}; }

const std::vector<KeyRange>& key_ranges() {
  using namespace limits;
  static const std::vector<KeyRange> ranges = {
      int_key("num_layers", {0, kLayers.hi, "0 = the model's own"}),
      int_key("init_seed", kSeed),
      int_key("data.seq_len", kSeqLen),
      int_key("data.seed", kSeed),
      int_key("batch_size", kBatch),
      int_key("grad_accum", kBatch),
      int_key("steps", kSteps),
      real_key("optimizer.lr", kLearningRate),
      real_key("optimizer.min_lr", kLearningRate),
      int_key("optimizer.warmup_steps", kStepCount),
      real_key("optimizer.weight_decay", kWeightDecay),
      real_key("optimizer.beta1", kBeta),
      real_key("optimizer.beta2", kBeta),
      real_key("optimizer.eps", kAdamEps),
      real_key("optimizer.grad_clip", kGradClip),
      int_key("eval_every", kStepCount),
      int_key("eval_batches", kBatch),
      int_key("checkpoint_every", kStepCount),
      int_key("skip_nonfinite", kStepCount),
      int_key("log_every", {1, kSteps.hi, "steps"}),
      int_key("keep_last", kKeepLast),
      int_key("lora.r", {0, 65536, "the adapters' rank; 0 = off"}),
      real_key("lora.alpha", {0, 1e9, true, false, "the scaling's numerator"}),
      real_key("lora.dropout", {0, 1, false, true, "a probability"}),
  };
  return ranges;
}

void check_key_ranges(const nlohmann::json& cfg) {
  for (const KeyRange& r : key_ranges()) {
    const nlohmann::json* v = &cfg;
    std::stringstream ks(r.key);
    for (std::string part; std::getline(ks, part, '.');) v = &(*v)[part];
    const std::string what = std::string("train: key '") + r.key + "'";
    if (r.integer) check_in_range(what, v->get<int64_t>(), r.ints);
    else check_in_range(what, v->get<double>(), r.reals);
  }
}

nlohmann::json parse_yaml_text(const std::string& text, const std::string& source) { return read_yaml(text, source); }

// A tenth of x as its shortest decimal digits say: 3.0e-4 gives exactly 3.0e-5, where
// x * 0.1 would be 2.9999999999999997e-5.
double decimal_tenth(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);  // "3e-04"
  std::string text(buf, r.ptr);
  const size_t e = text.find('e');
  text = text.substr(0, e) + "e" + std::to_string(std::stoi(text.substr(e + 1)) - 1);
  double tenth = 0;
  std::from_chars(text.data(), text.data() + text.size(), tenth);
  return tenth;
}

// min_lr defaults to a tenth of the peak, so that a lower peak (fine-tuning's 1.0e-5) never
// leaves the floor above it. Resolved into the effective config (the run folder's config.json
// and the resume fingerprint); a tenth in decimal, so that the default peak 3.0e-4 gives the
// 3.0e-5 floor that was the fixed default before: those runs' schedules and fingerprints stay.
void resolve_min_lr(nlohmann::json& optimizer) {
  if (optimizer["min_lr"].is_null() && optimizer["lr"].is_number())
    optimizer["min_lr"] = decimal_tenth(optimizer["lr"].get<double>());
}

// A config value as the text the option table reads ("true", "4", "auto").
std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

const nlohmann::json& at_key(const nlohmann::json& cfg, const std::string& dotted) {
  const nlohmann::json* v = &cfg;
  std::stringstream ks(dotted);
  for (std::string part; std::getline(ks, part, '.');) v = &v->at(part);
  return *v;
}

// The lora block (r 0: off) into the engine's LoraConfig (base_model_name_or_path: the model folder)
// and the adapter to start from.
void read_lora(const nlohmann::json& j, const std::string& src, TrainConfig& out) {
  out.lora_adapter = j["adapter"];
  LoraConfig& c = out.engine.lora;
  c = LoraConfig{};
  if (j["r"].get<int64_t>() == 0) {
    ULY_CHECK(out.lora_adapter.empty(),
              src << ": 'lora.adapter' is set but lora.r is 0 (LoRA off); give lora.r (the adapter's r)");
    return;
  }
  c.r = j["r"].get<int64_t>();
  c.alpha = j["alpha"].get<double>();
  c.dropout = j["dropout"].get<double>();
  c.use_rslora = j["use_rslora"].get<bool>();
  c.targets = parse_lora_targets(j["target_modules"], src, "lora.target_modules");
  c.base_model = out.model;
  check_lora_config(c, src + ": lora");
  ULY_CHECK(!out.model.empty(), src << ": LoRA trains adapters on a base model's weights: give 'model' (a Hugging "
                                       "Face folder), not 'model_config'");
}

std::string defaults_yaml() { return std::string(kDefaultsYaml) + engine_options_yaml(); }

}  // namespace

std::string train_config_defaults_yaml() { return defaults_yaml(); }

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  nlohmann::json cfg = parse_yaml_text(defaults_yaml(), "defaults");
  std::vector<std::string> keys;
  collect_keys(cfg, "", keys);
  if (!path.empty()) {
    const std::string text = read_text_file(path, "training config", limits::kMaxYamlBytes);
    merge_checked(cfg, parse_yaml_text(text, path), "", keys, path);
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    std::string o = overrides[i], key, value;
    if (o.rfind("--", 0) == 0) o = o.substr(2);
    const size_t eq = o.find('=');
    if (eq != std::string::npos) {
      key = o.substr(0, eq);
      value = o.substr(eq + 1);
    } else {
      if (overrides[i].rfind("--", 0) != 0) {
        // A word that is neither key=value nor --key: most likely a config file out of place.
        std::error_code ec;
        const bool is_file = std::filesystem::exists(overrides[i], ec);
        const bool looks_like_file = is_file || o.find('/') != std::string::npos ||
                                     o.ends_with(".yaml") || o.ends_with(".yml");
        ULY_CHECK(!looks_like_file, "train: '" << overrides[i] << "' "
                                               << (is_file ? "is a file but comes after an override"
                                                           : "does not exist (no such config file)")
                                               << "; the config file comes first: ulysses train CONFIG.yaml "
                                                  "[key=value ...]");
      }
      ULY_CHECK(overrides[i].rfind("--", 0) == 0 && i + 1 < overrides.size(),
                "train: override '" << overrides[i] << "' needs a value (key=value or --key value)");
      key = o;
      value = overrides[++i];
    }
    // Build {"a": {"b": value}} from "a.b" and merge it with the same checks.
    nlohmann::json v = parse_yaml_text(value.empty() ? "\"\"" : value, "command line");
    std::vector<std::string> parts;
    std::stringstream ks(key);
    for (std::string p; std::getline(ks, p, '.');) parts.push_back(p);
    nlohmann::json nested = v;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) nested = nlohmann::json{{*it, nested}};
    merge_checked(cfg, nested, "", keys, "command line");
  }

  resolve_min_lr(cfg["optimizer"]);
  check_key_ranges(cfg);
  TrainConfig c;
  c.as_json = cfg;
  c.model = cfg["model"];
  c.model_config = cfg["model_config"];
  c.num_layers = cfg["num_layers"];
  c.rope_scaling = cfg["rope_scaling"];
  c.init_seed = cfg["init_seed"].get<int64_t>();
  c.train_data = cfg["data"]["train"];
  c.val_data = cfg["data"]["val"];
  c.seq_len = cfg["data"]["seq_len"];
  c.data_mode = cfg["data"]["mode"];
  c.data_seed = cfg["data"]["seed"].get<int64_t>();
  c.batch_size = cfg["batch_size"];
  c.grad_accum = cfg["grad_accum"];
  c.steps = cfg["steps"];
  const auto& o = cfg["optimizer"];
  c.lr = o["lr"];
  c.min_lr = o["min_lr"];
  c.warmup_steps = o["warmup_steps"];
  c.weight_decay = o["weight_decay"];
  c.beta1 = o["beta1"];
  c.beta2 = o["beta2"];
  c.eps = o["eps"];
  c.grad_clip = o["grad_clip"];
  c.eval_every = cfg["eval_every"];
  c.eval_batches = cfg["eval_batches"];
  c.skip_nonfinite = cfg["skip_nonfinite"];
  c.checkpoint_every = cfg["checkpoint_every"];
  c.log_every = cfg["log_every"];
  c.tensorboard = cfg["tensorboard"];
  c.out_dir = cfg["out_dir"];
  c.resume = cfg["resume"];
  c.reshard = cfg["reshard"];
  c.overwrite = cfg["overwrite"];
  c.save_dtype = cfg["save_dtype"];
  c.keep_last = cfg["keep_last"];
  c.tokenizer = cfg["tokenizer"];
  const std::string src = path.empty() ? std::string("train config") : path;
  c.engine = engine_config_of(
      [&](const EngineOption& o) { return std::optional<std::string>(value_text(at_key(cfg, o.key))); },
      OptionSpelling::TrainKeys, /*optimizer=*/true);
  read_lora(cfg["lora"], src, c);
  ULY_CHECK(!c.model.empty() || !c.model_config.empty(),
            src << ": give 'model' (a Hugging Face folder) or 'model_config' (a named shape or config.json)");
  ULY_CHECK(c.model.empty() || c.model_config.empty(), src << ": give either 'model' or 'model_config', not both");
  ULY_CHECK(!c.train_data.empty(), src << ": 'data.train' is required (shards from `ulysses prepare`)");
  ULY_CHECK(c.data_mode == "pack" || c.data_mode == "long",
            src << ": 'data.mode' must be pack or long, got '" << c.data_mode << "'");
  check_in_range(src + ": batch_size x grad_accum", c.batch_size * c.grad_accum, limits::kBatch);
  ULY_CHECK(c.save_dtype == "float32" || c.save_dtype == "bfloat16" || c.save_dtype == "float16",
            src << ": 'save_dtype' must be float32, bfloat16 or float16, got '" << c.save_dtype << "'");
  // A floor above the peak would make the cosine climb after the warm-up, silently.
  ULY_CHECK(c.min_lr <= c.lr, src << ": optimizer.min_lr " << c.min_lr << " is above optimizer.lr " << c.lr
                                  << " (the schedule would climb after the warm-up); lower min_lr, or leave it "
                                     "out for 0.1 x lr");
  return c;
}

}  // namespace ulysses
