// Options shared by every command that runs training steps (loss-grad, bench,
// train): the backend, the sequence-parallel degree and the memory techniques.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "model/llama.h"
#include "train/memory_plan.h"

namespace ulysses {

std::vector<OptionSpec> engine_option_specs();
StepOptions step_options_from(const Args& args);
// --backend: "cpu" (default) or "cuda".
std::string backend_name_from(const Args& args);
// --dtype: F32 on cpu; BF16 (default) or F32 on cuda.
DType act_dtype_from(const Args& args);
// The backend; on cuda each rank takes GPU (node-local rank) % (visible GPUs).
std::unique_ptr<Backend> backend_from(const Args& args, int world_rank);
int sp_degree_from(const Args& args);  // 0 = all ranks
int ring_degree_from(const Args& args);  // --sp-ring R (default 1)
bool zigzag_from(const Args& args);      // --zigzag
// --model DIR (its config.json) or --shape NAME, then --layers N if given.
ModelConfig model_config_from(const Args& args, const std::string& command);

// Whether --keep-attention is left to the plan (not given, or auto).
bool keep_attention_auto(const Args& args);

// The optimizer a command's step includes: none (loss-grad), or AdamW placed by
// --zero and --offload-optimizer (bench, plan; the train config has zero: and offload_optimizer:).
struct OptimizerChoice {
  bool included = false;
  int shards = 1;        // ranks sharing its state (--zero 1 or 2: all ranks)
  int zero = 0;          // ZeRO stage: 2 shards the gradients too (over the same ranks), 3 the weights too
  bool offload = false;  // --offload-optimizer: the state in host memory, the update on the CPU
};
std::vector<OptionSpec> optimizer_option_specs();
// included: whether the step has an optimizer at all (without one, --zero 2 and 3 still shard the
// gradients and weights); ranks: the ranks --zero shards over.
OptimizerChoice optimizer_choice_from(const Args& args, bool included, int ranks);
// Adds the choice to a plan request.
void plan_optimizer(PlanRequest& req, const OptimizerChoice& optimizer);

// Plans the step's memory (exact dry run) and refuses, with advice, a step that
// cannot fit the device (or --memory-limit); with --dry-run prints the plan.
// With checkpoints and --keep-attention auto, turns options.keep_attention on
// when the plan with it fits. Returns true when the command should stop after the dry run.
bool plan_and_check_memory(const Args& args, Backend& backend, const ModelConfig& config, int64_t seq_len, int sp,
                           StepOptions& options, const OptimizerChoice& optimizer = {}, int ring = 1,
                           bool zigzag = false);

// --NAME GiB (checked against limits::kGiB) in bytes, or `fallback` when not given.
size_t gib_option(const Args& args, const std::string& name, size_t fallback);

// plan --max-seq and bench --find-max-seq (cli/plan.cpp): the longest sequence whose plan fits
// `device_budget` and `host_budget` bytes (plan: the target machine's; bench: this machine's),
// over the request's options and a ladder of the usual ones; `chosen` gets the options that reach
// it. The final plan asks req.runtime, where there is one. print: the ladder table and the plan on
// stdout, under `budgets` (a line saying what they are and where they come from).
int64_t find_max_seq(PlanRequest req, size_t device_budget, size_t host_budget, const std::string& budgets,
                     StepOptions& chosen, bool print);

}  // namespace ulysses
