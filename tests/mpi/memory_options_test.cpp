// Every combination of the memory techniques (tiled MLP, tiled loss,
// checkpointing, checkpoint offload, kept attention outputs) gives the plain path's loss and gradients
// (loss ≤ 1e-6 relative, every gradient ≤ 1e-5) at every sequence-parallel
// degree the world allows, on the committed fixtures and on a 4K-token sequence.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "fixture_check.h"
#include "mpi/mpi_test_main.h"
#include "io/model_folder.h"
#include "test_util.h"
#include "train/memory_plan.h"
#include "train/step.h"

namespace ulysses::test {
namespace {

struct Outcome {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

Outcome run(LlamaWeights& w, Backend& be, const TokenBatch& batch, int sp, const StepOptions& o) {
  ProcessMesh mesh(world(), sp);
  w.zero_grads(be);
  LlamaModel model(w, be, mesh.sp(), o);
  Outcome out;
  out.loss = compute_loss_and_grads(model, w, be, mesh, batch).loss;
  for (const Parameter& p : w.params()) {
    std::vector<float> g(static_cast<size_t>(p.grad.numel()));
    convert_to_f32(g.data(), p.grad.raw(), p.grad.dtype(), g.size());
    out.grads.push_back(std::move(g));
  }
  return out;
}

std::vector<std::pair<std::string, StepOptions>> combinations(bool all) {
  std::vector<std::pair<std::string, StepOptions>> out;
  for (int mask = 1; mask < 32; ++mask) {
    if (!all && mask != 1 && mask != 2 && mask != 4 && mask != 8 && mask != 15 && mask != 31) continue;
    // keep-attention goes with checkpoints; with all, a few of its combinations
    if ((mask & 16) && mask != (4 | 16) && mask != (8 | 16) && mask != (13 | 16) && mask != 31) continue;
    StepOptions o;
    std::string name;
    if (mask & 1) { o.mlp_tiles = all ? 3 : 0; name += "tiled-mlp "; }
    if (mask & 2) { o.loss_tile_tokens = all ? 7 : 1000; name += "tiled-loss "; }
    if (mask & 4) { o.checkpoint = true; name += "checkpoint "; }
    if (mask & 8) { o.checkpoint = true; o.offload_layers = all ? 1 : -1; name += "offload "; }
    if (mask & 16) { o.keep_attention = true; name += "keep-attention "; }
    out.emplace_back(name, o);
  }
  return out;
}

bool fits(const ModelConfig& c, int sp) {
  return c.num_attention_heads % sp == 0 && (c.num_key_value_heads % sp == 0 || sp % c.num_key_value_heads == 0);
}

void expect_same(const Outcome& got, const Outcome& ref, const LlamaWeights& w) {
  EXPECT_LE(std::fabs(got.loss - ref.loss) / std::fabs(ref.loss), 1e-6) << got.loss << " vs " << ref.loss;
  for (size_t i = 0; i < ref.grads.size(); ++i)
    EXPECT_LE(rel_error(got.grads[i].data(), ref.grads[i].data(), ref.grads[i].size()), 1e-5) << w.params()[i].name;
}

// The tiny shape with 3 layers, 8 query and 4 kv heads of 8: head chunks of 2 and 4 exist.
ModelConfig chunkable_config() {
  ModelConfig c;
  ULY_CHECK(named_model_config("tiny", &c), "no tiny shape");
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 8;
  return c;
}

// One row of S tokens in two documents (the second from token `split`), every
// `ignore_every`-th target ignored.
TokenBatch two_documents(const ModelConfig& c, int64_t S, int64_t split, int64_t ignore_every) {
  TokenBatch batch;
  batch.B = 1;
  batch.S = S;
  for (int64_t i = 0; i < S; ++i) {
    batch.ids.push_back(static_cast<int32_t>((i * 11 + 3) % c.vocab_size));
    batch.targets.push_back(i % ignore_every == 0 ? -100 : static_cast<int32_t>((i * 5 + 2) % c.vocab_size));
    batch.positions.push_back(static_cast<int32_t>(i < split ? i : i - split));
  }
  return batch;
}

TEST(MemoryOptions, FixturesEveryCombinationEveryDegree) {
  auto be = make_cpu_backend();
  for (const std::string& dir : fixture_cases()) {
    ModelFolder folder = ModelFolder::open(dir + "/model");
    TokenBatch batch = load_batch_file(dir + "/batch.safetensors", folder.config().vocab_size);
    LlamaWeights w(folder.config());
    w.load(folder, *be);
    const Outcome plain = run(w, *be, batch, 1, {});
    for (int sp : ProcessMesh::valid_sp_values(world().size())) {
      if (!fits(folder.config(), sp)) continue;
      for (const auto& [name, o] : combinations(true)) {
        SCOPED_TRACE(dir + " sp=" + std::to_string(sp) + " " + name);
        expect_same(run(w, *be, batch, sp, o), plain, w);
      }
    }
  }
}

TEST(MemoryOptions, LongSequenceEveryDegree) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));
  c.num_hidden_layers = 1;
  auto be = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*be, 7);
  TokenBatch batch;
  batch.B = 1;
  batch.S = 4096;
  for (int64_t i = 0; i < batch.S; ++i) {
    batch.ids.push_back(static_cast<int32_t>((i * 31 + 7) % c.vocab_size));
    batch.targets.push_back(i % 97 == 0 ? -100 : static_cast<int32_t>((i * 17 + 3) % c.vocab_size));
    batch.positions.push_back(static_cast<int32_t>(i < 1500 ? i : (i - 1500) % 1234));  // uneven documents
  }
  const Outcome plain = run(w, *be, batch, 1, {});
  for (int sp : ProcessMesh::valid_sp_values(world().size())) {
    if (!fits(c, sp)) continue;
    if (sp > 1) {
      SCOPED_TRACE("plain sp=" + std::to_string(sp));
      expect_same(run(w, *be, batch, sp, {}), plain, w);
    }
    for (const auto& [name, o] : combinations(false)) {
      SCOPED_TRACE("sp=" + std::to_string(sp) + " " + name);
      expect_same(run(w, *be, batch, sp, o), plain, w);
    }
  }
}

