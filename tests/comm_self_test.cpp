// The self communicator (a group of one), launcher detection, and the world
// factory and the mesh as a plain single process sees them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "core/error.h"
#include "parallel/mesh.h"

namespace ulysses {
namespace {

std::vector<float> iota_f(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(SelfComm, Identity) {
  auto c = make_self_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->name(), "self");
}

TEST(SelfComm, CollectivesCopy) {
  auto c = make_self_communicator();
  const auto src = iota_f(37, 1.0f);
  for (int which = 0; which < 4; ++which) {
    std::vector<float> dst(37, -1.0f);
    switch (which) {
      case 0: c->all_to_all(src.data(), dst.data(), 37, DType::F32); break;
      case 1: c->all_gather(src.data(), dst.data(), 37, DType::F32); break;
      case 2: c->reduce_scatter(src.data(), dst.data(), 37, DType::F32, ReduceOp::Sum); break;
      case 3: c->all_reduce(src.data(), dst.data(), 37, DType::F32, ReduceOp::Max); break;
    }
    EXPECT_EQ(dst, src) << "collective " << which;
  }
  // In place: the buffer is left as it was.
  auto buf = src;
  c->all_to_all(buf.data(), buf.data(), 37, DType::F32);
  c->all_reduce(buf.data(), buf.data(), 37, DType::F32, ReduceOp::Sum);
  c->reduce_scatter(buf.data(), buf.data(), 37, DType::F32, ReduceOp::Max);
  c->broadcast(buf.data(), 37, DType::F32, 0);
  c->barrier();
  EXPECT_EQ(buf, src);
  // 16-bit floats are bytes to a copy, reductions included (one rank has nothing to add).
  std::vector<uint16_t> h = {0x3f80, 0x4000, 0xc040}, hout(3, 0);
  c->all_reduce(h.data(), hout.data(), 3, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(hout, h);
}

TEST(SelfComm, AllToAllVHonoursDisplacements) {
  auto c = make_self_communicator();
  const auto src = iota_f(10, 0.0f);
  std::vector<float> dst(10, -1.0f);
  const size_t sc[1] = {4}, sd[1] = {3}, rc[1] = {4}, rd[1] = {5};
  c->all_to_all_v(src.data(), sc, sd, dst.data(), rc, rd, DType::F32);
  EXPECT_EQ(dst, (std::vector<float>{-1, -1, -1, -1, -1, 3, 4, 5, 6, -1}));
  const size_t bad[1] = {3};
  EXPECT_THROW(c->all_to_all_v(src.data(), sc, sd, dst.data(), bad, rd, DType::F32), Error);
}

TEST(SelfComm, InvalidCallsThrowClearly) {
  auto c = make_self_communicator();
  float x = 1.0f;
  try {
    c->send(&x, 1, DType::F32, 0, 0);
    ADD_FAILURE() << "send on the self communicator did not throw";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("self communicator"), std::string::npos) << e.message();
  }
  EXPECT_THROW(c->recv(&x, 1, DType::F32, 0, 0), Error);
  EXPECT_THROW(c->broadcast(&x, 1, DType::F32, 1), Error);
  EXPECT_THROW(c->split(-1, 0), Error);
}

TEST(SelfComm, SplitGivesAnotherSelf) {
  auto c = make_self_communicator();
  auto s = c->split(5, 3);
  EXPECT_EQ(s->size(), 1);
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(s->name(), "self");
}

TEST(SelfCommDeathTest, AbortEndsTheProcessWithTheCode) {
  auto c = make_self_communicator();
  EXPECT_EXIT(c->abort(3), ::testing::ExitedWithCode(3), "");
}

// Sets launcher variables for one test and restores the previous environment afterwards.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* k : kVars) {
      const char* v = std::getenv(k);
      if (v) saved_[k] = v;
      unsetenv(k);
    }
  }
  ~EnvGuard() {
    for (const char* k : kVars) {
      unsetenv(k);
      if (saved_.count(k)) setenv(k, saved_[k].c_str(), 1);
    }
  }
  void set(const char* k, const char* v) { setenv(k, v, 1); }

 private:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",       "PMIX_SIZE",
                                          "PMIX_RANK",            "SLURM_PROCID",   "SLURM_NTASKS",
                                          "SLURM_STEP_NUM_TASKS", "ULYSSES_FORCE_MPI"};
  std::map<std::string, std::string> saved_;
};

TEST(LaunchEnv, PlainProcess) {
  EnvGuard env;
  const LaunchEnv e = detect_launch_env();
  EXPECT_FALSE(e.launched);
  EXPECT_FALSE(e.forced);
}

TEST(LaunchEnv, Launchers) {
  {
    EnvGuard env;
    env.set("OMPI_COMM_WORLD_SIZE", "4");
    const LaunchEnv e = detect_launch_env();
    EXPECT_TRUE(e.launched);
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.source, "OMPI_COMM_WORLD_SIZE=4");
  }
  {
    EnvGuard env;
    env.set("PMI_SIZE", "2");
    EXPECT_EQ(detect_launch_env().world_size, 2);
  }
  {
    EnvGuard env;
    env.set("PMIX_RANK", "0");
    EXPECT_TRUE(detect_launch_env().launched);
  }
  {
    // An sbatch script has these but is a single process, not an srun step.
    EnvGuard env;
    env.set("SLURM_PROCID", "0");
    env.set("SLURM_NTASKS", "8");
    EXPECT_FALSE(detect_launch_env().launched);
    env.set("SLURM_STEP_NUM_TASKS", "8");
    const LaunchEnv e = detect_launch_env();
    EXPECT_TRUE(e.launched);
    EXPECT_EQ(e.world_size, 8);
  }
  {
    EnvGuard env;
    env.set("ULYSSES_FORCE_MPI", "1");
    const LaunchEnv e = detect_launch_env();
    EXPECT_TRUE(e.forced);
    EXPECT_FALSE(e.launched);
    env.set("ULYSSES_FORCE_MPI", "0");
    EXPECT_FALSE(detect_launch_env().forced);
  }
  {
    EnvGuard env;
    env.set("OMPI_COMM_WORLD_SIZE", "lots");  // not a number: ignored rather than misread
    EXPECT_FALSE(detect_launch_env().launched);
  }
}

TEST(World, PlainProcessGetsSelf) {
  EnvGuard env;
  auto w = make_world_communicator(nullptr, nullptr);
  EXPECT_EQ(w->name(), "self");
  EXPECT_EQ(w->size(), 1);
  EXPECT_EQ(process_rank(), 0);
  EXPECT_EQ(process_world_size(), 1);
  finalize_world_communicator();  // nothing to finalise: must be harmless
}

TEST(Mesh, SingleProcess) {
  auto w = make_self_communicator();
  for (int sp : {0, 1, -3}) {
    ProcessMesh m(*w, sp);
    EXPECT_EQ(m.sp_size(), 1);
    EXPECT_EQ(m.dp_size(), 1);
    EXPECT_EQ(m.sp_rank(), 0);
    EXPECT_EQ(m.dp_rank(), 0);
    EXPECT_EQ(m.sp().size(), 1);
    EXPECT_EQ(m.dp().size(), 1);
    EXPECT_EQ(&m.ulysses(), &m.sp());
    EXPECT_EQ(m.ring().size(), 1);
    EXPECT_EQ(m.describe(), "1 rank = dp 1 × sp 1 (ulysses 1 × ring 1)");
  }
  try {
    ProcessMesh m(*w, 2);
    ADD_FAILURE() << "sp 2 on one rank did not throw";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--sp 2 does not divide the 1 ranks"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("valid --sp for 1 ranks: 1"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ulysses
