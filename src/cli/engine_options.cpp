#include "cli/engine_options.h"

#include <cstdlib>
#include <iostream>

#include "comm/launch_env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory_pools.h"
#include "train/memory_plan.h"

namespace ulysses {

std::vector<OptionSpec> engine_option_specs() {
  return {
      {"backend", true, false, "cpu (default) or cuda"},
      {"dtype", true, false, "compute dtype on cuda: bf16 (default) or fp32 (to check against float64 references); "
                             "the cpu backend is fp32 only"},
      {"sp", true, false, "sequence-parallel degree (default: all ranks); dp = ranks / sp"},
      {"sp-ring", true, false, "ring-attention degree R inside the sequence-parallel group: Ulysses all-to-all "
                               "inside groups of sp / R ranks, K/V passed around a ring of R groups (default 1; "
                               "R = sp is pure ring attention, which no head count limits)"},
      {"zigzag", false, false, "with --sp-ring: zigzag (dual-chunk) sharding, so that every ring rank does the "
                               "same causal work (the sequence must divide by 2 × R)"},
      {"comm", true, false, "mpi (default: device tensors staged through host memory; ranks may share a GPU) or "
                            "nccl (device buffers on NCCL; cuda backend, one GPU per rank)"},
      {"tiled-mlp", true, true, "run the MLP over N sequence tiles (default N = ceil(local tokens / hidden))"},
      {"tiled-loss", true, true, "lm_head + loss over tiles of this many tokens (default 1024)"},
      {"checkpoint", false, false, "keep only each layer's input; recompute the layer in backward"},
      {"offload-checkpoints", true, true, "keep the first K layers' checkpoints (or all) in host memory; implies "
                                          "--checkpoint (default all)"},
      {"checkpoint-every", true, false, "two-level checkpoints: keep one input per segment of K layers; the backward "
                                        "recomputes a segment's forward once (implies --checkpoint; default 1)"},
      {"head-chunks", true, false, "run the attention side of each layer (q/k/v projections, all-to-alls, kernel) "
                                   "one chunk of H/N heads at a time, its working set divided by N; the backward "
                                   "recomputes each chunk's q/k/v (default 1)"},
      {"keep-attention", true, true, "on|off|auto: with checkpoints, keep each layer's attention output and "
                                     "log-sum-exp on the device so that the recompute skips the attention (2 of its 9 "
                                     "FLOP units); auto (the default) keeps them when the plan with them fits"},
      {"grad-dtype", true, false, "gradient buffers: float32 (default) or bfloat16 (half their memory: each layer's "
                                  "gradients are summed in a float32 scratch, then rounded into the buffers once; "
                                  "summed across ranks in float32)"},
      {"no-comm-overlap", false, false, "with --zero 2 or 3: wait for each layer's gradient reduce-scatter and "
                                        "weight gather at once instead of running them beside the next layer's "
                                        "compute (to measure what the overlap saves)"},
      {"dry-run", false, false, "print the memory plan per pool and stop before allocating anything"},
      {"memory-limit", true, false, "refuse steps whose planned device peak exceeds this many GiB (default: the "
                                    "device's free memory)"},
      {"memory-report", false, false, "print the measured peak per pool after the step"},
      {"no-reserve", false, false, "allocate each tensor from the device (cudaMalloc/cudaFree) instead of from one "
                                   "block per pool reserved at the planned peak"},
  };
}

namespace {

StepOptions step_options_from(const Args& args) {
  StepOptions o;
  if (args.has("tiled-mlp")) o.mlp_tiles = args.get_int("tiled-mlp", 0, limits::kMlpTiles);  // 0: decided per sequence
  if (args.has("tiled-loss")) o.loss_tile_tokens = args.get_int("tiled-loss", 1024, limits::kLossTileOption);
  o.checkpoint = args.has("checkpoint");
  if (args.has("offload-checkpoints")) {
    const std::string v = args.get("offload-checkpoints", "all");
    o.checkpoint = true;
    o.offload_layers =
        (v.empty() || v == "all") ? -1 : args.get_int("offload-checkpoints", -1, limits::kOffloadLayers);
  }
  if (args.has("checkpoint-every")) {
    o.checkpoint_every = args.get_int("checkpoint-every", 1, limits::kCheckpointSegment);
    o.checkpoint = true;
  }
  if (args.has("head-chunks")) o.head_chunks = args.get_int("head-chunks", 1, limits::kHeadChunks);
  o.overlap_communication = !args.has("no-comm-overlap");
  const std::string grad = args.get("grad-dtype", "float32");
  ULY_CHECK(grad == "float32" || grad == "fp32" || grad == "bfloat16" || grad == "bf16",
            "--grad-dtype takes float32 (fp32) or bfloat16 (bf16), got '" << grad << "'");
  o.grad_dtype = grad == "bfloat16" || grad == "bf16" ? DType::BF16 : DType::F32;
  return o;
}

KeepAttention keep_attention_from(const Args& args, bool checkpoint) {
  const std::string keep = args.has("keep-attention") ? args.get("keep-attention", "on") : "auto";
  ULY_CHECK(keep.empty() || keep == "on" || keep == "off" || keep == "auto",
            "--keep-attention takes on, off or auto, got '" << keep << "'");
  const bool on = keep.empty() || keep == "on";
  ULY_CHECK(!on || checkpoint,
            "--keep-attention keeps attention outputs for the recompute of checkpointed layers; add --checkpoint "
            "(or --offload-checkpoints)");
  return on ? KeepAttention::On : keep == "off" ? KeepAttention::Off : KeepAttention::Auto;
}

BackendKind backend_kind_from(const Args& args) {
  const std::string b = args.get("backend", "cpu");
  ULY_CHECK(b == "cpu" || b == "cuda", "unknown --backend '" << b << "' (choose cpu or cuda)");
  return b == "cuda" ? BackendKind::Cuda : BackendKind::Cpu;
}

DType act_dtype_from(const Args& args, BackendKind b) {
  const std::string dtype = args.get("dtype", b == BackendKind::Cuda ? "bf16" : "fp32");
  ULY_CHECK(dtype == "bf16" || dtype == "fp32", "unknown --dtype '" << dtype << "' (choose bf16 or fp32)");
  ULY_CHECK(b == BackendKind::Cuda || dtype == "fp32",
            "--dtype " << dtype << ": the cpu backend computes in fp32 only (it is the reference)");
  return dtype == "fp32" ? DType::F32 : DType::BF16;
}

CommKind comm_kind_from(const Args& args) {
  const std::string c = args.get("comm", "mpi");
  ULY_CHECK(c == "mpi" || c == "nccl", "unknown communicator '" << c << "' (choose mpi or nccl)");
  return c == "nccl" ? CommKind::Nccl : CommKind::Mpi;
}

}  // namespace

EngineConfig engine_config_from(const Args& args, bool optimizer) {
  EngineConfig e;
  e.backend = backend_kind_from(args);
  e.act_dtype = act_dtype_from(args, e.backend);
  e.comm = comm_kind_from(args);
  // --sp absent: all ranks (0 to the mesh). Given: a degree, at least 1.
  e.sp = static_cast<int>(args.get_int("sp", 0, IntRange{1, limits::kSpDegree.hi, "omit --sp for all ranks"}));
  e.ring = static_cast<int>(args.get_int("sp-ring", 1, limits::kRingDegree));
  ULY_CHECK(!args.has("zigzag") || args.has("sp-ring"),
            "--zigzag balances causal work over a ring of ranks; add --sp-ring R (R > 1)");
  e.zigzag = args.has("zigzag");
  e.memory = step_options_from(args);
  e.keep_attention = keep_attention_from(args, e.memory.checkpoint);
  const int64_t zero = args.get_int("zero", 0, IntRange{0, 3, "ZeRO stage"});
  // Without an optimizer --zero 2 and 3 still shard the gradients and weights (stage 1 has
  // nothing to shard then); --offload-optimizer has nothing to place.
  ULY_CHECK(optimizer || (zero != 1 && !args.has("offload-optimizer")),
            "--zero 1 and --offload-optimizer place the optimizer's state; this step has no optimizer"
            " (drop --no-optimizer, or drop them; --zero 2 and 3 shard the gradients and weights without one)");
  e.optimizer = optimizer;
  e.zero = static_cast<int>(zero);
  e.offload_optimizer = args.has("offload-optimizer");
  e.reserve = !args.has("no-reserve");
  // plan's --memory-limit may say auto (the GPU here): plan reads its budgets itself.
  if (args.get("memory-limit", "") != "auto") e.device_limit = gib_option(args, "memory-limit", 0);
  e.spelling = OptionSpelling::Flags;
  return e;
}

ModelConfig model_config_from(const Args& args, const std::string& command) {
  ModelConfig config;
  if (args.has("model")) {
    config = load_hf_config(args.require("model") + "/config.json");
  } else {
    const std::string shape = args.require("shape");
    ULY_CHECK(named_model_config(shape, &config),
              command << ": unknown --shape '" << shape << "' (known: " << named_model_configs() << ")");
  }
  if (args.has("layers")) config.num_hidden_layers = args.get_int("layers", config.num_hidden_layers, limits::kLayers);
  return config;
}

}  // namespace ulysses

