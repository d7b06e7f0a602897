// Ring attention and the hybrid mesh are exact: under mpirun -np P, every ring
// degree R that divides P (Ulysses sp / R inside each ring rank's group, sp = P / dp)
// reproduces the float64 Hugging Face loss and gradients of every fixture (packed
// documents and GQA included), zigzag on and off, at the tolerances of one rank.
// Pure ring (ulysses 1) has no head-count limit: at -np 8 the 4-head fixtures run
// on 8 ranks, which Ulysses alone refuses.
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "fixture_check.h"
#include "io/model_folder.h"
#include "mpi/mpi_test_main.h"
#include "parallel/mesh.h"

namespace ulysses::test {
namespace {

bool ulysses_fits(const ModelConfig& c, int u) {
  return c.num_attention_heads % u == 0 && (c.num_key_value_heads % u == 0 || u % c.num_key_value_heads == 0);
}

// Each (sp, ring) with ring > 1 that the world allows, zigzag off and on. With `all_sp` false only
// sp = world (dp 1), which keeps the larger worlds' run time modest.
void check_rings(const StepOptions& options, bool all_sp) {
  Communicator& w = world();
  ASSERT_GE(fixture_cases().size(), 5u);
  int checked = 0;
  for (const std::string& dir : fixture_cases()) {
    const ModelConfig c = ModelFolder::open(dir + "/model").config();
    for (int sp : ProcessMesh::valid_sp_values(w.size())) {
      if (!all_sp && sp != w.size()) continue;
      for (int ring : ProcessMesh::valid_sp_values(sp)) {
        if (ring == 1) continue;
        for (bool zigzag : {false, true}) {
          SCOPED_TRACE(dir + " sp=" + std::to_string(sp) + " ring=" + std::to_string(ring) +
                       (zigzag ? " zigzag" : "") + " world=" + std::to_string(w.size()));
          if (!ulysses_fits(c, sp / ring)) {
            EXPECT_THROW(run_fixture(dir, w, sp, options, ring, zigzag), Error);
            continue;
          }
          FixtureResult r = run_fixture(dir, w, sp, options, ring, zigzag);
          EXPECT_LE(r.loss_rel, 1e-5) << "loss " << r.loss << " vs " << r.ref_loss;
          EXPECT_LE(r.worst_grad_rel, 1e-4) << "worst gradient " << r.worst_grad;
          ++checked;
        }
      }
    }
  }
  if (w.size() > 1 && w.size() != 3) EXPECT_GT(checked, 0);
}

TEST(RingFixtures, EveryRingMatchesReference) { check_rings(StepOptions{}, /*all_sp=*/world().size() <= 4); }

TEST(RingFixtures, RingWithMemoryTechniquesMatchesReference) {
  StepOptions o;
  o.mlp_tiles = 3;
  o.loss_tile_tokens = 5;
  o.checkpoint = true;
  o.keep_attention = true;
  check_rings(o, /*all_sp=*/false);
}

TEST(RingFixtures, DegreesThatDoNotDivideFailOnEveryRank) {
  Communicator& w = world();
  const std::string dir = fixture_cases().front();
  // A ring degree that does not divide sp.
  EXPECT_THROW(run_fixture(dir, w, w.size(), StepOptions{}, w.size() + 1, false), Error);
}

}  // namespace
}  // namespace ulysses::test

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
