// The CPU engine against the float64 Hugging Face reference on every committed
// fixture (foundation issue: loss rel ≤ 1e-5, every gradient rel ≤ 1e-4), and the
// per-layer hook of the backward.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "fixture_check.h"
#include "io/model_folder.h"
#include "test_util.h"

namespace ulysses::test {
namespace {

// The gqa fixture's model loaded on the CPU, and its batch.
struct GqaModel {
  ModelFolder folder = ModelFolder::open(fixtures_dir() + "/gqa/model");
  const ModelConfig& c = folder.config();
  TokenBatch batch = load_batch_file(fixtures_dir() + "/gqa/batch.safetensors", c.vocab_size);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Communicator> self = make_self_communicator();
  LlamaWeights weights{c};
  std::unique_ptr<LlamaModel> model;
  GqaModel() {
    weights.load(folder, *backend);
    model = std::make_unique<LlamaModel>(weights, *backend, *self);
  }
};

TEST(LossGrad, FixturesExist) { EXPECT_GE(fixture_cases().size(), 5u) << "fixtures/ lost its cases"; }

TEST(LossGrad, MatchesHuggingFaceFloat64) {
  auto world = make_self_communicator();
  for (const std::string& dir : fixture_cases()) {
    SCOPED_TRACE(dir);
    FixtureResult r = run_fixture(dir, *world, 1, StepOptions{});
    EXPECT_LE(r.loss_rel, 1e-5) << "loss " << r.loss << " vs reference " << r.ref_loss;
    EXPECT_LE(r.worst_grad_rel, 1e-4) << "worst gradient " << r.worst_grad;
    EXPECT_GT(r.compared, 0);
  }
}

// The hook that lets the step reduce a layer's gradients during the backward runs once per
// layer, in reverse order, when the layer's gradients are final: nothing later changes them.
TEST(LossGrad, LayerGradsDoneHookSeesFinalGradients) {
  GqaModel f;
  LlamaWeights& weights = f.weights;
  Backend* backend = f.backend.get();
  LlamaModel& model = *f.model;
  std::vector<int64_t> order;
  std::vector<std::vector<Tensor>> at_hook;
  model.forward_backward(shard_sequence(f.batch, 0, *f.self), 1.0, [&](int64_t l) {
    order.push_back(l);
    std::vector<Tensor> copies;
    for (Parameter* p : weights.layer(l).all()) {
      copies.push_back(backend->empty(p->grad.shape(), p->grad.dtype()));
      backend->copy(copies.back(), p->grad);
    }
    at_hook.push_back(std::move(copies));
  });
  ASSERT_EQ(static_cast<int64_t>(order.size()), f.c.num_hidden_layers);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t l = order[i];
    EXPECT_EQ(l, f.c.num_hidden_layers - 1 - static_cast<int64_t>(i));
    const auto params = weights.layer(l).all();
    for (size_t j = 0; j < params.size(); ++j) {
      EXPECT_EQ(rel_error(at_hook[i][j], params[j]->grad), 0.0) << params[j]->name << " changed after its hook";
      EXPECT_GT(backend->sum_squares(at_hook[i][j]), 0.0) << params[j]->name << " had no gradient at its hook";
    }
  }
}

// zero_grads defers the zeroing of whole float32 gradients: the backward's first contribution to
// each overwrites whatever its buffer holds (here NaN), a later one adds; settle_grads zeroes what
// no backward reached.
TEST(LossGrad, DeferredZeroGradsOverwriteTheBuffers) {
  GqaModel f;
  LlamaWeights& weights = f.weights;
  Backend* backend = f.backend.get();
  LlamaModel& model = *f.model;
  const SequenceShard shard = shard_sequence(f.batch, 0, *f.self);
  auto poison = [&] {
    for (Parameter& p : weights.params()) {
      std::vector<float> nan(static_cast<size_t>(p.grad.numel()), std::numeric_limits<float>::quiet_NaN());
      backend->copy(p.grad, Tensor::borrow(nan.data(), p.grad.shape(), DType::F32));
    }
  };
  auto snapshot = [&] {
    std::vector<Tensor> out;
    for (Parameter& p : weights.params()) out.push_back(p.grad.clone());
    return out;
  };
  weights.zero_grads(*backend);
  poison();
  model.forward_backward(shard, 1.0);
  const std::vector<Tensor> once = snapshot();
  model.forward_backward(shard, 1.0);  // no zero_grads: added
  for (size_t i = 0; i < once.size(); ++i) {
    const Parameter& p = weights.params()[i];
    EXPECT_GT(backend->sum_squares(once[i]), 0.0) << p.name;
    Tensor twice = once[i].clone();
    backend->axpy(twice, once[i], 1.0);
    EXPECT_LE(rel_error(p.grad, twice), 1e-6) << p.name << ": a second backward did not add to the first";
  }
  weights.zero_grads(*backend);
  poison();
  weights.settle_grads(*backend);
  for (Parameter& p : weights.params()) EXPECT_EQ(backend->sum_squares(p.grad), 0.0) << p.name;
}

}  // namespace
}  // namespace ulysses::test
