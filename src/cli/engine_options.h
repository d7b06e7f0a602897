// Options shared by every command that runs training steps (loss-grad, bench,
// train): the backend, the sequence-parallel degree and the memory techniques.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "model/llama.h"
#include "train/engine.h"
#include "train/memory_plan.h"

namespace ulysses {

std::vector<OptionSpec> engine_option_specs();
// The engine the flags ask for. optimizer: whether the step includes AdamW (without one, --zero 2
// and 3 still shard the gradients and weights; --zero 1 and --offload-optimizer are refused).
EngineConfig engine_config_from(const Args& args, bool optimizer);
// bench's and plan's LoRA flags (--lora-r, --lora-alpha, --lora-targets), and the LoraConfig they
// give (r 0: off; alpha 2 r and every projection by default), checked as train's lora block is.
std::vector<OptionSpec> lora_option_specs();
LoraConfig lora_config_from(const Args& args, const std::string& command);
// --model DIR (its config.json) or --shape NAME, then --layers N if given.
ModelConfig model_config_from(const Args& args, const std::string& command);

// --dry-run: prints the plan and returns true (the command then stops before allocating).
bool print_dry_run(const Args& args, Engine& engine, const Engine::Plan& plan, int64_t seq_len);

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
