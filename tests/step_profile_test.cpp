// The step profile: nested families get exclusive time so that the table tiles
// the step, an absorbing family keeps its nested ones' time, "other" is what no
// family covered; and the CPU backend feeds it through ProfileScope.
#include "core/step_profile.h"

#include <gtest/gtest.h>

#include <initializer_list>

#include "backend/profile_scope.h"
#include "expect_error.h"

namespace ulysses::test {
namespace {

const StepProfile::Row& row(const std::vector<StepProfile::Row>& rows, const std::string& family) {
  for (const StepProfile::Row& r : rows)
    if (r.family == family) return r;
  static const StepProfile::Row missing{"(missing)", -1, -1, -1};
  ADD_FAILURE() << "no row '" << family << "'";
  return missing;
}

// A family's name opens it at t; nullptr closes the innermost.
struct Mark {
  const char* family;
  double t;
  bool absorbs = false;
};
void feed(StepProfile& p, std::initializer_list<Mark> marks) {
  for (const Mark& m : marks) {
    if (m.family != nullptr)
      p.open(m.family, m.absorbs, m.t);
    else
      p.close(m.t);
  }
}

TEST(StepProfile, NestedFamiliesGetExclusiveTime) {
  StepProfile p;
  feed(p, {{"attention", 1.0},
           {"all-to-all", 2.0},  // attention 1 s so far
           {nullptr, 5.0},       // all-to-all 3 s
           {nullptr, 6.0},       // attention 1 more s
           {"mlp", 8.0},         // 6..8 is no family's: other
           {nullptr, 10.0}});
  p.add_step(10.0);
  const auto rows = p.rows();
  EXPECT_DOUBLE_EQ(row(rows, "attention").seconds, 2.0);
  EXPECT_DOUBLE_EQ(row(rows, "all-to-all").seconds, 3.0);
  EXPECT_DOUBLE_EQ(row(rows, "mlp").seconds, 2.0);
  EXPECT_DOUBLE_EQ(row(rows, "other").seconds, 3.0);  // 0..1 and 6..8
  EXPECT_EQ(rows.front().family, "all-to-all");      // by time
  EXPECT_EQ(rows.back().family, "other");            // always last
  EXPECT_DOUBLE_EQ(row(rows, "attention").share, 0.2);
  EXPECT_DOUBLE_EQ(p.accounted(), 0.7);
  double shares = 0;
  for (const auto& r : rows) shares += r.share;
  EXPECT_DOUBLE_EQ(shares, 1.0);
}

TEST(StepProfile, AbsorbingFamilyKeepsNestedTimeAndReentryIsOneCall) {
  StepProfile p;
  // recompute 0..5 with attention and all-to-all inside it, then attention 5..7
  // (outside: its own family again), which calls a helper of its own family at 5.5.
  feed(p, {{"recompute", 0.0, true}, {"attention", 1.0}, {"all-to-all", 2.0}, {nullptr, 3.0}, {nullptr, 4.0},
           {nullptr, 5.0}, {"attention", 5.0}, {"attention", 5.5}, {nullptr, 6.0}, {nullptr, 7.0}});
  p.add_step(7.0);
  const auto rows = p.rows();
  EXPECT_DOUBLE_EQ(row(rows, "recompute").seconds, 5.0);
  EXPECT_DOUBLE_EQ(row(rows, "recompute").calls, 1.0);
  EXPECT_DOUBLE_EQ(row(rows, "attention").seconds, 2.0);
  EXPECT_DOUBLE_EQ(row(rows, "attention").calls, 1.0);
  for (const auto& r : rows) EXPECT_NE(r.family, "all-to-all") << "absorbed by recompute";
  EXPECT_DOUBLE_EQ(p.accounted(), 1.0);
}

TEST(StepProfile, PerStepMeansResetAndJson) {
  StepProfile p;
  for (int s = 0; s < 2; ++s) {
    const double t0 = 100.0 * s;
    feed(p, {{"optimizer", t0}, {nullptr, t0 + 3.0}});
    p.add_step(4.0);
  }
  EXPECT_EQ(p.steps(), 2);
  const nlohmann::json j = p.json();
  EXPECT_DOUBLE_EQ(j.at("optimizer").at("seconds").get<double>(), 3.0);  // per step
  EXPECT_DOUBLE_EQ(j.at("optimizer").at("calls").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("optimizer").at("share").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j.at("other").at("seconds").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("accounted").get<double>(), 0.75);
  EXPECT_NE(p.table().find("optimizer"), std::string::npos);
  EXPECT_NE(p.table().find("75.00%"), std::string::npos);

  p.reset();
  EXPECT_EQ(p.steps(), 0);
  EXPECT_TRUE(p.rows().empty());
  EXPECT_DOUBLE_EQ(p.json().at("accounted").get<double>(), 0.0);
}

TEST(StepProfile, MisuseIsAnError) {
  StepProfile p;
  EXPECT_ERROR(p.close(1.0), "closed that was never opened");
  EXPECT_ERROR(p.open("other", false, 0.0), "'other' is a row of the table");
  p.open("mlp", false, 0.0);
  EXPECT_ERROR(p.add_step(1.0), "still open");
}

TEST(StepProfile, CpuBackendTimesScopesOnlyWhileEnabled) {
  auto backend = make_cpu_backend();
  StepProfile p;
  { ProfileScope off(*backend, "mlp"); }  // not enabled: nothing recorded
  backend->enable_profiling(&p);
  {
    ProfileScope s(*backend, "rmsnorm");
    s.next("mlp");
    Tensor t = backend->empty({1 << 16}, DType::F32);
    backend->zero(t);
  }
  backend->profile_flush();
  p.add_step(1.0);
  backend->enable_profiling(nullptr);
  { ProfileScope off(*backend, "mlp"); }
  const auto rows = p.rows();
  ASSERT_EQ(rows.size(), 3u);  // rmsnorm, mlp, other
  EXPECT_DOUBLE_EQ(row(rows, "mlp").calls, 1.0);
  EXPECT_DOUBLE_EQ(row(rows, "rmsnorm").calls, 1.0);
  EXPECT_GT(row(rows, "mlp").seconds, 0.0);
}

}  // namespace
}  // namespace ulysses::test
