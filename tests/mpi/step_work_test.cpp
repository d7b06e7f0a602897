// The step-time model's collectives are those a real multi-rank step moves: the planner's dry run
// (train/step_time.h: plan_step_work) and a real step of the CPU backend over MPI, whose every
// collective a counting communicator notes, agree byte for byte on each kind and group size —
// the Ulysses all-to-alls, the ring's K/V exchange, the hybrid's both, and the gradient
// all-reduce — at every mesh the world allows. The step's scalar all-reduces (token counts, the
// loss: at most 16 bytes) are outside the schedule the model times and are left out.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "comm/communicator.h"
#include "core/step_work.h"
#include "mpi/mpi_test_main.h"
#include "parallel/mesh.h"
#include "model/llama.h"
#include "train/optimizer.h"
#include "train/step.h"
#include "train/step_time.h"
#include "test_util.h"

namespace ulysses::test {
namespace {

using Key = std::pair<std::string, int>;  // (kind, group size)
using Totals = std::map<Key, double>;

// Forwards every call to the real communicator and adds its size (as nccl-tests sizes it, the
// same rule as the planner's simulated communicator) to `totals`.
class Counting final : public Communicator {
 public:
  Counting(std::unique_ptr<Communicator> inner, Totals* totals) : inner_(std::move(inner)), totals_(totals) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return "counting " + inner_->name(); }
  void all_to_all(const void* s, void* r, size_t count, DType dt) override {
    note("all-to-all", count * size(), dt);
    inner_->all_to_all(s, r, count, dt);
  }
  void all_to_all_v(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc, const size_t* rd,
                    DType dt) override {
    size_t n = 0;
    for (int i = 0; i < size(); ++i) n += sc[i];
    note("all-to-all", n, dt);
    inner_->all_to_all_v(s, sc, sd, r, rc, rd, dt);
  }
  void all_gather(const void* s, void* r, size_t count, DType dt) override {
    note("all-gather", count * size(), dt);
    inner_->all_gather(s, r, count, dt);
  }
  void reduce_scatter(const void* s, void* r, size_t count, DType dt, ReduceOp op) override {
    note("reduce-scatter", count * size(), dt);
    inner_->reduce_scatter(s, r, count, dt, op);
  }
  void all_reduce(const void* s, void* r, size_t count, DType dt, ReduceOp op) override {
    if (count * dtype_size(dt) > 16) note("all-reduce", count, dt);  // not the scalars
    inner_->all_reduce(s, r, count, dt, op);
  }
  void broadcast(void* b, size_t count, DType dt, int root) override {
    note("broadcast", count, dt);
    inner_->broadcast(b, count, dt, root);
  }
  void send(const void* b, size_t count, DType dt, int peer, int tag) override {
    note("sendrecv", count, dt);
    inner_->send(b, count, dt, peer, tag);
  }
  void recv(void* b, size_t count, DType dt, int peer, int tag) override { inner_->recv(b, count, dt, peer, tag); }
  void sendrecv(const void* s, size_t sc, int dest, void* r, size_t rc, int src, DType dt, int tag) override {
    note("sendrecv", sc, dt);
    inner_->sendrecv(s, sc, dest, r, rc, src, dt, tag);
  }
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<Counting>(inner_->split(color, key), totals_);
  }
  [[noreturn]] void abort(int code) override {
    inner_->abort(code);
    std::_Exit(code);  // not reached: the inner abort does not return
  }

 private:
  void note(const char* kind, size_t count, DType dt) {
    if (size() > 1) (*totals_)[{kind, size()}] += static_cast<double>(count * dtype_size(dt));
  }
  std::unique_ptr<Communicator> inner_;
  Totals* totals_;
};

// zero: the ZeRO stage over all sp ranks (with AdamW's step), or -1 for no optimizer.
Totals planned(const ModelConfig& c, int64_t S, int sp, int ring, int zero = -1) {
  PlanRequest req;
  req.config = c;
  req.seq_len = S;
  req.sp = sp;
  req.ring = ring;
  req.act_dtype = DType::F32;
  req.device = Device::CPU;
  req.optimizer = zero >= 0;
  req.optimizer_shards = zero >= 1 ? sp : 1;
  req.gradient_shards = zero >= 2 ? sp : 1;
  req.weight_shards = zero >= 3 ? sp : 1;
  Totals t;
  const WorkLedger work = plan_step_work(req);  // kept: the loop reads its families
  for (const FamilyWork& f : work.families())
    for (const CollectiveWork& k : f.collectives)
      if (k.kind != "all-reduce" || k.bytes / double(k.calls) > 16) t[{k.kind, k.group}] += k.bytes;  // not scalars
  return t;
}