// Two-level checkpoints (one input per segment of K layers, segments of unequal length when K
// does not divide the layers, the last one short), alone and with offload, tiled MLP and
// keep-attention, equal the plain step at every degree.
TEST(MemoryOptions, TwoLevelCheckpointsEveryDegree) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));
  c.num_hidden_layers = 5;
  auto be = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*be, 11);
  TokenBatch batch;
  batch.B = 1;
  batch.S = 384;
  for (int64_t i = 0; i < batch.S; ++i) {
    batch.ids.push_back(static_cast<int32_t>((i * 13 + 5) % c.vocab_size));
    batch.targets.push_back(static_cast<int32_t>((i * 7 + 1) % c.vocab_size));
    batch.positions.push_back(static_cast<int32_t>(i < 100 ? i : i - 100));  // two documents
  }
  const Outcome plain = run(w, *be, batch, 1, {});
  for (int sp : ProcessMesh::valid_sp_values(world().size())) {
    if (!fits(c, sp)) continue;
    for (int64_t every : {2, 3, 5}) {
      for (int variant = 0; variant < 3; ++variant) {
        StepOptions o;
        o.checkpoint = true;
        o.checkpoint_segment = every;
        if (variant == 1) o.offload_layers = -1, o.mlp_tiles = 0;
        if (variant == 2) o.offload_layers = 3, o.keep_attention = true;
        SCOPED_TRACE("sp=" + std::to_string(sp) + " every=" + std::to_string(every) + " variant " +
                     std::to_string(variant));
        expect_same(run(w, *be, batch, sp, o), plain, w);
      }
    }
  }
}

