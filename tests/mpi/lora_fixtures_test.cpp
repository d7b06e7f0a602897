// LoRA is exact on every mesh: under mpirun -np P, every sequence-parallel degree the world
// allows (Ulysses, and the hybrid with ring attention, zigzag on and off), with dp over the rest,
// reproduces the float64 transformers + PEFT loss and adapter gradients of every LoRA fixture
// (fixtures/lora: rank 8, alpha 16, all seven projections, tied and untied, packed documents) at
// the tolerances of the base fixtures; so do the memory techniques (head chunks, tiled MLP and
// loss, checkpoints, two-level segments). Each result's figures are printed on rank 0.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/communicator.h"
#include "fixture_check.h"
#include "io/model_folder.h"
#include "mpi/mpi_test_main.h"
#include "parallel/mesh.h"
#include "parallel/sequence_attention.h"

namespace ulysses::test {
namespace {

bool ulysses_fits(const ModelConfig& c, int u) {
  return c.num_attention_heads % u == 0 && (c.num_key_value_heads % u == 0 || u % c.num_key_value_heads == 0);
}

bool chunks_fit(const ModelConfig& c, int u, int64_t chunks) {
  try {
    check_head_chunks(c.num_attention_heads, c.num_key_value_heads, u, chunks);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Every (sp, ring) of the world (ring 1 = Ulysses alone), zigzag on and off where there is a ring.
void check_meshes(const char* what, StepOptions options) {
  Communicator& w = world();
  ASSERT_EQ(lora_fixture_cases().size(), 2u);
  const int64_t chunks = options.head_chunks;
  int checked = 0;
  for (const std::string& dir : lora_fixture_cases()) {
    const ModelConfig c = ModelFolder::open(dir + "/model").config();
    for (int sp : ProcessMesh::valid_sp_values(w.size()))
      for (int ring : ProcessMesh::valid_sp_values(sp))
        for (bool zigzag : {false, true}) {
          if (zigzag && ring == 1) continue;
          const std::string where = dir.substr(dir.rfind('/') + 1) + " sp=" + std::to_string(sp) + " ring=" +
                                    std::to_string(ring) + (zigzag ? " zigzag" : "") +
                                    " world=" + std::to_string(w.size());
          SCOPED_TRACE(where);
          if (!ulysses_fits(c, sp / ring)) {
            EXPECT_THROW(run_lora_fixture(dir, w, sp, options, ring, zigzag), Error);
            continue;
          }
          options.head_chunks = chunks_fit(c, sp / ring, chunks) ? chunks : 1;
          const FixtureResult r = run_lora_fixture(dir, w, sp, options, ring, zigzag);
          EXPECT_LE(r.loss_rel, 1e-5) << "loss " << r.loss << " vs " << r.ref_loss;
          EXPECT_LE(r.worst_grad_rel, 1e-4) << "worst gradient " << r.worst_grad;
          EXPECT_EQ(r.compared, 2 * 7 * c.num_hidden_layers);
          if (w.rank() == 0)
            std::printf("lora %-10s %-40s head_chunks %lld: loss rel %.2e, worst adapter grad rel %.2e (%s)\n", what,
                        where.c_str(), static_cast<long long>(options.head_chunks), r.loss_rel, r.worst_grad_rel,
                        r.worst_grad.c_str());
          ++checked;
        }
  }
  EXPECT_GT(checked, 0);
}

TEST(LoraFixtures, EveryMeshMatchesPeftReference) { check_meshes("plain", StepOptions{}); }

TEST(LoraFixtures, MemoryTechniquesMatchPeftReference) {
  StepOptions o;
  o.mlp_tiles = 3;
  o.loss_tile_tokens = 5;
  o.checkpoint = true;
  o.checkpoint_segment = 2;
  o.head_chunks = 2;
  check_meshes("memory", o);
}

}  // namespace
}  // namespace ulysses::test

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
