// Checkpoint offload with copies that run late: on a backend whose asynchronous
// copies land only when waited for (make_cpu_backend(true)), the store must wait
// for every copy before its data is used, so results equal the plain path's.
#include "model/checkpoint_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/communicator.h"
#include "model/llama.h"
#include "train/step.h"

namespace ulysses::test {
namespace {

std::vector<float> values(const Tensor& t) {
  const float* p = static_cast<const float*>(t.raw());
  return std::vector<float>(p, p + t.numel());
}

TEST(CheckpointStore, EveryLayerComesBackIntactWithLaggingCopies) {
  auto backend = make_cpu_backend(/*lagging_transfers=*/true);
  const int64_t L = 5;
  for (int64_t offload : {int64_t{0}, int64_t{2}, int64_t{-1}}) {
    SCOPED_TRACE(testing::Message() << "offload " << offload);
    CheckpointStore store(*backend, L, offload);
    std::vector<std::vector<float>> expected;
    for (int64_t l = 0; l < L; ++l) {
      Tensor x = backend->empty({3, 4}, DType::F32);
      float* p = static_cast<float*>(x.raw());
      for (int i = 0; i < 12; ++i) p[i] = static_cast<float>(100 * l + i);
      store.put(l, x);
      expected.push_back(values(x));
    }
    store.finish_put();
    for (int64_t l = L - 1; l >= 0; --l) {
      const Tensor got = store.take(l);
      store.prefetch(l - 1);
      EXPECT_EQ(values(got), expected[l]) << "layer " << l;
    }
  }
}

TEST(CheckpointStore, TakeWithoutPutIsAnError) {
  auto backend = make_cpu_backend(true);
  CheckpointStore store(*backend, 2, -1);
  EXPECT_THROW(store.take(1), Error);
}

struct StepOutput {
  double loss;
  std::vector<std::vector<float>> grads;
};

StepOutput run_step(Backend& backend, const StepOptions& o) {
  ModelConfig c;
  ULY_CHECK(named_model_config("tiny", &c), "no tiny shape");
  c.num_hidden_layers = 4;
  auto world = make_self_communicator();
  ProcessMesh mesh(*world, 1);
  LlamaWeights w(c);
  w.init_random(backend, 5);
  LlamaModel model(w, backend, mesh.sp(), o);
  TokenBatch b;
  b.B = 1;
  b.S = 200;
  for (int64_t i = 0; i < b.S; ++i) {
    b.ids.push_back(static_cast<int32_t>((i * 11 + 2) % c.vocab_size));
    b.targets.push_back(static_cast<int32_t>((i * 3 + 1) % c.vocab_size));
    b.positions.push_back(static_cast<int32_t>(i % 70));
  }
  StepOutput out;
  out.loss = compute_loss_and_grads(model, w, backend, mesh, b).loss;
  for (const Parameter& p : w.params())
    if (p.grad.defined()) out.grads.push_back(values(p.grad));
  return out;
}

TEST(CheckpointStore, OffloadedStepWithLaggingCopiesEqualsThePlainStep) {
  auto plain_backend = make_cpu_backend();
  const StepOutput plain = run_step(*plain_backend, StepOptions{});
  ASSERT_TRUE(std::isfinite(plain.loss));
  for (int64_t offload : {int64_t{1}, int64_t{-1}}) {
    StepOptions o;
    o.checkpoint = true;
    o.offload_layers = offload;
    auto lagging = make_cpu_backend(true);
    const StepOutput got = run_step(*lagging, o);
    EXPECT_EQ(got.loss, plain.loss) << "offload " << offload;
    ASSERT_EQ(got.grads.size(), plain.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) EXPECT_EQ(got.grads[i], plain.grads[i]) << "parameter " << i;
  }
}

}  // namespace
}  // namespace ulysses::test
