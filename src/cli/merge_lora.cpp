// ulysses merge-lora --model BASE --adapter ADAPTER --out DIR [--dtype bfloat16]
// A Hugging Face model folder with a PEFT LoRA adapter merged into its weights (W + s B A), as
// PEFT's merge_and_unload gives it: loads in transformers without PEFT, and computes what the base
// with the adapter computes.
#include <filesystem>
#include <iostream>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "io/model_folder.h"
#include "io/peft_adapter.h"
#include "model/lora_weights.h"

namespace ulysses {

int run_merge_lora(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", true, false, "the base model folder the adapter was trained on"},
      {"adapter", true, false, "PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)"},
      {"out", true, false, "the merged Hugging Face model folder to write"},
      {"dtype", true, false, "dtype of the merged weights: bfloat16 (default), float16 or float32"},
      {"help", false, false, "show this help"},
  };
  Args args("merge-lora", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("merge-lora", specs);
    return 0;
  }
  const std::string model_dir = args.require("model"), adapter_dir = args.require("adapter"),
                    out_dir = args.require("out"), dtype_name_arg = args.get("dtype", "bfloat16");
  ULY_CHECK(dtype_name_arg == "bfloat16" || dtype_name_arg == "float16" || dtype_name_arg == "float32",
            "merge-lora: --dtype must be bfloat16, float16 or float32, got '" << dtype_name_arg << "'");
  const DType dtype = dtype_name_arg == "float32" ? DType::F32 : dtype_name_arg == "float16" ? DType::F16 : DType::BF16;
  std::error_code ec;
  ULY_CHECK(!std::filesystem::exists(out_dir, ec) || std::filesystem::is_empty(out_dir, ec),
            "merge-lora: --out " << out_dir << " exists and is not empty (it could be the base itself); give a new "
                                 "folder");
  const ModelFolder folder = ModelFolder::open(model_dir);
  const LoraConfig lora_config = read_peft_adapter_config(adapter_dir);
  // The merge runs on the CPU reference backend, in float32 (the masters' precision).
  auto backend = make_cpu_backend();
  LlamaWeights weights(folder.config());
  weights.freeze();
  weights.load(folder, *backend);
  LoraWeights lora(folder.config(), lora_config);
  lora.load(adapter_dir, *backend);
  lora.merge_into(weights, *backend);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Parameter& p : weights.params()) tensors.emplace_back(p.name, p.value);
  save_model_folder(out_dir, folder.config(), tensors, dtype);
  copy_model_assets({model_dir}, out_dir);
  std::cout << "merged " << adapter_dir << " (r " << lora_config.r << ", scaling " << lora.scaling() << ") into "
            << model_dir << "; wrote " << out_dir << "\n";
  return 0;
}

}  // namespace ulysses
