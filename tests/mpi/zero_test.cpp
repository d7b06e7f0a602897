// ZeRO stage 1 under mpirun (np 1, 2, 3, 4, 8): AdamW with its state sharded over
// the world updates the weights bit-identically to the unsharded optimizer (the
// update is elementwise and the gradients are whole on every rank), its snapshot
// is the whole state, and a sharded run resumes from it (on any number of ranks:
// the file holds whole tensors) with the same following updates; the same with the
// state offloaded to host memory. np 3 exercises parameters that do not divide into
// equal blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "mpi/mpi_test_main.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace ulysses::test {
namespace {

// The same gradients on every rank (as after the step's all-reduce), different each step.
// bf16_values: rounded to bfloat16 (the values a bfloat16 gradient buffer can hold), in
// whatever dtype the buffers are.
void fill_grads(LlamaWeights& w, int step, bool bf16_values = false) {
  int k = 0;
  for (Parameter& p : w.params()) {
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      float g = static_cast<float>(((i * 7919 + k * 104729 + step * 31) % 2001) - 1000) * 1e-3f;
      if (bf16_values) g = bf16_to_float(float_to_bf16(g));
      if (p.grad.dtype() == DType::BF16) p.grad.data<uint16_t>()[i] = float_to_bf16(g);
      else p.grad.data<float>()[i] = g;
    }
    ++k;
  }
}

int64_t values_differing(const LlamaWeights& a, const LlamaWeights& b) {
  int64_t wrong = 0;
  for (size_t i = 0; i < a.params().size(); ++i) {
    const Tensor& x = a.params()[i].value;
    const Tensor& y = b.params()[i].value;
    wrong += std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0;
  }
  return wrong;
}

int64_t snapshots_differing(const OptimizerSnapshot& a, const OptimizerSnapshot& b) {
  int64_t wrong = a.state.size() != b.state.size() || a.master.size() != b.master.size();
  for (size_t i = 0; i < std::min(a.state.size(), b.state.size()); ++i) {
    const Tensor& x = a.state[i].second;
    const Tensor& y = b.state[i].second;
    wrong += a.state[i].first != b.state[i].first || x.shape() != y.shape() ||
             std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0;
  }
  return wrong;
}

