// The engine's options, each declared once: its YAML key (train configs) and its flag (bench,
// loss-grad, plan, comm-bench), one default, one set of values and one help text. The YAML
// reader (train/train_config.cpp) and the flags (cli/engine_options.cpp) both fill an
// EngineConfig from this table, so a key and its flag cannot drift apart.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "train/engine.h"

namespace ulysses {

struct EngineOption {
  std::string key;            // YAML, dotted ("memory.tiled_mlp")
  std::string flag;           // without the dashes ("tiled-mlp")
  std::string default_value;  // as YAML writes it ("1", "auto", "false")
  std::string bare_value;     // what the flag alone means ("true" for a switch); empty: the flag takes a value
  std::string example;        // another valid value (tests: the key and the flag set alike)
  std::string help;
  // Sets the option from its text; `where` names it in errors ("--tiled-mlp", "cfg.yaml: 'memory.tiled_mlp'").
  std::function<void(EngineConfig&, const std::string& value, const std::string& where)> apply;
};

const std::vector<EngineOption>& engine_options();

// The EngineConfig of the values `given` returns (nullopt: the option's default), checked option by
// option and then together (implied checkpoints, keep_attention needing them, zigzag needing a
// ring, bf16 only on cuda, the optimizer's placement needing an optimizer). spelling: how the
// errors name the options (flags or keys).
EngineConfig engine_config_of(const std::function<std::optional<std::string>(const EngineOption&)>& given,
                              OptionSpelling spelling, bool optimizer);

// The engine's keys and defaults as YAML, documented (the end of `train --print-defaults`).
std::string engine_options_yaml();

}  // namespace ulysses