// Every key of either side, the same bytes on both; returns the mismatches.
int64_t compare(const Totals& plan, const Totals& real) {
  int64_t mismatches = 0;
  for (const auto& [key, bytes] : plan) {
    const double got = real.count(key) ? real.at(key) : 0.0;
    if (got != bytes) ++mismatches;
    EXPECT_EQ(got, bytes) << key.first << " over " << key.second << " ranks";
  }
  for (const auto& [key, bytes] : real)
    if (!plan.count(key)) {
      ++mismatches;
      ADD_FAILURE() << "the real step moved " << bytes << " bytes of " << key.first << " over " << key.second
                    << " ranks; the plan none";
    }
  return mismatches;
}

TEST(StepWork, PlannedCollectivesAreTheRealStepsBytes) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));
  const int P = world().size();
  const int64_t S = 64;
  auto be = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*be, 3);
  const TokenBatch batch = patterned_batch(S, c.vocab_size, S);
  int64_t mismatches = 0, compared = 0;
  std::vector<int> rings = {1};
  if (P > 1) rings.push_back(P);
  if (P >= 4 && P % 2 == 0) rings.push_back(2);
  for (int ring : rings) {
    // Ulysses needs the 4 query heads (and 2 KV heads, or their replicas) to divide: the same on every rank.
    const int u = P / ring;
    if (c.num_attention_heads % u != 0 || (c.num_key_value_heads % u != 0 && u % c.num_key_value_heads != 0)) continue;
    SCOPED_TRACE("sp " + std::to_string(P) + " ring " + std::to_string(ring));
    Totals real;
    // A copy of the world for this mesh (split with one color), every call through it counted.
    Counting counted(world().split(0, world().rank()), &real);
    ProcessMesh mesh(counted, P, ring);
    real.clear();  // the mesh's set-up is not the step's
    w.zero_grads(*be);
    LlamaModel model(w, *be, mesh, StepOptions{});
    compute_loss_and_grads(model, w, *be, mesh, batch);
    const Totals plan = planned(c, S, P, ring);
    compared += static_cast<int64_t>(plan.size());
    mismatches += compare(plan, real);
  }
  EXPECT_EQ(sum_over_ranks(mismatches), 0);
  if (P > 1) EXPECT_GT(compared, 0);
}

// ZeRO 1 (the optimizer's weight all-gather), 2 (the gradients reduce-scattered in the backward)
// and 3 (the weights gathered per group too), with AdamW's step, over the Ulysses mesh of the
// whole world where the heads allow it, else the ring.
TEST(StepWork, PlannedZeroCollectivesAreTheRealStepsBytes) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));
  const int P = world().size();
  const int64_t S = 64;
  const int ring = c.num_attention_heads % P == 0 ? 1 : P;
  auto be = make_cpu_backend();
  const TokenBatch batch = patterned_batch(S, c.vocab_size, S);
  int64_t mismatches = 0;
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE("sp " + std::to_string(P) + " ring " + std::to_string(ring) + " zero " + std::to_string(zero));
    Totals real;
    Counting counted(world().split(0, world().rank()), &real);
    ProcessMesh mesh(counted, P, ring);
    LlamaWeights w(c, DType::F32, zero_sharding(counted, zero));
    w.init_random(*be, 5);
    LlamaModel model(w, *be, mesh, StepOptions{});
    AdamW opt(w, *be, OptimizerConfig{}, {zero >= 1 ? &counted : nullptr, false});
    real.clear();  // the set-up is not the step's
    w.zero_grads(*be);
    compute_loss_and_grads(model, w, *be, mesh, batch);
    opt.step();
    mismatches += compare(planned(c, S, P, ring, zero), real);
  }
  EXPECT_EQ(sum_over_ranks(mismatches), 0);
}

}  // namespace
}  // namespace ulysses::test

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