// offload: the sharded optimizer's state also in host memory, updated by the CPU backend.
// lagging: the backend's asynchronous copies land only when waited for (as a late transfer
// stream would), so the offloaded pipeline must wait for each before using it.
void check_sharded_equals_unsharded(bool offload, bool lagging = false) {
  Communicator& c = world();
  const std::string dir = fixtures_dir() + "/gqa/model";
  ModelFolder folder = ModelFolder::open(dir);
  auto backend = make_cpu_backend(lagging);
  LlamaWeights whole(folder.config()), sharded(folder.config());
  whole.load(folder, *backend);
  sharded.load(folder, *backend);
  OptimizerConfig oc;
  oc.warmup_steps = 1;
  oc.total_steps = 5;
  oc.grad_clip = 5.0;  // the gradients above have norms around 10: clipped
  AdamW a(whole, *backend, oc), b(sharded, *backend, oc, {&c, offload});
  a.load_master(folder);
  b.load_master(folder);
  EXPECT_EQ(b.shards(), c.size());

  int64_t wrong = 0;
  for (int step = 1; step <= 3; ++step) {
    fill_grads(whole, step);
    fill_grads(sharded, step);
    const AdamW::StepInfo ia = a.step(), ib = b.step();
    wrong += ia.grad_norm != ib.grad_norm || ia.lr != ib.lr;
    wrong += values_differing(whole, sharded);
  }
  EXPECT_EQ(sum_over_ranks(wrong), 0) << "sharded AdamW's weights differ from the unsharded ones";
  const OptimizerSnapshot sa = a.snapshot(true), sb = b.snapshot(true);
  EXPECT_EQ(sum_over_ranks(snapshots_differing(sa, sb)), 0) << "the gathered state differs";
  EXPECT_EQ(sb.steps_taken, 3);
  // Ranks that do not keep the snapshot take part in the gathers and hold nothing.
  const OptimizerSnapshot dropped = b.snapshot(false);
  EXPECT_TRUE(dropped.state.empty() && dropped.master.empty());

  // Resume: rank 0 writes the whole state; a fresh sharded optimizer over fresh weights
  // reads its shares back and takes the same next step as the unsharded one.
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("uly_zero_test_optimizer_np" + std::to_string(c.size()) + (offload ? "_off" : "") +
                             ".safetensors")).string();
  if (c.rank() == 0) write_safetensors(file, sb.state, {{"steps_taken", "3"}});
  c.barrier();
  LlamaWeights resumed(folder.config());
  resumed.load(folder, *backend);
  AdamW r(resumed, *backend, oc, {&c, offload});
  r.load_state(file, 3);
  EXPECT_EQ(sum_over_ranks(values_differing(whole, resumed)), 0) << "weights after load_state";
  fill_grads(whole, 4);
  fill_grads(resumed, 4);
  a.step();
  r.step();
  EXPECT_EQ(sum_over_ranks(values_differing(whole, resumed)), 0) << "the step after resuming";
  c.barrier();
  if (c.rank() == 0) std::filesystem::remove(file);

  // Shard files (a checkpoint's optimizer/): every rank writes its part; a sharded optimizer on
  // the same ranks, and an unsharded one on each rank (reading every file), read back the same
  // state and take the same next step.
  const std::string shard_dir = (std::filesystem::temp_directory_path() /
                                ("uly_zero_test_shards_np" + std::to_string(c.size()) + (offload ? "_off" : "")))
                                   .string();
  if (c.rank() == 0) {
    std::filesystem::remove_all(shard_dir);
    std::filesystem::create_directories(shard_dir + "/optimizer");
  }
  c.barrier();
  r.save_shard(optimizer_shard_file(shard_dir, c.rank(), c.size()));
  c.barrier();
  LlamaWeights from_shards(folder.config()), one_rank(folder.config());
  from_shards.load(folder, *backend);
  one_rank.load(folder, *backend);
  AdamW s(from_shards, *backend, oc, {&c, offload}), u(one_rank, *backend, oc, {nullptr, offload});
  s.load_shards(shard_dir, c.size(), 4);
  u.load_shards(shard_dir, c.size(), 4);
  EXPECT_EQ(sum_over_ranks(snapshots_differing(r.snapshot(true), s.snapshot(true))), 0) << "sharded from shards";
  EXPECT_EQ(sum_over_ranks(snapshots_differing(a.snapshot(true), u.snapshot(true))), 0) << "unsharded from shards";
  EXPECT_EQ(sum_over_ranks(values_differing(whole, from_shards) + values_differing(whole, one_rank)), 0);
  for (LlamaWeights* w : {&whole, &from_shards, &one_rank}) fill_grads(*w, 5);
  a.step();
  s.step();
  u.step();
  EXPECT_EQ(sum_over_ranks(values_differing(whole, from_shards) + values_differing(whole, one_rank)), 0)
      << "the step after reading the shards";
  c.barrier();
  if (c.rank() == 0) std::filesystem::remove_all(shard_dir);
}

TEST(Zero, ShardedAdamWEqualsUnsharded) { check_sharded_equals_unsharded(false); }

TEST(Zero, OffloadedShardedAdamWEqualsUnsharded) { check_sharded_equals_unsharded(true); }

TEST(Zero, OffloadedWithLateTransfersEqualsUnsharded) { check_sharded_equals_unsharded(true, /*lagging=*/true); }

