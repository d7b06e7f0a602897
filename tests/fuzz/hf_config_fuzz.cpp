// libFuzzer target: config.json (both transformers layouts, rope blocks, every
// limit), written back and read again; and, when the input is not a config, the
// same bytes as a sharded model's index (weight_map entries confined to the folder).
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/hf_config.h"
#include "io/model_folder.h"
#include "io/safetensors.h"

namespace {

// A model folder with a valid config.json and one small shard, made once; the index is the input.
const std::string& model_dir() {
  static const std::string dir = [] {
    using namespace ulysses;
    const std::string d = fuzz::work_dir() + "/model";
    std::filesystem::create_directories(d);
    ModelConfig c;
    named_model_config("tiny", &c);
    std::FILE* f = std::fopen((d + "/config.json").c_str(), "wb");
    const std::string text = hf_config_json(c).dump();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    Tensor t = Tensor::empty({4}, DType::F32);
    for (int i = 0; i < 4; ++i) t.data<float>()[i] = float(i);
    write_safetensors(d + "/model-00001-of-00001.safetensors", {{"model.norm.weight", t}, {"lm_head.weight", t}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string path = fuzz::write_input("config.json", data, size);
  try {
    const ModelConfig c = load_hf_config(path);
    // What we write back must read back the same.
    const ModelConfig again = parse_hf_config(hf_config_json(c), "written back");
    if (again.hidden_size != c.hidden_size || again.rope.theta != c.rope.theta || again.vocab_size != c.vocab_size)
      std::abort();
  } catch (const Error&) {
  }
  fuzz::write_file(model_dir() + "/model.safetensors.index.json", data, size);
  try {
    const ModelFolder m = ModelFolder::open(model_dir());
    for (const auto& name : m.tensor_names()) m.info(name);
  } catch (const Error&) {
  }
  return 0;
}
