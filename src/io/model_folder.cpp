#include "io/model_folder.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/json_depth.h"
#include "core/error.h"
#include "core/limits.h"
#include "io/atomic_file.h"
#include "io/checksums.h"
#include "io/regular_file.h"

namespace ulysses {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// "a/b/" -> "a/b": DIR.tmp and DIR.old must be siblings of DIR, not children.
std::string strip_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path, "JSON file", limits::kMaxJsonBytes);
  check_json_depth(text, path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    ULY_FAIL(path << ": malformed JSON: " << e.what());
  }
}

// Removes DIR.tmp on every exit but a successful commit.
class TempDir {
 public:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (!released_) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  void release() { released_ = true; }

 private:
  std::string path_;
  bool released_ = false;
};

}  // namespace

ModelFolder ModelFolder::open(const std::string& dir) {
  ModelFolder m;
  m.dir_ = dir;
  std::error_code ec;
  ULY_CHECK(fs::is_directory(dir, ec), dir << ": " << (fs::exists(dir, ec) ? "not a directory" : "does not exist")
                                           << " (expected a Hugging Face model folder)");
  const std::string config_path = join(dir, "config.json");
  ULY_CHECK(fs::exists(config_path, ec), dir << ": no config.json (a model folder needs config.json plus "
                                             << kSingle << " or " << kIndex << ")");
  // A folder we wrote (a checkpoint's model/) lists its files' checksums: a flipped bit in a
  // tensor would otherwise load as a number.
  verify_checksums(dir);
  m.config_ = load_hf_config(config_path);

  const std::string single = join(dir, kSingle), index = join(dir, kIndex);
  if (fs::exists(single, ec)) {
    m.files_.push_back(SafetensorsFile::open(single));
    for (const auto& e : m.files_[0].entries()) m.where_[e.name] = 0;
    return m;
  }
  ULY_CHECK(fs::exists(index, ec), dir << ": no " << kSingle << " or " << kIndex);

  const json j = read_json_file(index);
  ULY_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
            index << ": expected an object with a 'weight_map' {tensor name: shard file}");
  const json& wm = j["weight_map"];
  ULY_CHECK(!wm.empty(), index << ": 'weight_map' is empty");
  std::map<std::string, size_t> shard_index;  // each shard opened once
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    const std::string& name = it.key();
    ULY_CHECK(it.value().is_string(),
              index << ": weight_map entry '" << name << "' must be a file name, got " << it.value().dump());
    const std::string shard = it.value().get<std::string>();
    // Shards live next to the index; anything else would read outside the folder.
    const std::string shard_path = confined_path(dir, shard, index, "weight_map entry '" + name + "'");
    auto found = shard_index.find(shard);
    if (found == shard_index.end()) {
      ULY_CHECK(fs::exists(shard_path, ec),
                index << ": shard '" << shard << "' (listed for tensor '" << name << "') does not exist in " << dir);
      m.files_.push_back(SafetensorsFile::open(shard_path));
      found = shard_index.emplace(shard, m.files_.size() - 1).first;
    }
    ULY_CHECK(m.files_[found->second].contains(name),
              index << ": tensor '" << name << "' is listed in shard '" << shard << "' but "
                    << m.files_[found->second].path() << " does not contain it");
    m.where_[name] = found->second;
  }
  return m;
}

bool ModelFolder::contains(const std::string& name) const { return where_.count(name) != 0; }

const SafetensorsFile& ModelFolder::file_of(const std::string& name) const {
  auto it = where_.find(name);
  ULY_CHECK(it != where_.end(), dir_ << ": the model has no tensor '" << name << "' (" << where_.size()
                                     << " tensors, e.g. '" << (where_.empty() ? "" : where_.begin()->first) << "')");
  return files_[it->second];
}

void ModelFolder::read_ahead() const {
  for (const SafetensorsFile& f : files_) f.read_ahead();
}

const SafetensorsInfo& ModelFolder::info(const std::string& name) const { return file_of(name).info(name); }

std::vector<std::string> ModelFolder::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, i] : where_) names.push_back(name);
  return names;
}

// ---- save ---------------------------------------------------------------------

namespace {

// The tensor as stored: float tensors converted to `dtype`, others unchanged.
Tensor to_saved_dtype(const Tensor& t, DType dtype) {
  if (!is_float(t.dtype()) || t.dtype() == dtype) return t;
  const size_t n = static_cast<size_t>(t.numel());
  Tensor f32 = t;
  if (t.dtype() != DType::F32) {
    f32 = Tensor::empty(t.shape(), DType::F32);
    convert_to_f32(f32.data<float>(), t.raw(), t.dtype(), n);
  }
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert_from_f32(out.raw(), dtype, f32.data<float>(), n);
  return out;
}

size_t saved_bytes(const Tensor& t, DType dtype) {
  return is_float(t.dtype()) ? static_cast<size_t>(t.numel()) * dtype_size(dtype) : t.nbytes();
}

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

}  // namespace

