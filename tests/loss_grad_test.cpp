// The CPU engine against the float64 Hugging Face reference on every committed
// fixture (foundation issue: loss rel ≤ 1e-5, every gradient rel ≤ 1e-4).
#include <gtest/gtest.h>

#include "fixture_check.h"

namespace ulysses::test {
namespace {

TEST(LossGrad, FixturesExist) { EXPECT_GE(fixture_cases().size(), 5u) << "fixtures/ lost its cases"; }

TEST(LossGrad, MatchesHuggingFaceFloat64) {
  auto world = make_self_communicator();
  for (const std::string& dir : fixture_cases()) {
    SCOPED_TRACE(dir);
    FixtureResult r = run_fixture(dir, *world, 1, StepOptions{});
    EXPECT_LE(r.loss_rel, 1e-5) << "loss " << r.loss << " vs reference " << r.ref_loss;
    EXPECT_LE(r.worst_grad_rel, 1e-4) << "worst gradient " << r.worst_grad;
    EXPECT_GT(r.compared, 0);
  }
}

}  // namespace
}  // namespace ulysses::test
