#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "cli/args.h"
#include "core/error.h"

namespace ulysses {
namespace {

// The schema: every key with its default. Nested maps are sections.
const char* kDefaultsYaml = R"(# ulysses train: every key and its default.
model: ""               # Hugging Face model folder to start from
model_config: ""        # or: a named shape (tiny, llama-3.2-1b, ...) or a config.json, randomly initialised
num_layers: 0           # > 0: override the number of layers (random init only)
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
  min_lr: 3.0e-5        # cosine decays to this at the last step
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
out_dir: runs/train     # metrics.jsonl, checkpoints/, loss.png
resume: false           # continue from out_dir's latest complete checkpoint
overwrite: false        # a fresh run may write into an out_dir that holds another run's results
save_dtype: bfloat16    # dtype of the checkpoints' Hugging Face weights (bfloat16, float16 or float32); masters stay fp32
keep_last: 0            # > 0: keep only the newest N checkpoints (never removing the one 'latest' names)
tokenizer: ""           # folder whose tokenizer/chat-template files go into every checkpoint's model/;
                        # default: the model folder's, else the tokenizer data.train was prepared with
sp: 0                   # sequence-parallel degree; 0 = all ranks
backend: cpu            # cpu or cuda
dtype: bf16             # compute dtype on cuda: bf16 or fp32 (cpu is always fp32)
comm: mpi               # mpi (ranks may share a GPU) or nccl (cuda, one GPU per rank)
memory:
  tiled_mlp: 1          # MLP sequence tiles; 0 = ceil(tokens / hidden); 1 = off
  tiled_loss: 0         # tokens per lm_head + loss tile; 0 = off
  checkpoint: false     # recompute each layer in backward from its saved input
  offload_checkpoints: 0  # first K layers' checkpoints to host memory; -1 = all (implies checkpoint)
  keep_attention: false   # with checkpoints: keep attention outputs so that the recompute skips the attention
  checkpoint_every: 1     # two-level checkpoints: one saved input per this many layers (implies checkpoint)
)";

nlohmann::json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return nullptr;
    case YAML::NodeType::Map: {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& e : n) j.push_back(yaml_to_json(e));
      return j;
    }
    default: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~") return nullptr;
      try {
        size_t used = 0;
        const long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
      } catch (...) {
      }
      try {
        size_t used = 0;
        const double d = std::stod(s, &used);
        // "nan" and "inf" stay text: a folder may be called nan, and no option takes them as numbers.
        if (used == s.size() && std::isfinite(d)) return d;
      } catch (...) {
      }
      return s;
    }
  }
}

void collect_keys(const nlohmann::json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) collect_keys(*it, k, out);
    else out.push_back(k);
  }
}

// Merges `user` into `base`, checking every key exists in the schema with a compatible type.
void merge_checked(nlohmann::json& base, const nlohmann::json& user, const std::string& prefix,
                   const std::vector<std::string>& all_keys, const std::string& source) {
  ULY_CHECK(user.is_object(), source << ": " << (prefix.empty() ? "the file" : "'" + prefix + "'")
                                     << " must be a mapping of keys to values");
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
    ULY_CHECK(base.contains(it.key()),
              source << ": unknown key '" << k << "' (did you mean '" << nearest(k, all_keys) << "'?)");
    nlohmann::json& slot = base[it.key()];
    if (slot.is_object()) {
      merge_checked(slot, *it, k, all_keys, source);
      continue;
    }
    const nlohmann::json& v = *it;
    const bool ok = (slot.is_boolean() && v.is_boolean()) || (slot.is_number() && v.is_number()) ||
                    (slot.is_string() && (v.is_string() || v.is_number()));
    ULY_CHECK(ok, source << ": key '" << k << "' expects " << (slot.is_boolean() ? "true or false"
                                                              : slot.is_number() ? "a number"
                                                                                 : "a string")
                         << ", got " << v.dump());
    if (slot.is_number_integer() && v.is_number_float())
      ULY_FAIL(source << ": key '" << k << "' expects an integer, got " << v.dump());
    slot = slot.is_string() && v.is_number() ? nlohmann::json(v.dump()) : v;
  }
}

nlohmann::json parse_yaml_text(const std::string& text, const std::string& source) {
  try {
    YAML::Node n = YAML::Load(text);
    if (!n.IsDefined() || n.IsNull()) return nlohmann::json::object();
    return yaml_to_json(n);
  } catch (const YAML::Exception& e) {
    ULY_FAIL(source << ": invalid YAML at line " << e.mark.line + 1 << ", column " << e.mark.column + 1 << ": "
                    << e.msg);
  }
}

}  // namespace

