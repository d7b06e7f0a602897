// Head-chunked attention (--head-chunks) on the CUDA backend: in fp32 the loss and every gradient
// equal the unchunked step's (loss ≤ 1e-6 relative, gradients ≤ 1e-5), alone and with checkpoints,
// offload and two-level segments; in bf16 within the bf16 criterion (2e-2); and the measured
// pools equal the plan byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"
#include "train/memory_plan.h"
#include "train/step.h"

namespace ulysses {
namespace {

ModelConfig chunk_config() {
  ModelConfig c;
  ULY_CHECK(named_model_config("tiny", &c), "no tiny shape");
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 16;  // a head size our kernels take as it is
  return c;
}

TokenBatch chunk_batch(const ModelConfig& c, int64_t S) {
  TokenBatch b;
  b.B = 1;
  b.S = S;
  for (int64_t i = 0; i < S; ++i) {
    b.ids.push_back(static_cast<int32_t>((i * 11 + 3) % c.vocab_size));
    b.targets.push_back(i % 41 == 0 ? -100 : static_cast<int32_t>((i * 5 + 2) % c.vocab_size));
    b.positions.push_back(static_cast<int32_t>(i < S / 2 ? i : i - S / 2));  // two equal documents (as the plan packs them)
  }
  return b;
}

struct Outcome {
  double loss = 0;
  std::vector<Tensor> grads;  // host float32
  MemorySnapshot pools;
};

Outcome run(Backend& be, LlamaWeights& w, const TokenBatch& batch, const StepOptions& o) {
  auto world = make_self_communicator();
  ProcessMesh mesh(*world, 1);
  w.zero_grads(be);
  LlamaModel model(w, be, mesh.sp(), o);
  be.pools().reset_peaks();
  Outcome out;
  out.loss = compute_loss_and_grads(model, w, be, mesh, batch).loss;
  be.synchronize();
  out.pools = MemorySnapshot::of(be.pools());
  for (const Parameter& p : w.params()) {
    Tensor h = Tensor::empty(p.shape, DType::F32);
    be.copy(h, p.grad);
    out.grads.push_back(h);
  }
  return out;
}

class CudaHeadChunks : public cuda_test::CudaTest {};

void check_equal_to_plain(DType dtype, double loss_tol, double grad_tol) {
  const ModelConfig c = chunk_config();
  auto be = make_cuda_backend(0, dtype);
  LlamaWeights w(c);
  w.init_random(*be, 5);
  const TokenBatch batch = chunk_batch(c, 1000);
  const Outcome plain = run(*be, w, batch, {});
  for (int64_t chunks : {2, 4}) {
    for (int variant = 0; variant < 4; ++variant) {
      StepOptions o;
      o.head_chunks = chunks;
      if (variant == 1) o.mlp_tiles = 0, o.loss_tile_tokens = 256;
      if (variant == 2) o.checkpoint = true, o.offload_layers = -1, o.mlp_tiles = 0;
      if (variant == 3) o.checkpoint = true, o.checkpoint_segment = 2, o.keep_attention = true;
      SCOPED_TRACE("head chunks " + std::to_string(chunks) + " variant " + std::to_string(variant));
      const Outcome got = run(*be, w, batch, o);
      EXPECT_LE(std::fabs(got.loss - plain.loss) / std::fabs(plain.loss), loss_tol);
      for (size_t i = 0; i < plain.grads.size(); ++i)
        EXPECT_LE(test::rel_error(got.grads[i], plain.grads[i]), grad_tol) << w.params()[i].name;
    }
  }
}

TEST_F(CudaHeadChunks, Fp32EqualsUnchunkedStep) { check_equal_to_plain(DType::F32, 1e-6, 1e-5); }

TEST_F(CudaHeadChunks, Bf16WithinTheBf16Criterion) { check_equal_to_plain(DType::BF16, 2e-2, 2e-2); }

TEST_F(CudaHeadChunks, MeasuredPoolsEqualThePlan) {
  const ModelConfig c = chunk_config();
  auto be = make_cuda_backend(0, DType::BF16);
  LlamaWeights w(c);
  w.init_random(*be, 5);
  const TokenBatch batch = chunk_batch(c, 1000);
  StepOptions o;
  o.head_chunks = 4;
  o.checkpoint = true;
  o.offload_layers = -1;
  o.checkpoint_segment = 2;
  o.mlp_tiles = 0;
  o.loss_tile_tokens = 256;
  const Outcome got = run(*be, w, batch, o);
  PlanRequest r;
  r.config = c;
  r.seq_len = 1000;
  r.options = o;
  r.act_dtype = DType::BF16;
  r.device = Device::CUDA;
  r.documents = 2;
  r.runtime = be.get();
  const MemorySnapshot p = plan_step_memory(r);
  // The weights and gradients were allocated before the run; the plan counts them the same way.
  EXPECT_EQ(p.device.peak, got.pools.device.peak);
  EXPECT_EQ(p.host.peak, got.pools.host.peak);
}

}  // namespace
}  // namespace ulysses