namespace ulysses {

std::vector<OptionSpec> optimizer_option_specs() {
  return {
      {"zero", true, false, "ZeRO stage over all ranks: 0 (default) = each rank holds the whole AdamW state; 1 = the "
                            "state sharded, 1/ranks each; 2 = the gradients too, reduce-scattered layer by layer "
                            "during the backward; 3 = the weights too, each layer's gathered one layer ahead of use"},
      {"offload-optimizer", false, false, "keep the AdamW state (fp32 master, m, v) in pinned host memory and run "
                                          "the update on the CPU"},
  };
}

size_t gib_option(const Args& args, const std::string& name, size_t fallback) {
  if (!args.has(name)) return fallback;
  return static_cast<size_t>(args.get_double(name, 0, limits::kGiB) * static_cast<double>(size_t(1) << 30));
}

bool print_dry_run(const Args& args, Engine& engine, const Engine::Plan& plan, int64_t seq_len) {
  if (!args.has("dry-run")) return false;
  const PlanRequest& req = plan.request;
  std::cout << "memory plan: sequence " << seq_len << ", sp " << req.sp
            << (req.ring > 1 ? " (ring " + std::to_string(req.ring) + (req.zigzag ? ", zigzag)" : ")") : "")
            << ", backend " << engine.backend().name() << "\n"
            << memory_report(plan.memory, local_tokens(req), req.config.hidden_size);
  return true;
}

}  // namespace ulysses
