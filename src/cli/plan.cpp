// ulysses plan --model DIR | --shape NAME --seq S [--sp P] [memory options]
// The exact memory plan of one training step, per pool, without running it
// (and without a GPU or the ranks it describes).
#include <iostream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "io/model_folder.h"
#include "train/memory_plan.h"

namespace ulysses {

int run_plan(int argc, char** argv) {
  std::vector<OptionSpec> specs = {
      {"model", true, false, "Hugging Face model folder (config.json is enough)"},
      {"shape", true, false, "a named shape instead: llama-3.1-8b, llama-3.2-1b, llama-3.2-3b, tiny"},
      {"layers", true, false, "override the number of layers"},
      {"seq", true, false, "sequence length in tokens (global, before splitting over sp)"},
      {"help", false, false, "show this help"},
  };
  for (auto& s : engine_option_specs())
    if (s.name != "dry-run" && s.name != "memory-report" && s.name != "no-reserve" && s.name != "comm")
      specs.push_back(s);
  Args args("plan", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("plan", specs);
    return 0;
  }
  PlanRequest req;
  req.config = model_config_from(args, "plan");
  req.seq_len = args.get_int("seq", 0);
  ULY_CHECK(req.seq_len > 0, "plan: give the sequence length with --seq TOKENS");
  req.sp = std::max(1, sp_degree_from(args));
  req.options = step_options_from(args);
  const std::string backend = backend_name_from(args);
  req.act_dtype = act_dtype_from(args);
  req.device = backend == "cuda" ? Device::CUDA : Device::CPU;
  // Where the GPU is here, its backend answers for its own workspaces (cuDNN's); elsewhere they are estimated.
  std::unique_ptr<Backend> runtime;
  if (req.device == Device::CUDA && cuda_backend_compiled_in()) {
    try {
      runtime = make_cuda_backend(0, req.act_dtype);
    } catch (const Error&) {
      runtime.reset();
    }
  }
  req.runtime = runtime.get();
  const MemorySnapshot m = plan_step_memory(req);
  std::cout << "memory plan: " << req.config.num_hidden_layers << " layers, hidden " << req.config.hidden_size
            << ", sequence " << req.seq_len << ", sp " << req.sp << ", backend " << backend << "\n"
            << memory_report(m, local_tokens(req), req.config.hidden_size);
  if (req.device == Device::CUDA && !runtime)
    std::cout << "note: no GPU here: the attention workspace is our own kernels' (cuDNN's, chosen on the GPU, "
                 "is known only there); run plan on the GPU machine for the exact figure\n";
  if (args.has("memory-limit")) {
    const size_t limit = static_cast<size_t>(args.get_double("memory-limit", 0) * double(size_t(1) << 30));
    check_plan_fits(req, m, limit, host_memory_available());
    std::cout << "fits in " << format_bytes(limit) << "\n";
  }
  return 0;
}

}  // namespace ulysses