void save_model_folder(const std::string& dir_in, const ModelConfig& config,
                       const std::vector<std::pair<std::string, Tensor>>& tensors, DType dtype, size_t shard_bytes) {
  const std::string dir = strip_slashes(dir_in);
  ULY_CHECK(!dir.empty(), "save_model_folder: empty folder name");
  ULY_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
            dir << ": cannot save weights as " << dtype_name(dtype) << " (supported: float32, bfloat16, float16)");
  ULY_CHECK(shard_bytes > 0, dir << ": shard size limit must be positive");
  ULY_CHECK(!tensors.empty(), dir << ": no tensors to save");
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    ULY_CHECK(seen.insert(name).second, dir << ": tensor '" << name << "' given twice");
    ULY_CHECK(t.defined(), dir << ": tensor '" << name << "' is undefined");
    ULY_CHECK(t.device() == Device::CPU,
              dir << ": tensor '" << name << "' is on " << device_name(t.device()) << "; copy it to the host first");
  }

  // Greedy sharding in the given order: start a new shard when the next tensor
  // would push the current one past the limit (a tensor larger than the limit
  // gets a shard of its own).
  std::vector<std::vector<size_t>> shards(1);
  size_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t b = saved_bytes(tensors[i].second, dtype);
    if (!shards.back().empty() && in_shard + b > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
    total += b;
  }

  std::error_code ec;
  const std::string tmp = dir + ".tmp", old = dir + ".old";
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    ULY_CHECK(!ec, dir << ": cannot create parent folder " << parent.string() << " (" << ec.message() << ")");
  }
  fs::remove_all(tmp, ec);  // a stale one from an interrupted save
  ULY_CHECK(!ec, dir << ": cannot remove stale " << tmp << " (" << ec.message() << ")");
  TempDir guard(tmp);
  fs::create_directory(tmp, ec);
  ULY_CHECK(!ec, dir << ": cannot create " << tmp << " (" << ec.message() << ")");

  ModelConfig saved = config;
  saved.torch_dtype = dtype_name(dtype);
  write_file_atomic(join(tmp, "config.json"), hf_config_json(saved).dump(2) + "\n");

  // transformers refuses safetensors files whose metadata lacks format=pt.
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  json weight_map = json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? kSingle : shard_name(k + 1, shards.size());
    // Convert one shard at a time so peak extra memory is one shard, not the model.
    std::vector<std::pair<std::string, Tensor>> part;
    for (size_t i : shards[k]) {
      part.emplace_back(tensors[i].first, to_saved_dtype(tensors[i].second, dtype));
      weight_map[tensors[i].first] = file;
    }
    write_safetensors(join(tmp, file), part, metadata);
  }
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(join(tmp, kIndex), index.dump(2) + "\n");
  }

  // Swap in: DIR -> DIR.old, DIR.tmp -> DIR, drop DIR.old. DIR is only ever
  // absent between the two renames, and then DIR.old holds it.
  bool moved_old = false;
  if (fs::exists(dir, ec)) {
    ULY_CHECK(fs::is_directory(dir, ec), dir << ": exists and is not a folder; refusing to replace it");
    fs::remove_all(old, ec);
    ULY_CHECK(!ec, dir << ": cannot remove stale " << old << " (" << ec.message() << ")");
    fs::rename(dir, old, ec);
    ULY_CHECK(!ec, dir << ": cannot move the existing folder aside to " << old << " (" << ec.message()
                       << "); nothing was changed");
    moved_old = true;
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    const std::string why = ec.message();
    if (moved_old) fs::rename(old, dir, ec);
    ULY_FAIL(dir << ": cannot rename " << tmp << " into place (" << why << "); the previous folder was kept");
  }
  guard.release();
  if (moved_old) fs::remove_all(old, ec);  // best effort: the new folder is already in place
}

const std::vector<std::string>& model_asset_names() {
  static const std::vector<std::string> names = {
      "tokenizer.json",      "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
      "chat_template.jinja", "chat_template.json",    "generation_config.json"};
  return names;
}

std::vector<std::string> copy_model_assets(const std::vector<std::string>& from_dirs, const std::string& dir) {
  std::vector<std::string> copied;
  for (const std::string& name : model_asset_names()) {
    for (const std::string& from : from_dirs) {
      std::error_code ec;
      const fs::path src = fs::path(from) / name;
      if (from.empty() || !fs::exists(src, ec)) continue;
      require_regular_file(src.string(), "model asset");
      fs::copy_file(src, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
      ULY_CHECK(!ec, (fs::path(dir) / name).string() << ": cannot copy from " << src.string() << " ("
                                                      << ec.message() << ")");
      copied.push_back(name);
      break;
    }
  }
  return copied;
}

}  // namespace ulysses
