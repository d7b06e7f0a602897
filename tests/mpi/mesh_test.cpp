// ProcessMesh under mpirun (np 1, 2, 3, 4, 8): every dp × sp (× ring) layout the
// world size allows, checked by gathering world ranks over each group and
// comparing with the layout's formula; invalid degrees throw on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "mpi_test_main.h"
#include "parallel/mesh.h"

namespace ulysses {
namespace {

using test::sum_over_ranks;
using test::world;

// Wrong entries when the world ranks gathered over `group` differ from `expect`.
int64_t members_wrong(Communicator& group, const std::vector<int32_t>& expect) {
  int32_t me = world().rank();
  std::vector<int32_t> got(group.size(), -1);
  group.all_gather(&me, got.data(), 1, DType::I32);
  int64_t wrong = got != expect;
  // A collective through the group reaches exactly its members.
  int64_t sum = me, expect_sum = 0;
  group.all_reduce(&sum, &sum, 1, DType::I64, ReduceOp::Sum);
  for (int32_t m : expect) expect_sum += m;
  return wrong + (sum != expect_sum);
}

// Builds the mesh and returns the number of wrong facts on this rank.
int64_t layout_wrong(int sp_arg, int ring) {
  Communicator& w = world();
  const int P = w.size(), r = w.rank();
  const int sp = sp_arg <= 0 ? P : sp_arg, dp = P / sp, U = sp / ring;
  ProcessMesh mesh(w, sp_arg, ring);
  int64_t wrong = 0;
  wrong += &mesh.world() != &w;
  wrong += mesh.world_rank() != r || mesh.world_size() != P;
  wrong += mesh.sp_size() != sp || mesh.dp_size() != dp || mesh.sp_size() * mesh.dp_size() != P;
  wrong += mesh.sp_rank() != r % sp || mesh.dp_rank() != r / sp;
  wrong += mesh.ulysses_size() != U || mesh.ring_size() != ring;
  wrong += mesh.ulysses_rank() != (r % sp) % U || mesh.ring_rank() != (r % sp) / U;
  wrong += mesh.sp().rank() != mesh.sp_rank() || mesh.dp().rank() != mesh.dp_rank();
  wrong += mesh.ulysses().rank() != mesh.ulysses_rank() || mesh.ring().rank() != mesh.ring_rank();

  const int base = mesh.dp_rank() * sp;
  std::vector<int32_t> sp_members, dp_members, u_members, ring_members;
  for (int k = 0; k < sp; ++k) sp_members.push_back(base + k);
  for (int d = 0; d < dp; ++d) dp_members.push_back(d * sp + mesh.sp_rank());
  for (int k = 0; k < U; ++k) u_members.push_back(base + mesh.ring_rank() * U + k);
  for (int t = 0; t < ring; ++t) ring_members.push_back(base + t * U + mesh.ulysses_rank());
  wrong += members_wrong(mesh.sp(), sp_members);
  wrong += members_wrong(mesh.dp(), dp_members);
  wrong += members_wrong(mesh.ulysses(), u_members);
  wrong += members_wrong(mesh.ring(), ring_members);

  const std::string d = mesh.describe();
  wrong += d.find("dp " + std::to_string(dp) + " × sp " + std::to_string(sp)) == std::string::npos;
  return wrong;
}

// 1 when constructing the mesh throws a ulysses::Error whose message holds `needle`.
int64_t throws_with(int sp, int ring, const std::string& needle, int my_sp = 0) {
  try {
    ProcessMesh mesh(world(), my_sp != 0 ? my_sp : sp, ring);
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    return 1;
  }
  return 0;
}

TEST(Mesh, AllRanksOneSequenceGroup) {
  const int P = world().size();
  EXPECT_EQ(sum_over_ranks(layout_wrong(P, 1)), 0) << "sp = world";
  EXPECT_EQ(sum_over_ranks(layout_wrong(0, 1)), 0) << "sp = 0 means all ranks";
  EXPECT_EQ(sum_over_ranks(layout_wrong(-1, 1)), 0) << "sp < 0 means all ranks";
}

TEST(Mesh, PureDataParallel) { EXPECT_EQ(sum_over_ranks(layout_wrong(1, 1)), 0) << "sp = 1"; }

TEST(Mesh, EverySpThatDividesTheWorld) {
  const int P = world().size();
  if (P % 2 == 0) EXPECT_EQ(sum_over_ranks(layout_wrong(2, 1)), 0) << "sp = 2";
  for (int sp : ProcessMesh::valid_sp_values(P)) EXPECT_EQ(sum_over_ranks(layout_wrong(sp, 1)), 0) << "sp = " << sp;
}

TEST(Mesh, RingInsideTheSequenceGroup) {
  const int P = world().size();
  for (int sp : ProcessMesh::valid_sp_values(P))
    for (int ring : ProcessMesh::valid_sp_values(sp))
      EXPECT_EQ(sum_over_ranks(layout_wrong(sp, ring)), 0) << "sp = " << sp << ", ring = " << ring;
}

TEST(Mesh, ValidSpValues) {
  EXPECT_EQ(ProcessMesh::valid_sp_values(1), (std::vector<int>{1}));
  EXPECT_EQ(ProcessMesh::valid_sp_values(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(ProcessMesh::valid_sp_values(12), (std::vector<int>{1, 2, 3, 4, 6, 12}));
}

TEST(Mesh, InvalidSpThrowsOnEveryRank) {
  const int P = world().size();
  std::string valid;
  for (int v : ProcessMesh::valid_sp_values(P)) valid += (valid.empty() ? "" : ", ") + std::to_string(v);
  EXPECT_EQ(sum_over_ranks(throws_with(P + 1, 1, "valid --sp for " + std::to_string(P) + " ranks: " + valid)), P);
  EXPECT_EQ(sum_over_ranks(throws_with(2 * P, 1, "--sp " + std::to_string(2 * P))), P);
  if (P % 3 != 0) EXPECT_EQ(sum_over_ranks(throws_with(3, 1, "does not divide the " + std::to_string(P))), P);
  EXPECT_EQ(sum_over_ranks(throws_with(P, 0, "ring degree 0")), P);
  if (P % 3 != 0) EXPECT_EQ(sum_over_ranks(throws_with(P, 3, "ring degree 3")), P);
  // The world is still usable after the errors.
  EXPECT_EQ(sum_over_ranks(layout_wrong(P, 1)), 0);
}

TEST(Mesh, RanksThatDisagreeAllThrow) {
  Communicator& w = world();
  if (w.size() == 1) GTEST_SKIP() << "disagreement needs 2 ranks";
  // Rank 0 asks for sp = 1, the others for sp = world: a split would pair groups that do not match.
  const int mine = w.rank() == 0 ? 1 : w.size();
  EXPECT_EQ(sum_over_ranks(throws_with(0, 1, "ranks disagree", mine)), w.size());
  EXPECT_EQ(sum_over_ranks(layout_wrong(w.size(), 1)), 0);
  // Zigzag on rank 0 only: every rank throws instead of laying tokens out two ways.
  int64_t threw = 0;
  try {
    ProcessMesh mesh(w, w.size(), w.size(), w.rank() == 0);
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("ranks disagree on zigzag"), std::string::npos) << e.message();
    threw = 1;
  }
  EXPECT_EQ(sum_over_ranks(threw), w.size());
}

}  // namespace
}  // namespace ulysses

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
