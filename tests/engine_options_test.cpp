// The engine's option table against both of its parsers: every option is a YAML key of
// `train` and a flag of bench/loss-grad/plan, with the same default and the same effect.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/engine_options.h"
#include "expect_error.h"
#include "train/engine_option_table.h"
#include "train/train_config.h"

namespace ulysses {
namespace {

// What `--flag value` / `key=value` need beside them to be valid and to make a difference.
std::vector<std::pair<std::string, std::string>> context_for(const EngineOption& o) {
  if (o.key == "zigzag") return {{"sp_ring", "2"}};
  if (o.key == "dtype") return {{"backend", "cuda"}};
  if (o.key == "memory.keep_attention") return {{"memory.checkpoint", "true"}};
  return {};
}

const EngineOption& option_of(const std::string& key) {
  for (const EngineOption& o : engine_options())
    if (o.key == key) return o;
  throw std::runtime_error("no option " + key);
}

EngineConfig from_yaml(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::vector<std::string> overrides = {"data.train=x", "model_config=tiny"};
  for (const auto& [k, v] : settings) overrides.push_back(k + "=" + v);
  EngineConfig e = load_train_config("", overrides).engine;
  e.spelling = OptionSpelling::Flags;  // how messages name options: the one intended difference
  return e;
}

EngineConfig from_flags(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::vector<std::string> words = {"ulysses", "bench"};
  for (const auto& [k, v] : settings) {
    const EngineOption& o = option_of(k);
    const bool is_switch = o.bare_value == "true" || o.bare_value == "false";
    if (is_switch) {
      if (v == o.bare_value) words.push_back("--" + o.flag);
    } else {
      words.push_back("--" + o.flag + "=" + v);
    }
  }
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  Args args("bench", engine_option_specs(), static_cast<int>(argv.size()), argv.data(), 2);
  return engine_config_from(args, /*optimizer=*/true);
}

TEST(EngineOptions, DefaultsAreTheSameForKeysAndFlags) {
  EXPECT_TRUE(from_yaml({}) == from_flags({}));
  EXPECT_EQ(from_yaml({}).keep_attention, KeepAttention::Auto);
}

TEST(EngineOptions, EveryOptionIsAKeyAndAFlagWithTheSameEffect) {
  const std::string defaults = train_config_defaults_yaml();
  ASSERT_GE(engine_options().size(), 15u);
  for (const EngineOption& o : engine_options()) {
    SCOPED_TRACE(o.key + " / --" + o.flag);
    const std::string leaf = o.key.substr(o.key.rfind('.') == std::string::npos ? 0 : o.key.rfind('.') + 1);
    EXPECT_NE(defaults.find(leaf + ": " + o.default_value), std::string::npos) << "not in the YAML defaults";
    auto settings = context_for(o);
    const EngineConfig context_only = from_flags(settings);
    settings.emplace_back(o.key, o.example);
    const EngineConfig yaml = from_yaml(settings), flags = from_flags(settings);
    EXPECT_TRUE(yaml == flags) << "the key and the flag set different configs";
    EXPECT_FALSE(flags == context_only) << "the example value " << o.example << " changes nothing";
  }
}

TEST(EngineOptions, TheSameRefusalsNameTheKeyOrTheFlag) {
  EXPECT_ERROR(from_yaml({{"memory.keep_attention", "on"}}), "'memory.keep_attention' keeps attention outputs");
  EXPECT_ERROR(from_flags({{"memory.keep_attention", "on"}}), "--keep-attention keeps attention outputs");
  EXPECT_ERROR(from_yaml({{"memory.tiled_mlp", "-2"}}), "'memory.tiled_mlp'");
  EXPECT_ERROR(from_flags({{"memory.tiled_mlp", "-2"}}), "--tiled-mlp");
  EXPECT_ERROR(from_yaml({{"zigzag", "true"}}), "'zigzag' balances causal work over a ring of ranks; set 'sp_ring'");
  EXPECT_ERROR(from_flags({{"zigzag", "true"}}), "--zigzag balances causal work over a ring of ranks; set --sp-ring");
  EXPECT_ERROR(from_yaml({{"dtype", "bf16"}}), "'dtype' bf16: the cpu backend computes in fp32 only");
  EXPECT_ERROR(from_flags({{"dtype", "bf16"}}), "--dtype bf16: the cpu backend computes in fp32 only");
}

TEST(EngineOptions, TheRenamedSegmentOptionIsAnsweredWithItsNewName) {
  EXPECT_ERROR(from_yaml({{"memory.checkpoint_every", "2"}}), "renamed 'memory.checkpoint_segment'");
  std::vector<std::string> words = {"ulysses", "bench", "--checkpoint-every", "2"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_ERROR(Args("bench", engine_option_specs(), 4, argv.data(), 2), "renamed --checkpoint-segment");
  // The other checkpoint_every (steps between saves) is untouched.
  std::vector<std::string> overrides = {"data.train=x", "model_config=tiny", "checkpoint_every=5"};
  EXPECT_EQ(load_train_config("", overrides).checkpoint_every, 5);
}

}  // namespace
}  // namespace ulysses
