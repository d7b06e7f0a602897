// The memory techniques and the planner, from the engine's own accounting:
// planned peak == measured peak, tiled loss keeps the logits flat as S grows,
// tiled MLP keeps the MLP intermediates flat, offloaded checkpoints keep the
// device pools flat as layers are added.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "comm/communicator.h"
#include "test_util.h"
#include "model/llama.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace ulysses::test {
namespace {

ModelConfig small_config(int64_t layers) {
  ModelConfig c;
  ULY_CHECK(named_model_config("tiny", &c), "no tiny shape");
  c.num_hidden_layers = layers;
  return c;
}

// A real CPU step on one random sequence of S tokens; returns the measured pools.
MemorySnapshot measure(const ModelConfig& c, int64_t S, const StepOptions& o) {
  auto world = make_self_communicator();
  ProcessMesh mesh(*world, 1);
  auto backend = make_cpu_backend();
  MemorySnapshot out;
  {
    LlamaWeights w(c, o.grad_dtype);
    w.init_random(*backend, 1);
    LlamaModel model(w, *backend, mesh.sp(), o);
    const TokenBatch b = patterned_batch(S, c.vocab_size, 50);  // documents of 50 tokens
    backend->pools().reset_peaks();
    compute_loss_and_grads(model, w, *backend, mesh, b);
    out = MemorySnapshot::of(backend->pools());
  }
  return out;
}

MemorySnapshot plan(const ModelConfig& c, int64_t S, const StepOptions& o, int sp = 1) {
  PlanRequest r;
  r.config = c;
  r.seq_len = S;
  r.sp = sp;
  r.options = o;
  r.documents = (S + 49) / 50;  // as measure() packs them
  return plan_step_memory(r);
}

std::vector<StepOptions> option_combinations() {
  std::vector<StepOptions> all;
  for (int mask = 0; mask < 32; ++mask) {
    StepOptions o;
    if (mask & 1) o.mlp_tiles = 0;
    if (mask & 2) o.loss_tile_tokens = 64;
    if (mask & 4) o.checkpoint = true;
    if (mask & 8) {
      o.checkpoint = true;
      o.offload_layers = 1;
    }
    if (mask & 16) {
      if (!o.checkpoint) continue;  // keeps outputs for the recompute of checkpointed layers only
      o.keep_attention = true;
    }
    all.push_back(o);
  }
  // Two-level checkpoints (segments of 2 of the 3 layers), alone, offloaded, with keep-attention.
  for (int variant = 0; variant < 3; ++variant) {
    StepOptions o;
    o.checkpoint = true;
    o.checkpoint_segment = 2;
    if (variant == 1) o.offload_layers = -1, o.mlp_tiles = 0;
    if (variant == 2) o.keep_attention = true;
    all.push_back(o);
  }
  // Head-chunked attention (2 chunks of the tiny shape's 4 heads), alone and with the other options.
  for (int variant = 0; variant < 5; ++variant) {
    StepOptions o;
    o.head_chunks = 2;
    if (variant == 1) o.mlp_tiles = 0, o.loss_tile_tokens = 64;
    if (variant == 2) o.checkpoint = true, o.offload_layers = -1, o.mlp_tiles = 0;
    if (variant == 3) o.checkpoint = true, o.checkpoint_segment = 2, o.offload_layers = 1;
    if (variant == 4) o.checkpoint = true, o.keep_attention = true;
    all.push_back(o);
  }
  // bfloat16 gradient buffers (and their float32 scratch), plain and with the other options.
  for (int variant = 0; variant < 4; ++variant) {
    StepOptions o;
    o.grad_dtype = DType::BF16;
    if (variant == 1) o.mlp_tiles = 0, o.loss_tile_tokens = 64;
    if (variant == 2) o.checkpoint = true, o.checkpoint_segment = 2, o.offload_layers = -1;
    if (variant == 3) o.head_chunks = 2, o.checkpoint = true, o.keep_attention = true;
    all.push_back(o);
  }
  return all;
}

TEST(MemoryPlan, PlannedPeakEqualsMeasuredPeak) {
  const ModelConfig c = small_config(3);
  for (const StepOptions& o : option_combinations()) {
    SCOPED_TRACE(testing::Message() << "tiles " << o.mlp_tiles << " loss " << o.loss_tile_tokens << " ckpt "
                                    << o.checkpoint << " offload " << o.offload_layers << " keep " << o.keep_attention
                                    << " every " << o.checkpoint_segment << " head chunks " << o.head_chunks
                                    << " grads " << dtype_name(o.grad_dtype));
    const MemorySnapshot p = plan(c, 300, o), m = measure(c, 300, o);
    EXPECT_EQ(p.device.peak, m.device.peak);
    EXPECT_EQ(p.host.peak, m.host.peak);
    for (int i = 0; i < kNumPools; ++i) EXPECT_EQ(p.pools[i].peak, m.pools[i].peak) << pool_name(Pool(i));
    for (int i = 0; i < kNumMemTags; ++i) EXPECT_EQ(p.tags[i].peak, m.tags[i].peak) << mem_tag_name(MemTag(i));
    EXPECT_GT(m.device.peak, 0u);
  }
}

// AdamW's state as the trainer places it (whole, rank 0's ZeRO-1 share of 4, offloaded to the
// host, both): planned == measured over a step and an update, and where it goes.
TEST(MemoryPlan, OptimizerPlacementIsPlanned) {
  const ModelConfig c = small_config(2);
  StepOptions o;
  o.checkpoint = true;
  size_t whole_optimizer = 0;
  for (int shards : {1, 4})
    for (bool offload : {false, true}) {
      SCOPED_TRACE(testing::Message() << "shards " << shards << " offload " << offload);
      auto world = make_self_communicator();
      ProcessMesh mesh(*world, 1);
      auto group = make_simulated_communicator(shards, 0);
      auto backend = make_cpu_backend();
      MemorySnapshot m;
      {
        LlamaWeights w(c);
        w.init_random(*backend, 1);
        AdamW opt(w, *backend, OptimizerConfig{}, {group.get(), offload});
        LlamaModel model(w, *backend, mesh.sp(), o);
        compute_loss_and_grads(model, w, *backend, mesh, patterned_batch(200, c.vocab_size, 50));
        opt.step();
        m = MemorySnapshot::of(backend->pools());
      }
      PlanRequest r;
      r.config = c;
      r.seq_len = 200;
      r.options = o;
      r.documents = 4;
      r.optimizer = true;
      r.optimizer_shards = shards;
      r.optimizer_offload = offload;
      const MemorySnapshot p = plan_step_memory(r);
      for (int i = 0; i < kNumPools; ++i) EXPECT_EQ(p.pools[i].peak, m.pools[i].peak) << pool_name(Pool(i));
      EXPECT_EQ(p.device.peak, m.device.peak);
      EXPECT_EQ(p.host.peak, m.host.peak);
      const size_t state = m.peak(offload ? Pool::HostOptimizer : Pool::Optimizer);
      EXPECT_EQ(m.peak(offload ? Pool::Optimizer : Pool::HostOptimizer), 0u);
      if (shards == 1 && !offload) whole_optimizer = state;
      if (!offload) EXPECT_NEAR(static_cast<double>(state), static_cast<double>(whole_optimizer) / shards,
                                0.01 * static_cast<double>(whole_optimizer) / shards);
      else EXPECT_GT(state, whole_optimizer / shards);  // the share, and the two host staging chunks
    }
}

// Two-level checkpoints keep one host checkpoint per segment, and the segment's layer inputs
// (all but the first) on the device while its backward runs: K - 1 of [N, hidden].
TEST(MemoryPlan, TwoLevelCheckpointsStoreOnePerSegment) {
  const ModelConfig c = small_config(4);
  StepOptions one;
  one.checkpoint = true;
  one.offload_layers = -1;
  StepOptions two = one;
  two.checkpoint_segment = 2;
  const int64_t S = 512;
  const MemorySnapshot a = plan(c, S, one), b = plan(c, S, two);
  EXPECT_EQ(b.peak(Pool::HostCheckpoints) * 2, a.peak(Pool::HostCheckpoints));
  EXPECT_EQ(a.peak(Pool::Checkpoints), 0u);
  EXPECT_EQ(b.peak(Pool::Checkpoints), size_t(S) * c.hidden_size * 4);  // one float32 [S, hidden] input
}

// bfloat16 gradient buffers take half the float32 ones' bytes, plus one float32 scratch of the
// largest group of parameters: a layer's, lm_head's with the final norm, or the embedding's.
TEST(MemoryPlan, Bf16GradientBuffersHalveTheGradients) {
  const ModelConfig c = small_config(3);
  const int64_t D = c.hidden_size, F = c.intermediate_size, Q = c.num_attention_heads * c.head_dim,
                KV = c.num_key_value_heads * c.head_dim;
  const int64_t layer = 2 * D + Q * D + 2 * KV * D + D * Q + 3 * F * D, head = c.vocab_size * D + D;
  const size_t scratch = 4 * static_cast<size_t>(std::max(layer, head));
  StepOptions bf16;
  bf16.grad_dtype = DType::BF16;
  const size_t f32_bytes = plan(c, 256, {}).peak(Pool::Gradients), bf16_bytes = plan(c, 256, bf16).peak(Pool::Gradients);
  EXPECT_EQ(bf16_bytes, f32_bytes / 2 + scratch);
}

TEST(MemoryPlan, TiledLossKeepsLogitsFlat) {
  const ModelConfig c = small_config(1);
  StepOptions tiled;
  tiled.loss_tile_tokens = 64;
  const size_t t1 = measure(c, 256, tiled).peak(MemTag::Logits), t4 = measure(c, 1024, tiled).peak(MemTag::Logits);
  EXPECT_EQ(t1, t4);
  EXPECT_GT(t1, 0u);
  const size_t p1 = measure(c, 256, {}).peak(MemTag::Logits), p4 = measure(c, 1024, {}).peak(MemTag::Logits);
  EXPECT_NEAR(static_cast<double>(p4) / p1, 4.0, 0.05);
}

TEST(MemoryPlan, TiledMlpKeepsIntermediatesFlat) {
  const ModelConfig c = small_config(1);
  StepOptions tiled;
  tiled.mlp_tiles = 0;  // ceil(S / hidden) tiles of about `hidden` tokens
  const size_t t1 = measure(c, 256, tiled).peak(MemTag::MlpIntermediate),
               t4 = measure(c, 1024, tiled).peak(MemTag::MlpIntermediate);
  EXPECT_EQ(t1, t4);
  const size_t p1 = measure(c, 256, {}).peak(MemTag::MlpIntermediate),
               p4 = measure(c, 1024, {}).peak(MemTag::MlpIntermediate);
  EXPECT_NEAR(static_cast<double>(p4) / p1, 4.0, 0.05);
  EXPECT_LT(t4 * 3, p4);
}

TEST(MemoryPlan, OffloadedCheckpointsKeepDevicePeakFlatInLayers) {
  StepOptions off;
  off.checkpoint = true;
  off.offload_layers = -1;
  StepOptions on_device;
  on_device.checkpoint = true;
  auto activations = [](const MemorySnapshot& m) {  // device peak beyond weights and gradients
    return m.device.peak - m.peak(Pool::Weights) - m.peak(Pool::Gradients);
  };
  const MemorySnapshot o2 = measure(small_config(2), 256, off), o8 = measure(small_config(8), 256, off);
  EXPECT_EQ(activations(o2), activations(o8));
  EXPECT_EQ(o8.peak(Pool::Checkpoints), 0u);
  EXPECT_EQ(o8.host.peak, 4 * o2.host.peak);  // all 8 layers' inputs on the host
  const MemorySnapshot d2 = measure(small_config(2), 256, on_device), d8 = measure(small_config(8), 256, on_device);
  EXPECT_GT(activations(d8), activations(d2));
  EXPECT_EQ(d8.peak(Pool::Checkpoints), 4 * d2.peak(Pool::Checkpoints));
}

TEST(MemoryPlan, RefusesWhatCannotFitWithAdvice) {
  const ModelConfig c = small_config(4);
  PlanRequest r;
  r.config = c;
  r.seq_len = 2048;
  const MemorySnapshot m = plan_step_memory(r);
  try {
    check_plan_fits(r, m, m.device.peak - 1, size_t(1) << 40);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string msg = e.message();
    EXPECT_NE(msg.find("over by 1 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("It fits with --"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(check_plan_fits(r, m, m.device.peak, size_t(1) << 40));
}

TEST(MemoryPlan, TrainsRefusalNamesConfigKeysNotFlags) {
  // train takes no flags: its advice must be keys it accepts, and no --dry-run.
  PlanRequest r;
  r.config = small_config(4);
  r.seq_len = 2048;
  const MemorySnapshot m = plan_step_memory(r);
  try {
    check_plan_fits(r, m, m.device.peak - 1, size_t(1) << 40, OptionSpelling::TrainKeys);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string msg = e.message();
    EXPECT_NE(msg.find("It fits with memory.checkpoint=true (device peak"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'ulysses plan' with the same model, sequence and options"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("--"), std::string::npos) << msg;
  }
  // plan_misfit: the sentence alone, empty when it fits.
  EXPECT_EQ(plan_misfit(r, m, m.device.peak, m.host.peak), "");
  PlanRequest off = r;
  off.options.checkpoint = true;
  off.options.offload_layers = -1;
  const MemorySnapshot mo = plan_step_memory(off);
  ASSERT_GT(mo.host.peak, 0u);
  const std::string host_over = plan_misfit(off, mo, mo.device.peak, mo.host.peak - 1);
  EXPECT_NE(host_over.find("of host memory"), std::string::npos) << host_over;
  EXPECT_NE(host_over.find("over by 1 B"), std::string::npos) << host_over;
  EXPECT_EQ(host_over.find("dry-run"), std::string::npos) << host_over;
}

TEST(MemoryPlan, PlanForUnsplittableDegreeFails) {
  PlanRequest r;
  r.config = small_config(1);
  r.seq_len = 128;
  r.sp = 3;  // 4 heads
  EXPECT_THROW(plan_step_memory(r), Error);
}


// The longest sequence that fits a budget is exactly the one whose plan meets it: the budget
// set to the plan of 4096 tokens gives 4096 (plans grow with the length), one step less gives
// less, and a budget under the shortest sequence's plan gives 0.
// Ring attention's buffers are in the plan (its K/V blocks are communication buffers), and
// --max-seq only proposes lengths the zigzag layout can split.
TEST(MemoryPlan, RingPlansCountTheRingAndKeepZigzagLengths) {
  PlanRequest r;
  r.config = small_config(2);
  r.seq_len = 1024;
  r.sp = 4;
  const MemorySnapshot ulysses = plan_step_memory(r);
  r.ring = 4;
  const MemorySnapshot ring = plan_step_memory(r);
  r.zigzag = true;
  const MemorySnapshot zigzag = plan_step_memory(r);
  // Pure ring: no all-to-all buffers, but two K/V blocks and two fp32 dK/dV blocks of 256 tokens.
  const size_t kv_block = size_t(256) * r.config.num_key_value_heads * r.config.head_dim * 2 * 4;
  EXPECT_GE(ring.peak(MemTag::Communication), 2 * kv_block + 2 * kv_block);
  EXPECT_NE(ring.device.peak, ulysses.device.peak);
  EXPECT_EQ(zigzag.peak(MemTag::Communication), ring.peak(MemTag::Communication));
  EXPECT_LE(zigzag.device.peak, ring.device.peak);  // half-size block partials
  const int64_t n = max_sequence(r, zigzag.device.peak, std::numeric_limits<size_t>::max(), 12);
  EXPECT_GE(n, 1000);
  EXPECT_EQ(n % 24, 0) << n;  // lcm(12, lcm(sp 4, 2 x ring 4))
}

TEST(MemoryPlan, MaxSequenceIsTheLongestThatFits) {
  PlanRequest r;
  r.config = small_config(2);
  r.options.checkpoint = true;
  r.options.mlp_tiles = 0;
  r.seq_len = 4096;
  const MemorySnapshot at4k = plan_step_memory(r);
  r.seq_len = 5120;
  ASSERT_GT(plan_step_memory(r).device.peak, at4k.device.peak);
  const size_t no_limit = ~size_t{0};
  EXPECT_EQ(max_sequence(r, at4k.device.peak, no_limit), 4096);
  EXPECT_EQ(max_sequence(r, at4k.device.peak - 1, no_limit), 3072);
  r.seq_len = 1024;
  EXPECT_EQ(max_sequence(r, plan_step_memory(r).device.peak - 1, no_limit), 0);
  // The host budget binds offloaded checkpoints the same way.
  r.options.offload_layers = -1;
  r.seq_len = 2048;
  const MemorySnapshot off = plan_step_memory(r);
  ASSERT_GT(off.host.peak, 0u);
  EXPECT_EQ(max_sequence(r, no_limit, off.host.peak), 2048);
  // With sp ranks the length is a multiple of the degree too (1024 is one of 2).
  r.sp = 2;
  EXPECT_EQ(max_sequence(r, no_limit, off.host.peak) % 2, 0);
}

// The itemised peak is the peak: the allocations captured add up to the device peak to the
// byte, every device pool's bytes are among them, and the working pool's are labelled with
// the family they were made in and their shape.
TEST(MemoryPlan, ItemisedPeakAddsUpToThePeak) {
  PlanRequest r;
  r.config = small_config(2);
  r.seq_len = 1024;
  r.options.checkpoint = true;
  const MemorySnapshot m = plan_step_memory(r, /*itemize=*/true);
  ASSERT_FALSE(m.at_peak.empty());
  size_t total = 0, weights = 0, labelled = 0;
  for (const LiveAllocation& a : m.at_peak) {
    EXPECT_FALSE(pool_on_host(a.pool)) << a.label;
    total += a.bytes;
    if (a.pool == Pool::Weights) weights += a.bytes;
    if (a.pool == Pool::Working && a.label.find('[') != std::string::npos) ++labelled;
  }
  EXPECT_EQ(total, m.device.peak);
  EXPECT_EQ(weights, m.peak(Pool::Weights));
  EXPECT_GT(labelled, 0u);
  const std::string report = peak_items_report(m);
  EXPECT_NE(report.find("live at the device peak"), std::string::npos) << report;
  EXPECT_NE(report.find("weights"), std::string::npos) << report;
  EXPECT_EQ(plan_step_memory(r).device.peak, m.device.peak) << "itemising changes no figure";
}

}  // namespace
}  // namespace ulysses::test