// Head-chunked attention (--head-chunks 1, 2, 4 wherever the heads allow at the degree) alone and
// with tiled MLP, tiled loss, offloaded checkpoints, two-level checkpoints and kept attention
// equals the plain step at every degree. 8 query and 4 kv heads, so that chunks of 2 and 4 exist.
TEST(MemoryOptions, HeadChunksEveryDegree) {
  const ModelConfig c = chunkable_config();
  auto be = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*be, 13);
  const TokenBatch batch = two_documents(c, 320, 120, 41);
  const Outcome plain = run(w, *be, batch, 1, {});
  int checked = 0;
  for (int sp : ProcessMesh::valid_sp_values(world().size())) {
    if (!fits(c, sp)) continue;
    for (int64_t chunks : {1, 2, 4}) {
      const int64_t h = c.num_attention_heads / chunks, hkv = c.num_key_value_heads / chunks;
      if (h % sp != 0 || (hkv % sp != 0 && sp % hkv != 0)) continue;
      for (int variant = 0; variant < 5; ++variant) {
        StepOptions o;
        o.head_chunks = chunks;
        if (variant == 1) o.mlp_tiles = 3, o.loss_tile_tokens = 50;
        if (variant == 2) o.checkpoint = true, o.offload_layers = -1, o.mlp_tiles = 0;
        if (variant == 3) o.checkpoint = true, o.checkpoint_segment = 2, o.offload_layers = 1, o.loss_tile_tokens = 64;
        if (variant == 4) o.checkpoint = true, o.keep_attention = true, o.checkpoint_segment = 2;
        SCOPED_TRACE("sp=" + std::to_string(sp) + " head chunks " + std::to_string(chunks) + " variant " +
                     std::to_string(variant));
        expect_same(run(w, *be, batch, sp, o), plain, w);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// bfloat16 gradient buffers (--grad-dtype bf16) with the memory options, at every degree: the
// loss is the float32 buffers' run's; each gradient is that run's rounded to bfloat16 once, bit
// for bit where one rank holds the sequence (a group's contributions are summed in float32 in
// the same order), and within two roundings where several do (each rank's share is rounded,
// then summed across ranks in float32 and rounded again).
TEST(MemoryOptions, Bf16GradientBuffersEveryDegree) {
  const ModelConfig c = chunkable_config();
  auto be = make_cpu_backend();
  LlamaWeights w32(c), w16(c, DType::BF16);
  w32.init_random(*be, 17);
  w16.init_random(*be, 17);
  const TokenBatch batch = two_documents(c, 256, 90, 37);
  int checked = 0;
  for (int sp : ProcessMesh::valid_sp_values(world().size())) {
    if (!fits(c, sp)) continue;
    for (int variant = 0; variant < 4; ++variant) {
      StepOptions o;
      if (variant == 1) o.mlp_tiles = 3, o.loss_tile_tokens = 50;
      if (variant == 2) o.checkpoint = true, o.offload_layers = -1, o.checkpoint_segment = 2, o.mlp_tiles = 0;
      if (variant == 3 && c.num_attention_heads / 2 % sp == 0) o.head_chunks = 2, o.checkpoint = true, o.keep_attention = true;
      SCOPED_TRACE("sp=" + std::to_string(sp) + " variant " + std::to_string(variant));
      const Outcome f32 = run(w32, *be, batch, sp, o);
      StepOptions o16 = o;
      o16.grad_dtype = DType::BF16;
      const Outcome bf16 = run(w16, *be, batch, sp, o16);
      EXPECT_EQ(bf16.loss, f32.loss);
      for (size_t i = 0; i < f32.grads.size(); ++i) {
        if (sp == 1) {
          int64_t differing = 0;
          for (size_t j = 0; j < f32.grads[i].size(); ++j)
            differing += bf16_to_float(float_to_bf16(f32.grads[i][j])) != bf16.grads[i][j];
          EXPECT_EQ(differing, 0) << w16.params()[i].name << ": not the float32 gradient rounded once";
        } else {
          EXPECT_LE(rel_error(bf16.grads[i].data(), f32.grads[i].data(), f32.grads[i].size()), 0x1p-8)
              << w16.params()[i].name;
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  // Options and weights must agree on the buffers' dtype.
  ProcessMesh mesh(world(), 1);
  StepOptions o16;
  o16.grad_dtype = DType::BF16;
  EXPECT_THROW({ LlamaModel refused(w32, *be, mesh.sp(), o16); }, Error);
}

// The plan of a head-chunked step at a sequence-parallel degree is what each rank measures (the
// planner builds the attention for one chunk of heads, as the model does).
TEST(MemoryOptions, HeadChunkPlansAreMeasuredAtEveryDegree) {
  const ModelConfig c = chunkable_config();
  const TokenBatch batch = two_documents(c, 320, 160, 41);
  int64_t checked = 0, degrees = 0;
  for (int sp : ProcessMesh::valid_sp_values(world().size())) {
    if (sp == 1 || !fits(c, sp) || (c.num_attention_heads / 2) % sp != 0) continue;
    ++degrees;
    StepOptions o;
    o.head_chunks = 2;
    o.checkpoint = true;
    PlanRequest r;
    r.config = c;
    r.seq_len = batch.S;
    r.sp = sp;
    r.options = o;
    r.documents = 2;
    const MemorySnapshot plan = plan_step_memory(r);
    auto be = make_cpu_backend();
    MemorySnapshot measured;
    bool holds_row = false;  // the batch's one row goes to data-parallel group 0
    {
      LlamaWeights w(c);
      w.init_random(*be, 3);
      ProcessMesh mesh(world(), sp);
      holds_row = mesh.dp_rank() == 0;
      LlamaModel model(w, *be, mesh.sp(), o);
      be->pools().reset_peaks();
      compute_loss_and_grads(model, w, *be, mesh, batch);
      measured = MemorySnapshot::of(be->pools());
    }
    if (!holds_row) continue;
    SCOPED_TRACE("sp=" + std::to_string(sp));
    EXPECT_EQ(plan.device.peak, measured.device.peak);
    EXPECT_EQ(plan.peak(Pool::Working), measured.peak(Pool::Working));
    ++checked;
  }
  if (degrees > 0) EXPECT_GT(sum_over_ranks(checked), 0);  // the ranks holding the row compared
}

// A chunk count the heads cannot take is refused, naming the rule.
TEST(MemoryOptions, HeadChunksThatSplitKvGroupsAreRefused) {
  ModelConfig c;
  ASSERT_TRUE(named_model_config("tiny", &c));  // 4 query heads, 2 kv heads
  auto be = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*be, 1);
  ProcessMesh mesh(world(), 1);
  StepOptions o;
  o.head_chunks = 4;  // Hkv / 4 is not whole
  try {
    LlamaModel model(w, *be, mesh.sp(), o);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("whole KV groups"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ulysses::test

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
