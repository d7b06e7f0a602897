// LoRA's pieces on one rank: the PEFT config read back as written, rsLoRA's scaling, PEFT's
// initialisation (B zero: the step starts from the base model's loss), a frozen base that gets no
// gradient buffers, and the planner, which counts the adapters' gradients and AdamW state instead
// of the base's and matches the measured step. The gradients themselves are checked against
// transformers + PEFT in tests/mpi/lora_fixtures_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/communicator.h"
#include "expect_error.h"
#include "io/atomic_file.h"
#include "io/peft_adapter.h"
#include "model/llama.h"
#include "model/lora_weights.h"
#include "test_util.h"
#include "train/flops.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace ulysses::test {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  ULY_CHECK(named_model_config("tiny", &c), "no tiny shape");
  c.num_hidden_layers = 2;
  return c;
}

LoraConfig some_lora() {
  LoraConfig l;
  l.r = 4;
  l.alpha = 8;
  l.targets = {true, false, true, true, false, false, true};  // q, v, o, down
  l.base_model = "models/base";
  return l;
}

TEST(Lora, PeftConfigReadsBackAsWritten) {
  const std::string dir = temp_dir("lora_cfg");
  LoraConfig l = some_lora();
  l.use_rslora = true;
  l.alpha = 2.5;
  write_file_atomic(dir + "/adapter_config.json", peft_adapter_config_json(l));
  EXPECT_EQ(read_peft_adapter_config(dir), l);
  EXPECT_NEAR(l.scaling(), 2.5 / 2.0, 1e-15);  // rsLoRA: alpha / sqrt(r)
  l.use_rslora = false;
  EXPECT_NEAR(l.scaling(), 2.5 / 4.0, 1e-15);
  EXPECT_EQ(l.target_names(), (std::vector<std::string>{"q_proj", "v_proj", "o_proj", "down_proj"}));
}

TEST(Lora, AdapterNamesAndShapesArePefts) {
  const ModelConfig c = tiny();
  LoraWeights w(c, some_lora());
  ASSERT_EQ(w.params().size(), 2u * 4u * 2u);
  EXPECT_EQ(w.params()[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(w.params()[0].shape, (Shape{4, c.hidden_size}));
  const LoraAdapter* down = w.adapter(1, LoraTarget::Down);
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->b->name, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(down->a->shape, (Shape{4, c.intermediate_size}));
  EXPECT_EQ(down->b->shape, (Shape{c.hidden_size, 4}));
  EXPECT_EQ(w.adapter(0, LoraTarget::K), nullptr);
  EXPECT_EQ(w.layer_params(1).size(), 8u);
}

TEST(Lora, FreshAdaptersStartFromTheBaseAndTrainAlone) {
  const ModelConfig c = tiny();
  auto world = make_self_communicator();
  ProcessMesh mesh(*world, 1);
  auto backend = make_cpu_backend();
  const TokenBatch b = patterned_batch(96, c.vocab_size, 40);
  double base_loss = 0;
  {
    LlamaWeights w(c);
    w.init_random(*backend, 3);
    LlamaModel model(w, *backend, mesh.sp());
    base_loss = compute_loss_and_grads(model, w, *backend, mesh, b).loss;
  }
  LlamaWeights w(c);
  w.freeze();
  w.init_random(*backend, 3);
  LoraWeights lora(c, some_lora());
  lora.init(*backend, 5);
  LlamaModel model(w, *backend, mesh.sp());
  model.attach_lora(lora);
  lora.zero_grads(*backend);
  const StepResult r = compute_loss_and_grads(model, w, *backend, mesh, b);
  EXPECT_EQ(r.loss, base_loss) << "B = 0: the adapters add nothing yet";
  for (const Parameter& p : w.params()) EXPECT_FALSE(p.grad.defined()) << p.name << ": the base keeps no gradient";
  const LoraAdapter* q = lora.adapter(0, LoraTarget::Q);
  // B's gradient is nonzero (it is what moves first), A's is zero while B is.
  EXPECT_GT(backend->sum_squares(q->b->grad), 0.0);
  EXPECT_EQ(backend->sum_squares(q->a->grad), 0.0);
  EXPECT_EQ(backend->sum_squares(q->b->value), 0.0);
  const double bound = 1.0 / std::sqrt(static_cast<double>(c.hidden_size));
  const float* a = q->a->value.data<float>();
  for (int64_t i = 0; i < q->a->value.numel(); ++i) ASSERT_LE(std::fabs(a[i]), bound);
}

TEST(Lora, ABaseThatIsNotFrozenIsRefused) {
  const ModelConfig c = tiny();
  auto world = make_self_communicator();
  auto backend = make_cpu_backend();
  LlamaWeights w(c);
  w.init_random(*backend, 3);
  LoraWeights lora(c, some_lora());
  LlamaModel model(w, *backend, *world);
  EXPECT_ERROR(model.attach_lora(lora), "the base weights must be frozen");
}

TEST(Lora, PlanCountsTheAdaptersInsteadOfTheBase) {
  const ModelConfig c = tiny();
  PlanRequest req;
  req.config = c;
  req.seq_len = 128;
  req.optimizer = true;
  const MemorySnapshot full = plan_step_memory(req);
  req.lora = some_lora();
  const MemorySnapshot lora = plan_step_memory(req);
  const LoraWeights shapes(c, req.lora);
  const size_t adapter_bytes = shapes.num_elements() * 4;
  EXPECT_EQ(lora.peak(Pool::Optimizer), 3 * adapter_bytes) << "master, m and v of the adapters alone";
  EXPECT_LT(lora.peak(Pool::Gradients), full.peak(Pool::Gradients) / 4);
  EXPECT_EQ(lora.peak(Pool::Weights), full.peak(Pool::Weights) + adapter_bytes);

  // The plan is the measured step's.
  auto world = make_self_communicator();
  ProcessMesh mesh(*world, 1);
  auto backend = make_cpu_backend();
  MemorySnapshot measured;
  {
    LlamaWeights w(c);
    w.freeze();
    w.init_random(*backend, 1);
    LoraWeights l(c, req.lora);
    l.init(*backend, 1);
    AdamW opt(l, *backend, OptimizerConfig{});
    LlamaModel model(w, *backend, mesh.sp());
    model.attach_lora(l);
    backend->pools().reset_peaks();
    TokenBatch b = patterned_batch(128, c.vocab_size, 128);
    compute_loss_and_grads(model, w, *backend, mesh, b);
    measured = MemorySnapshot::of(backend->pools());
  }
  EXPECT_EQ(measured.device.peak, lora.device.peak);
}

// The base's weight-gradient GEMMs (2 N_dense per token) are not run under LoRA; the adapters'
// three GEMMs per matmul are (6 N_lora, 8 with recompute).
TEST(Lora, StepFlopsLeaveOutTheBasesWeightGradients) {
  const ModelConfig c = tiny();
  const double n = dense_matmul_params(c), p = 1000, T = 256;
  for (bool recompute : {false, true}) {
    const StepFlops full = step_flops(c, {256}, recompute), lora = step_flops(c, {256}, recompute, p);
    EXPECT_DOUBLE_EQ(full.alst - lora.alst, (2 * n - (recompute ? 8 : 6) * p) * T);
    EXPECT_DOUBLE_EQ(full.useful - lora.useful, (2 * n - 6 * p) * T);
  }
}

}  // namespace
}  // namespace ulysses::test