std::string train_config_defaults_yaml() { return kDefaultsYaml; }

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  nlohmann::json cfg = parse_yaml_text(kDefaultsYaml, "defaults");
  std::vector<std::string> keys;
  collect_keys(cfg, "", keys);
  if (!path.empty()) {
    std::ifstream in(path);
    ULY_CHECK(in.good(), path << ": cannot open the training config");
    std::stringstream ss;
    ss << in.rdbuf();
    merge_checked(cfg, parse_yaml_text(ss.str(), path), "", keys, path);
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    std::string o = overrides[i], key, value;
    if (o.rfind("--", 0) == 0) o = o.substr(2);
    const size_t eq = o.find('=');
    if (eq != std::string::npos) {
      key = o.substr(0, eq);
      value = o.substr(eq + 1);
    } else {
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

  TrainConfig c;
  c.as_json = cfg;
  c.model = cfg["model"];
  c.model_config = cfg["model_config"];
  c.num_layers = cfg["num_layers"];
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
  c.out_dir = cfg["out_dir"];
  c.resume = cfg["resume"];
  c.overwrite = cfg["overwrite"];
  c.save_dtype = cfg["save_dtype"];
  c.keep_last = cfg["keep_last"];
  c.tokenizer = cfg["tokenizer"];
  c.sp = cfg["sp"];
  c.backend = cfg["backend"];
  c.dtype = cfg["dtype"];
  c.comm = cfg["comm"];
  const auto& m = cfg["memory"];
  c.memory.mlp_tiles = m["tiled_mlp"];
  c.memory.loss_tile_tokens = m["tiled_loss"];
  c.memory.checkpoint = m["checkpoint"];
  c.memory.offload_layers = m["offload_checkpoints"];
  if (c.memory.offload_layers != 0) c.memory.checkpoint = true;
  c.memory.keep_attention = m["keep_attention"];
  c.memory.checkpoint_every = m["checkpoint_every"];
  if (c.memory.checkpoint_every > 1) c.memory.checkpoint = true;

  const std::string src = path.empty() ? std::string("train config") : path;
  ULY_CHECK(!c.model.empty() || !c.model_config.empty(),
            src << ": give 'model' (a Hugging Face folder) or 'model_config' (a named shape or config.json)");
  ULY_CHECK(c.model.empty() || c.model_config.empty(), src << ": give either 'model' or 'model_config', not both");
  ULY_CHECK(!c.train_data.empty(), src << ": 'data.train' is required (shards from `ulysses prepare`)");
  ULY_CHECK(c.seq_len > 0, src << ": 'data.seq_len' must be positive, got " << c.seq_len);
  ULY_CHECK(c.data_mode == "pack" || c.data_mode == "long",
            src << ": 'data.mode' must be pack or long, got '" << c.data_mode << "'");
  ULY_CHECK(c.batch_size > 0 && c.grad_accum > 0 && c.steps > 0,
            src << ": batch_size, grad_accum and steps must be positive");
  ULY_CHECK(c.lr >= 0 && c.min_lr >= 0 && c.warmup_steps >= 0, src << ": learning rates and warmup must be >= 0");
  ULY_CHECK(c.save_dtype == "float32" || c.save_dtype == "bfloat16" || c.save_dtype == "float16",
            src << ": 'save_dtype' must be float32, bfloat16 or float16, got '" << c.save_dtype << "'");
  ULY_CHECK(c.keep_last >= 0, src << ": 'keep_last' must be >= 0 (0 keeps every checkpoint), got " << c.keep_last);
  ULY_CHECK(c.memory.mlp_tiles >= 0, src << ": 'memory.tiled_mlp' must be >= 0");
  ULY_CHECK(c.memory.offload_layers >= -1, src << ": 'memory.offload_checkpoints' must be >= -1");
  ULY_CHECK(c.memory.checkpoint_every >= 1, src << ": 'memory.checkpoint_every' must be >= 1, got "
                                                << c.memory.checkpoint_every);
  ULY_CHECK(!c.memory.keep_attention || c.memory.checkpoint,
            src << ": 'memory.keep_attention' needs 'memory.checkpoint' (it keeps outputs for the recompute)");
  ULY_CHECK(c.log_every > 0, src << ": 'log_every' must be positive");
  ULY_CHECK(c.skip_nonfinite >= 0, src << ": 'skip_nonfinite' must be >= 0, got " << c.skip_nonfinite);
  return c;
}

}  // namespace ulysses
