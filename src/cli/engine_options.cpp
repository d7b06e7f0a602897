#include "cli/engine_options.h"

#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "comm/launch_env.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/memory_pools.h"
#include "core/split.h"
#include "io/peft_adapter.h"
#include "train/engine_option_table.h"
#include "train/memory_plan.h"

namespace ulysses {

namespace {

bool is_switch(const EngineOption& o) { return o.bare_value == "true" || o.bare_value == "false"; }

}  // namespace

std::vector<OptionSpec> engine_option_specs() {
  std::vector<OptionSpec> specs;
  for (const EngineOption& o : engine_options()) {
    std::string help = o.help;
    if (!is_switch(o)) help += " (default " + o.default_value + ")";
    help += "; YAML: " + o.key;
    specs.push_back({o.flag, !is_switch(o), !is_switch(o) && !o.bare_value.empty(), help});
  }
  specs.push_back({"dry-run", false, false, "print the memory plan per pool and stop before allocating anything"});
  specs.push_back({"memory-report", false, false, "print the measured peak per pool after the step"});
  return specs;
}

EngineConfig engine_config_from(const Args& args, bool optimizer) {
  return engine_config_of(
      [&](const EngineOption& o) -> std::optional<std::string> {
        if (!args.has(o.flag)) return std::nullopt;
        // plan's own --memory-limit may say auto (the GPU here): plan reads its budgets itself.
        if (o.flag == "memory-limit" && args.get(o.flag, "") == "auto") return std::nullopt;
        const std::string v = is_switch(o) ? std::string() : args.get(o.flag, "");
        return v.empty() ? o.bare_value : v;
      },
      OptionSpelling::Flags, optimizer);
}

std::vector<OptionSpec> lora_option_specs() {
  return {{"lora-r", true, false, "LoRA: the adapters' rank, the base frozen (default: no LoRA)"},
          {"lora-alpha", true, false, "LoRA: the scaling's numerator, alpha / r (default 2 x r)"},
          {"lora-targets", true, false,
           "LoRA: the projections, comma-separated PEFT names (q_proj,...,down_proj) or all-linear (the default)"}};
}

LoraConfig lora_config_from(const Args& args, const std::string& command) {
  LoraConfig c;
  if (!args.has("lora-r")) {
    ULY_CHECK(!args.has("lora-alpha") && !args.has("lora-targets"),
              command << ": --lora-alpha and --lora-targets need --lora-r (the adapters' rank)");
    return c;
  }
  c.r = args.get_int("lora-r", 0, IntRange{1, 65536, "the adapters' rank"});
  c.alpha = args.get_double("lora-alpha", 2.0 * static_cast<double>(c.r), RealRange{0, 1e9, true, false, "positive"});
  const std::string list = args.get("lora-targets", "all-linear");
  const nlohmann::json names = list == "all-linear" ? nlohmann::json(list) : nlohmann::json(split_commas(list));
  c.targets = parse_lora_targets(names, command, "--lora-targets");
  check_lora_config(c, command + ": --lora-r");
  return c;
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
