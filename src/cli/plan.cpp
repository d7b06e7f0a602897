// ulysses plan --model DIR | --shape NAME --seq S [--sp P] [memory options] [--no-optimizer | --zero 1 | --offload-optimizer]
// ulysses plan --model DIR | --shape NAME --max-seq [--sp P] [options]
// The exact memory plan of one training step, per pool, without running it
// (and without a GPU or the ranks it describes), and whether it fits the target
// machine (--memory-limit, --host-mem-limit); or the longest sequence that fits.
#include <cstdio>
#include <sstream>
#include <iostream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/plan_time.h"
#include "io/model_folder.h"
#include "parallel/sequence_attention.h"
#include "train/memory_plan.h"

namespace ulysses {
namespace {

// The machine plan answers for, whatever machine it runs on: one H200 (139 GiB of device
// memory, as the docs' plans use) and 120 GiB of host memory for its rank. The planning
// machine's own memory only when asked (auto): a laptop's RAM says nothing about an H200 node.
constexpr double kTargetDeviceGiB = 139, kTargetHostGiB = 120;

std::string gib_text(double gib) {
  std::ostringstream os;
  os << gib << " GiB";
  return os.str();
}

struct Budgets {
  size_t device = 0, host = 0;
  std::string device_from, host_from;  // "default: H200 target", "--memory-limit", ...
  std::string text() const {
    return "budgets: device " + format_bytes(device) + " (" + device_from + "), host " + format_bytes(host) + " (" +
           host_from + ")";
  }
};

Budgets target_budgets(const Args& args, const PlanRequest& req) {
  auto budget = [&](const char* name, double target_gib, size_t here, std::string& from) -> size_t {
    if (!args.has(name)) {
      from = "default: H200 target";
      return static_cast<size_t>(target_gib * double(size_t(1) << 30));
    }
    if (args.get(name) == "auto") {
      from = "auto: this machine's";
      return here;
    }
    from = std::string("--") + name;
    return gib_option(args, name, 0);
  };
  Budgets b;
  b.host = budget("host-mem-limit", kTargetHostGiB, host_memory_available(), b.host_from);
  if (req.device == Device::CPU && !args.has("memory-limit")) {
    b.device = b.host;  // the CPU backend's device is the host
    b.device_from = "cpu backend: the host budget";
  } else {
    ULY_CHECK(args.get("memory-limit") != "auto" || req.runtime || req.device == Device::CPU,
              "--memory-limit auto asks the GPU here, and there is none; give the target's device memory in GiB (or "
              "leave it out for an H200's " << kTargetDeviceGiB << ")");
    const size_t here = req.runtime ? req.runtime->device_memory_available() : host_memory_available();
    b.device = budget("memory-limit", kTargetDeviceGiB, here, b.device_from);
  }
  return b;
}

std::string options_text(const StepOptions& o) {
  std::string s;
  if (o.offload_layers != 0)
    s += o.offload_layers < 0 ? "--offload-checkpoints " : "--offload-checkpoints=" + std::to_string(o.offload_layers) + " ";
  else if (o.checkpoint)
    s += "--checkpoint ";
  if (o.checkpoint && o.checkpoint_segment > 1) s += "--checkpoint-segment=" + std::to_string(o.checkpoint_segment) + " ";
  if (o.head_chunks > 1) s += "--head-chunks=" + std::to_string(o.head_chunks) + " ";
  if (o.keep_attention) s += "--keep-attention ";
  if (o.loss_tile_tokens > 0) s += "--tiled-loss ";
  if (o.mlp_tiles != 1) s += "--tiled-mlp ";
  if (o.grad_dtype == DType::BF16) s += "--grad-dtype=bf16 ";
  if (!s.empty()) s.pop_back();
  return s.empty() ? "(none)" : s;
}

// Which optimizer state the plan counts: said on every plan, since it is most of a full step's memory.
std::string optimizer_text(const PlanRequest& r) {
  if (!r.optimizer) return "none (--no-optimizer: forward + backward only)";
  std::string s = "AdamW state (fp32 master, m, v)";
  if (r.optimizer_shards > 1) {
    const int stage = r.weight_shards > 1 ? 3 : r.gradient_shards > 1 ? 2 : 1;
    s += ", ZeRO stage " + std::to_string(stage) + ": 1/" + std::to_string(r.optimizer_shards) + " of it" +
         (stage == 2 ? " and of the gradients" : stage == 3 ? ", of the gradients and of the weights" : "") +
         " per rank";
  }
  s += r.optimizer_offload ? ", in host memory (--offload-optimizer)"
                           : ", on the device (--offload-optimizer moves it to host memory, --no-optimizer leaves it out)";
  return s;
}

}  // namespace

// The longest sequence for the options given and for a ladder of the usual combinations,
// then the plan of the longest. The search plans without asking the GPU (a cuDNN graph per
// length would take minutes); the final plan asks it where there is one, stepping down while
// cuDNN's workspace makes it miss.

int64_t find_max_seq(PlanRequest req, size_t device_budget, size_t host_budget, const std::string& budgets,
                     StepOptions& chosen, bool print) {
  StepOptions tiled;
  tiled.grad_dtype = req.options.grad_dtype;
  tiled.loss_tile_tokens = 1024;
  tiled.mlp_tiles = 0;
  StepOptions ckpt = tiled, keep = tiled, offload = tiled;
  ckpt.checkpoint = keep.checkpoint = offload.checkpoint = true;
  keep.keep_attention = true;
  offload.offload_layers = -1;
  std::vector<StepOptions> ladder = {req.options, tiled, keep, ckpt, offload};
  // Two-level: a checkpoint per segment (on the device or the host), K - 1 layer inputs on the device.
  for (const StepOptions& base : {ckpt, offload})
    for (int64_t every : {2, 3, 4}) {
      StepOptions two_level = base;
      two_level.checkpoint_segment = every;
      ladder.push_back(two_level);
    }
  // Head-chunked attention on the offloaded two-level rungs: the most chunks (of 8, 4, 2) the heads allow.
  for (int64_t chunks : {8, 4, 2}) {
    try {
      check_head_chunks(req.config.num_attention_heads, req.config.num_key_value_heads, req.sp, chunks);
    } catch (const Error&) {
      continue;
    }
    for (int64_t every : {1, 4}) {
      StepOptions chunked = offload;
      chunked.checkpoint_segment = every;
      chunked.head_chunks = chunks;
      ladder.push_back(chunked);
    }
    break;
  }
  // bfloat16 gradient buffers on the checkpointed rungs (bf16 compute only): about half the gradients' memory.
  if (req.options.grad_dtype == DType::F32 && req.act_dtype == DType::BF16) {
    const size_t n = ladder.size();
    for (size_t i = 1; i < n; ++i)
      if (ladder[i].checkpoint) {
        StepOptions bf16 = ladder[i];
        bf16.grad_dtype = DType::BF16;
        ladder.push_back(bf16);
      }
  }
  std::ostringstream os;
  os << "longest sequence: " << req.config.num_hidden_layers << " layers, hidden " << req.config.hidden_size
     << ", sp " << req.sp << "\n" << budgets << "\noptimizer: " << optimizer_text(req) << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-72s %14s\n", "options", "max tokens");
  os << line;
  if (print) std::cout << os.str() << std::flush;
  os.str("");
  PlanRequest search = req;
  search.runtime = nullptr;
  int64_t best = 0;
  StepOptions best_options = req.options;
  for (size_t i = 0; i < ladder.size(); ++i) {
    if (i > 0 && options_text(ladder[i]) == options_text(req.options)) continue;
    search.options = ladder[i];
    const int64_t n = max_sequence(search, device_budget, host_budget);
    std::snprintf(line, sizeof line, "  %-72s %14lld%s\n",
                  (options_text(ladder[i]) + (i == 0 ? " (as given)" : "")).c_str(), static_cast<long long>(n),
                  n == 0 ? "  (not even 1024 tokens)" : "");
    if (print) std::cout << line << std::flush;
    if (n > best) best = n, best_options = ladder[i];
  }
  ULY_CHECK(best > 0, "plan --max-seq: no option fits 1024 tokens in "
                          << format_bytes(device_budget) << " of device memory"
                          << (req.optimizer && !req.optimizer_offload
                                  ? " beside AdamW's state on the device; add --offload-optimizer (the state in host "
                                    "memory), --zero 1 over more ranks, or --no-optimizer (forward + backward only)"
                                  : "; add ranks (--sp)"));
  req.options = best_options;
  for (;;) {  // the final plan with the GPU's own workspaces, where there is one
    req.seq_len = best;
    const MemorySnapshot m = plan_step_memory(req);
    if ((m.device.peak <= device_budget && m.host.peak <= host_budget) || best <= 1024) {
      if (print)
        std::cout << "max seq: " << best << " tokens with " << options_text(best_options) << "\n"
                << memory_report(m, local_tokens(req), req.config.hidden_size);
      break;
    }
    best -= 1024;
  }
  if (print && req.device == Device::CUDA && !req.runtime)
    std::cout << "note: no GPU here: the attention workspace is our own kernels' (cuDNN's is known only on the GPU)\n";
  chosen = best_options;
  return best;
}

int run_plan(int argc, char** argv) {
  std::vector<OptionSpec> specs = {
      {"model", true, false, "Hugging Face model folder (config.json is enough)"},
      {"shape", true, false, "a named shape instead: llama-3.1-8b, llama-3.2-1b/3b, qwen2.5-7b/1.5b, qwen3-8b, mistral-7b, tiny"},
      {"layers", true, false, "override the number of layers"},
      {"seq", true, false, "sequence length in tokens (global, before splitting over sp); the plan ends with "
                           "whether it fits the target (exit status 1 when it does not)"},
      {"max-seq", false, false, "find the longest sequence that fits the target's device (--memory-limit) and host "
                                "(--host-mem-limit) budgets, for the options given and a ladder of others"},
      {"memory-limit", true, false, "the target's device memory in GiB (default " + gib_text(kTargetDeviceGiB) +
                                        ", an H200; on --backend cpu the host budget); auto: the GPU here"},
      {"host-mem-limit", true, false, "the target's host memory for this rank in GiB (default " +
                                          gib_text(kTargetHostGiB) + "); auto: what this machine has available"},
      {"no-optimizer", false, false, "forward + backward only: leave out AdamW's state (fp32 master and two "
                                     "moments, 12 bytes a parameter), which the plan includes by default, as "
                                     "train and bench allocate it"},
      {"optimizer", false, false, "include AdamW's state (the default; kept for older command lines)"},
      {"help", false, false, "show this help"},
  };
  for (auto& s : engine_option_specs())
    if (s.name != "dry-run" && s.name != "memory-report" && s.name != "no-reserve" && s.name != "comm" &&
        s.name != "memory-limit")
      specs.push_back(s);
  for (auto& s : lora_option_specs()) specs.push_back(s);
  for (auto& s : plan_time_specs()) specs.push_back(s);
  Args args("plan", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("plan", specs);
    return 0;
  }
  const ModelConfig model = model_config_from(args, "plan");
  const int64_t seq_len = args.has("seq") ? args.get_int("seq", 0, limits::kSeqLen) : 0;
  ULY_CHECK(seq_len > 0 || args.has("max-seq"),
            "plan: give the sequence length with --seq TOKENS (or --max-seq to find the longest that fits)");
  ULY_CHECK(!(args.has("optimizer") && args.has("no-optimizer")), "plan: --optimizer and --no-optimizer contradict");
  EngineConfig engine = engine_config_from(args, !args.has("no-optimizer"));
  engine.lora = lora_config_from(args, "plan");
  const Device device = engine.backend == BackendKind::Cuda ? Device::CUDA : Device::CPU;
  const std::string backend = backend_kind_name(engine.backend);
  // Where the GPU is here, its backend answers for its own workspaces (cuDNN's); elsewhere they are estimated.
  std::unique_ptr<Backend> runtime;
  if (device == Device::CUDA && cuda_backend_compiled_in()) {
    try {
      runtime = make_cuda_backend(0, engine.act_dtype);
    } catch (const Error&) {
      runtime.reset();
    }
  }
  // The planned ranks are the sequence-parallel group: --zero 1 shards over them.
  PlanRequest req = make_plan_request(engine, model, seq_len, std::max(1, engine.sp), device, runtime.get());
  const TokenLayout layout(req.sp, req.ring, req.zigzag);  // a ring degree that does not divide --sp: the error
  if (layout.zigzag() && req.seq_len > 0) layout.check_length(req.seq_len, "--seq");
  const Budgets budgets = target_budgets(args, req);
  if (args.has("max-seq")) {
    StepOptions chosen;
    find_max_seq(req, budgets.device, budgets.host, budgets.text(), chosen, /*print=*/true);
    return 0;
  }
  // The planner's own token arrays live here, whatever the target.
  check_tokens_fit_host("plan: a sequence", req.seq_len, host_memory_available());
  ULY_CHECK(args.has("time") || (!args.has("link-gbps") && !args.has("compare-meshes") && !args.has("time-json") &&
                                 !args.has("ranks-share-gpu")),
            "plan: --link-gbps, --compare-meshes, --time-json and --ranks-share-gpu go with --time RATES.json");
  // keep-attention auto: on when the step with it fits, as bench and train decide (Engine::plan), so
  // that the step planned (and timed) is the one they run. (Until 2026-12-07 only --time resolved it:
  // the memory plan took auto as off and under-counted a checkpointed step that bench ran with it.)
  if (engine.keep_attention == KeepAttention::Auto && req.options.checkpoint) {
    if (keep_attention_fits(req, budgets.device, budgets.host)) req.options.keep_attention = true;
    std::cout << "--keep-attention auto: " << (req.options.keep_attention ? "on" : "off") << " [" << budgets.text()
              << "]\n";
  }
  if (args.has("time")) return run_plan_time(args, req);
  const MemorySnapshot m = plan_step_memory(req, /*itemize=*/true);
  std::cout << "memory plan: " << req.config.num_hidden_layers << " layers, hidden " << req.config.hidden_size
            << ", sequence " << req.seq_len << ", sp " << req.sp
            << (req.ring > 1 ? " (ring " + std::to_string(req.ring) + (req.zigzag ? ", zigzag)" : ")") : "")
            << ", backend " << backend << "\n"
            << "optimizer: " << optimizer_text(req) << "\n"
            << memory_report(m, local_tokens(req), req.config.hidden_size) << peak_items_report(m);
  if (req.device == Device::CUDA && !runtime)
    std::cout << "note: no GPU here: the attention workspace is our own kernels' (cuDNN's, chosen on the GPU, "
                 "is known only there); run plan on the GPU machine for the exact figure\n";
  // The verdict, last: the plan itself is printed above, so no advice to see it.
  const std::string misfit = plan_misfit(req, m, budgets.device, budgets.host);
  if (!misfit.empty()) {
    std::cout << "does not fit: " << misfit << " [" << budgets.text() << "]\n";
    return 1;
  }
  std::cout << "fits: device peak " << format_bytes(m.device.peak) << " of " << format_bytes(budgets.device) << " ("
            << budgets.device_from << "), host peak " << format_bytes(m.host.peak) << " of "
            << format_bytes(budgets.host) << " (" << budgets.host_from << ")\n";
  return 0;
}

}  // namespace ulysses
