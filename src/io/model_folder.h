// A Hugging Face model folder: config.json plus model.safetensors, or shards
// listed in model.safetensors.index.json ({"weight_map": {name: file}}).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace ulysses {

class ModelFolder {
 public:
  // Reads config.json and opens the weight file(s); throws naming the folder and file.
  static ModelFolder open(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  bool contains(const std::string& name) const;
  // The stored tensor's description (dtype, shape); throws naming the file if absent.
  const SafetensorsInfo& info(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;
  std::vector<std::string> tensor_names() const;
  // Every weight file read ahead in the background (SafetensorsFile::read_ahead).
  void read_ahead() const;

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
};

// Writes config.json and the weights (converted to `dtype`), as one
// model.safetensors, or as model-0000K-of-0000N.safetensors shards plus
// model.safetensors.index.json when the total exceeds shard_bytes.
// Written into DIR.tmp then renamed, so DIR is never left half-written.
void save_model_folder(const std::string& dir, const ModelConfig& config,
                       const std::vector<std::pair<std::string, Tensor>>& tensors, DType dtype,
                       size_t shard_bytes = size_t(5) << 30);

// The files beside config.json and the weights that make a folder whole for
// transformers (AutoTokenizer, generate, apply_chat_template): the tokenizer
// (tokenizer.json, tokenizer_config.json with its chat template,
// special_tokens_map.json, a SentencePiece tokenizer.model), chat_template.jinja /
// chat_template.json and generation_config.json.
const std::vector<std::string>& model_asset_names();

// Copies each asset found in the first of `from_dirs` that has it into `dir`
// (an existing folder); folders that do not exist are skipped, a non-regular file
// is an error naming it. Returns the names copied.
std::vector<std::string> copy_model_assets(const std::vector<std::string>& from_dirs, const std::string& dir);

}  // namespace ulysses