// bfloat16 gradient buffers: AdamW reads them into float32, so its updates (on the device
// path, and sharded and offloaded with late transfers, the buffers moved as stored) equal
// those from float32 buffers holding the same values, bit for bit.
TEST(Zero, Bf16GradientBuffersEqualFloat32Buffers) {
  Communicator& c = world();
  ModelFolder folder = ModelFolder::open(fixtures_dir() + "/gqa/model");
  auto backend = make_cpu_backend(/*lagging_transfers=*/true);
  LlamaWeights f32(folder.config()), bf16(folder.config(), DType::BF16), bf16_offloaded(folder.config(), DType::BF16);
  for (LlamaWeights* w : {&f32, &bf16, &bf16_offloaded}) w->load(folder, *backend);
  EXPECT_EQ(bf16.params()[0].grad.dtype(), DType::BF16);
  OptimizerConfig oc;
  oc.warmup_steps = 1;
  oc.total_steps = 5;
  oc.grad_clip = 5.0;
  AdamW a(f32, *backend, oc), b(bf16, *backend, oc), o(bf16_offloaded, *backend, oc, {&c, true});
  int64_t wrong = 0;
  for (int step = 1; step <= 3; ++step) {
    for (LlamaWeights* w : {&f32, &bf16, &bf16_offloaded}) fill_grads(*w, step, /*bf16_values=*/true);
    const AdamW::StepInfo ia = a.step(), ib = b.step(), io = o.step();
    wrong += ia.grad_norm != ib.grad_norm || ia.grad_norm != io.grad_norm;
    wrong += values_differing(f32, bf16) + values_differing(f32, bf16_offloaded);
  }
  EXPECT_EQ(sum_over_ranks(wrong), 0) << "AdamW on bfloat16 gradient buffers differs from float32 ones";
}

}  // namespace
}  // namespace ulysses::test

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }

namespace ulysses::test {
namespace {

struct Trajectory {
  std::vector<double> loss, grad_norm;
  std::vector<std::vector<float>> weights;  // after the last step
  MemorySnapshot memory;                    // this rank's pools over the run
};

// steps of training (loss and gradients of a batch of dp rows, then AdamW) at sequence-parallel
// degree sp, every rank holding one row's slice: ZeRO stage 0 (whole gradients all-reduced,
// whole state), 1 (the state sharded over the world), 2 (the gradients too, reduce-scattered
// layer by layer in the backward) or 3 (the weights too, gathered a layer at a time), the state
// on the device or offloaded. The weights after the last step are the gathered masters (equal to
// the float32 compute copies).
Trajectory train(const ModelConfig& c, int sp, int zero, bool offload, int steps, StepOptions options = {}) {
  Communicator& w = world();
  ProcessMesh mesh(w, sp);
  auto be = make_cpu_backend();
  Trajectory out;
  {
    LlamaWeights weights(c, DType::F32, zero_sharding(w, zero));
    weights.init_random(*be, 23);
    LlamaModel model(weights, *be, mesh.sp(), options);
    OptimizerConfig oc;
    oc.lr = 1e-2;
    oc.warmup_steps = 2;
    oc.total_steps = steps;
    AdamW opt(weights, *be, oc, {zero >= 1 ? &w : nullptr, offload});
    be->pools().reset_peaks();
    for (int step = 0; step < steps; ++step) {
      TokenBatch batch;
      batch.B = mesh.dp_size();
      batch.S = 96;
      for (int64_t r = 0; r < batch.B; ++r)
        for (int64_t i = 0; i < batch.S; ++i) {
          batch.ids.push_back(static_cast<int32_t>((i * 13 + r * 7 + step * 3) % c.vocab_size));
          batch.targets.push_back(static_cast<int32_t>((i * 5 + r + step) % c.vocab_size));
          batch.positions.push_back(static_cast<int32_t>(i < 40 ? i : i - 40));
        }
      weights.zero_grads(*be);
      out.loss.push_back(compute_loss_and_grads(model, weights, *be, mesh, batch).loss);
      out.grad_norm.push_back(opt.step().grad_norm);
    }
    out.memory = MemorySnapshot::of(be->pools());
    for (const auto& [name, t] : opt.snapshot(true).master) {
      const float* v = t.data<float>();
      out.weights.emplace_back(v, v + t.numel());
    }
  }
  return out;
}

// ZeRO stages 1, 2 and 3 train as stage 0: the same losses for 10 steps (1e-6 relative; the sums
// run in another order), gradient norms (1e-5) and weights, at every degree the world allows
// (dp x sp = 4 x 1, 2 x 2, 1 x 4 at np 4), with the state on the device and offloaded; stage 3
// also with two-level offloaded checkpoints and a tiled MLP (the weights gathered again for the
// recompute) and without overlapped communication. Between steps each rank holds its 1/P of the gradients (stages 2, 3) and of the
// weights (stage 3); during the step two groups' gradient scratch and the groups gathered at once
// come on top, and rank 0's pool peaks are the plan's.
void check_stage_trains_as_stage0(int zero) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));  // 4 query heads, 2 kv heads, 2 layers
  c.num_hidden_layers = 3;
  StepOptions checkpointed;
  checkpointed.checkpoint = true;
  checkpointed.checkpoint_segment = 2;
  checkpointed.offload_layers = -1;
  checkpointed.mlp_tiles = 3;
  StepOptions waiting;  // each reduce-scatter and gather waited for at once
  waiting.overlap_communication = false;
  int checked = 0;
  for (int sp : ProcessMesh::valid_sp_values(world().size())) {
    if (c.num_attention_heads % sp != 0 || (c.num_key_value_heads % sp != 0 && sp % c.num_key_value_heads != 0))
      continue;
    for (const StepOptions& options : zero == 3 ? std::vector<StepOptions>{{}, checkpointed, waiting}
                                                : std::vector<StepOptions>{{}}) {
      const Trajectory ref = train(c, sp, 0, false, 10, options);
      for (bool offload : {false, true}) {
        SCOPED_TRACE("sp=" + std::to_string(sp) + (offload ? " offloaded" : "") +
                     (options.checkpoint ? " checkpointed" : ""));
        const Trajectory z = train(c, sp, zero, offload, 10, options);
        for (size_t s = 0; s < ref.loss.size(); ++s) {
          EXPECT_LE(std::fabs(z.loss[s] - ref.loss[s]) / ref.loss[s], 1e-6) << "step " << s + 1;
          EXPECT_LE(std::fabs(z.grad_norm[s] - ref.grad_norm[s]) / ref.grad_norm[s], 1e-5) << "step " << s + 1;
        }
        ASSERT_EQ(z.weights.size(), ref.weights.size());
        for (size_t i = 0; i < ref.weights.size(); ++i)
          EXPECT_LE(rel_error(z.weights[i].data(), ref.weights[i].data(), ref.weights[i].size()), 1e-5) << i;
        // Between steps a rank holds only its shards (the scratch and the gathered layers are gone).
        const auto held = [](const Trajectory& t, Pool p) { return t.memory.pools[static_cast<int>(p)].current; };
        if (world().size() > 1 && zero >= 2) EXPECT_LT(held(z, Pool::Gradients), held(ref, Pool::Gradients));
        if (world().size() > 1 && zero >= 3) EXPECT_LT(held(z, Pool::Weights), held(ref, Pool::Weights));
        if (world().rank() == 0 && !offload) {
          PlanRequest r;
          r.config = c;
          r.seq_len = 96;
          r.sp = sp;
          r.options = options;
          r.documents = 2;
          r.optimizer = true;
          r.optimizer_shards = zero >= 1 ? world().size() : 1;
          r.gradient_shards = zero >= 2 ? world().size() : 1;
          r.weight_shards = zero >= 3 ? world().size() : 1;
          const MemorySnapshot plan = plan_step_memory(r);
          EXPECT_EQ(plan.peak(Pool::Gradients), z.memory.peak(Pool::Gradients));
          EXPECT_EQ(plan.peak(Pool::Optimizer), z.memory.peak(Pool::Optimizer));
          EXPECT_EQ(plan.peak(Pool::Weights), z.memory.peak(Pool::Weights));
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Zero, Stage1TrainsAsStage0) { check_stage_trains_as_stage0(1); }
TEST(Zero, Stage2TrainsAsStage0) { check_stage_trains_as_stage0(2); }
TEST(Zero, Stage3TrainsAsStage0) { check_stage_trains_as_stage0(3); }

}  // namespace
}  // namespace ulysses::test
