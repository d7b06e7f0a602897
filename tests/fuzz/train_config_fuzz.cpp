// libFuzzer target: the YAML training config (yaml-cpp, conversion with its node and
// depth budget, key and type checks, every range) and, as a second pass, the same
// text as one command-line override.
#include "core/error.h"
#include "fuzz_input.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string path = fuzz::write_input("train.yaml", data, size);
  try {
    load_train_config(path, {"data.train=x", "model_config=tiny"});
  } catch (const Error&) {
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    load_train_config("", {"data.train=x", "model_config=tiny", "optimizer.lr=" + text});
  } catch (const Error&) {
  }
  return 0;
}
