// The train config's learning-rate floor (a tenth of the peak unless set, never above
// it) and the key an unknown one is answered with.
#include <gtest/gtest.h>

#include <fstream>
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

TEST(TrainConfigMinLr, DefaultsToATenthOfThePeak) {
  // The default peak gives exactly the floor that was the fixed default before (3.0e-5).
  const TrainConfig d = load({});
  EXPECT_EQ(d.lr, 3e-4);
  EXPECT_EQ(d.min_lr, 3e-5);
  EXPECT_EQ(d.as_json["optimizer"]["min_lr"].get<double>(), 3e-5);  // recorded in the run's config.json
  // Fine-tuning's peak: the floor follows it down instead of sitting 3x above it.
  EXPECT_EQ(load({"optimizer.lr=1.0e-5"}).min_lr, 1e-6);
  EXPECT_EQ(load({"optimizer.lr=2.5e-3"}).min_lr, 2.5e-4);
  EXPECT_EQ(load({"optimizer.lr=0"}).min_lr, 0.0);
  EXPECT_EQ(load({"optimizer.lr=1"}).min_lr, 0.1);
}

TEST(TrainConfigMinLr, ASetFloorIsKeptAndMayEqualThePeak) {
  EXPECT_EQ(load({"optimizer.lr=1e-4", "optimizer.min_lr=0"}).min_lr, 0.0);
  EXPECT_EQ(load({"optimizer.lr=1e-4", "optimizer.min_lr=1e-4"}).min_lr, 1e-4);  // a constant schedule
  EXPECT_EQ(load({"optimizer.min_lr=1e-5"}).min_lr, 1e-5);
  // From a file too, as configs/demo.yaml sets it; null there is the default.
  const std::string dir = test::temp_dir("train_config_min_lr");
  std::ofstream(dir + "/set.yaml") << "optimizer:\n  lr: 3.0e-3\n  min_lr: 3.0e-4\n";
  EXPECT_EQ(load_train_config(dir + "/set.yaml", {"data.train=x", "model_config=tiny"}).min_lr, 3e-4);
  std::ofstream(dir + "/null.yaml") << "optimizer:\n  lr: 3.0e-3\n  min_lr: null\n";
  EXPECT_EQ(load_train_config(dir + "/null.yaml", {"data.train=x", "model_config=tiny"}).min_lr, 3e-4);
}

TEST(TrainConfigMinLr, AFloorAboveThePeakIsRefusedNamingBoth) {
  // docs/fine-tuning.md's peak with the old fixed default floor.
  EXPECT_ERROR(load({"optimizer.lr=1.0e-5", "optimizer.min_lr=3.0e-5"}),
               "optimizer.min_lr 3e-05 is above optimizer.lr 1e-05", "leave it out for 0.1 x lr");
  EXPECT_ERROR(load({"optimizer.min_lr=true"}), "key 'optimizer.min_lr' expects a number, got true");
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
