// Shared main() for the tests under tests/mpi (run as `mpirun -np N mpi_X_test`).
//
// Every rank runs every test in the same order; collectives inside a test are
// made by all ranks. Rules for tests written on top of this:
//  - never ASSERT_* (return early) before a collective: the other ranks would
//    wait in it forever; count mismatches and check them afterwards;
//  - finish a test with all_ranks_ok(...) / sum_over_ranks(...) so that every
//    rank sees the global verdict.
// Rank 0 prints gtest's normal output; other ranks print only their failures,
// prefixed with their rank. The exit code is the same on every rank.
// Each test file ends with: int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>

#include "comm/communicator.h"

namespace ulysses::test {

inline std::unique_ptr<Communicator>& world_holder() {
  static std::unique_ptr<Communicator> world;
  return world;
}
inline Communicator& world() { return *world_holder(); }

// Σ over the world of a per-rank integer (an error count, a flag).
inline int64_t sum_over_ranks(int64_t local) {
  int64_t v = local;
  world().all_reduce(&v, &v, 1, DType::I64, ReduceOp::Sum);
  return v;
}

// Prints failed assertions of a non-zero rank, with its rank, and nothing else.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

inline int run_mpi_tests(int argc, char** argv) {
  world_holder() = make_world_communicator(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = world().rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int local_rc = RUN_ALL_TESTS();
  const int64_t failed_ranks = sum_over_ranks(local_rc != 0 ? 1 : 0);
  if (rank == 0 && failed_ranks > 0)
    std::fprintf(stderr, "%lld of %d ranks had failures\n", static_cast<long long>(failed_ranks), world().size());
  world_holder().reset();
  finalize_world_communicator();
  return failed_ranks > 0 ? 1 : 0;
}

}  // namespace ulysses::test
