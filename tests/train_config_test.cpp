// The train config: the key an unknown one is answered with.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "expect_error.h"
#include "test_util.h"
#include "train/train_config.h"

namespace ulysses {
namespace {

TrainConfig load(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"data.train=x", "model_config=tiny"});
  return load_train_config("", overrides);
}

std::string suggestion_for(const std::string& override_text) {
  const std::string m = test::expect_error([&] { load({override_text}); });
  const size_t at = m.find("did you mean '");
  if (at == std::string::npos) return "(none in: " + m + ")";
  const size_t from = at + 14;
  return m.substr(from, m.find('\'', from) - from);
}

TEST(TrainConfigKeys, AnUnknownKeySuggestsAPlausibleOne) {
  EXPECT_EQ(suggestion_for("lr=1e-4"), "optimizer.lr");             // a leaf without its section
  EXPECT_EQ(suggestion_for("--lr=1e-4"), "optimizer.lr");           // as a flag
  EXPECT_EQ(suggestion_for("learning_rat=1e-4"), "optimizer.lr");   // a long form, mistyped
  EXPECT_EQ(suggestion_for("learning_rate=1e-4"), "optimizer.lr");
  EXPECT_EQ(suggestion_for("optimizer.learning_rate=1"), "optimizer.lr");
  EXPECT_EQ(suggestion_for("seq_len=64"), "data.seq_len");
  EXPECT_EQ(suggestion_for("--seq-len=64"), "data.seq_len");        // a flag's spelling
  EXPECT_EQ(suggestion_for("min_lr=0"), "optimizer.min_lr");
  EXPECT_EQ(suggestion_for("warmup=5"), "optimizer.warmup_steps");
  EXPECT_EQ(suggestion_for("checkpoint=true"), "memory.checkpoint");
  EXPECT_EQ(suggestion_for("stepz=3"), "steps");                    // plain typos as before
  EXPECT_EQ(suggestion_for("sp-ring=2"), "sp_ring");
  EXPECT_EQ(suggestion_for("optimizer.min_l=0"), "optimizer.min_lr");
  EXPECT_ERROR(load({"--lr", "1e-4"}), "command line: unknown key 'lr' (did you mean 'optimizer.lr'?)");
}

}  // namespace
}  // namespace ulysses
