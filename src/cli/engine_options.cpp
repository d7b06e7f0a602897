#include "cli/engine_options.h"

#include <cstdlib>

namespace ulysses {

std::vector<OptionSpec> engine_option_specs() {
  return {
      {"backend", true, false, "cpu (default) or cuda"},
      {"sp", true, false, "sequence-parallel degree (default: all ranks); dp = ranks / sp"},
      {"tiled-mlp", true, true, "run the MLP over N sequence tiles (default N = ceil(local tokens / hidden))"},
      {"tiled-loss", true, true, "lm_head + loss over tiles of this many tokens (default 1024)"},
      {"checkpoint", false, false, "keep only each layer's input; recompute the layer in backward"},
  };
}

StepOptions step_options_from(const Args& args) {
  StepOptions o;
  if (args.has("tiled-mlp")) o.mlp_tiles = args.get_int("tiled-mlp", 0);  // 0: decided per sequence
  if (args.has("tiled-loss")) o.loss_tile_tokens = args.get_int("tiled-loss", 1024);
  o.checkpoint = args.has("checkpoint");
  return o;
}

std::unique_ptr<Backend> backend_from(const Args& args, int local_rank) {
  const std::string b = args.get("backend", "cpu");
  if (b == "cpu") return make_cpu_backend();
  if (b == "cuda") return make_cuda_backend(local_rank);
  ULY_FAIL("unknown --backend '" << b << "' (choose cpu or cuda)");
}

int sp_degree_from(const Args& args) { return static_cast<int>(args.get_int("sp", 0)); }

}  // namespace ulysses
