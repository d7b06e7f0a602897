#include "fixture_check.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/model_folder.h"
#include "io/peft_adapter.h"
#include "model/lora_weights.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/step.h"

namespace ulysses::test {

namespace {

std::vector<std::string> case_dirs(const std::string& root) {
  std::vector<std::string> out;
  namespace fs = std::filesystem;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "reference.safetensors")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The step over the case's batch; `trained` (the weights, or the adapters) compared with the reference.
FixtureResult run_case(const std::string& dir, Communicator& world, int sp, const StepOptions& options, int ring,
                       bool zigzag, const std::string& adapter_dir) {
  ModelFolder folder = ModelFolder::open(dir + "/model");
  TokenBatch batch = load_batch_file(dir + "/batch.safetensors", folder.config().vocab_size);
  ProcessMesh mesh(world, sp, ring, zigzag);
  const ModelConfig& c = folder.config();
  check_ulysses_degree(c.num_attention_heads, c.num_key_value_heads, mesh.ulysses_size(), batch.S);
  auto backend = make_cpu_backend();
  LlamaWeights weights(c);
  std::unique_ptr<LoraWeights> lora;
  if (!adapter_dir.empty()) {
    weights.freeze();
    lora = std::make_unique<LoraWeights>(c, read_peft_adapter_config(adapter_dir));
  }
  weights.load(folder, *backend);
  if (lora) lora->load(adapter_dir, *backend);
  LlamaModel model(weights, *backend, mesh, options);  // the attention built for a chunk of heads (--head-chunks)
  if (lora) model.attach_lora(*lora);
  ParameterSet& trained = lora ? static_cast<ParameterSet&>(*lora) : weights;
  trained.zero_grads(*backend);
  StepResult r = compute_loss_and_grads(model, weights, *backend, mesh, batch);

  SafetensorsFile ref = SafetensorsFile::open(dir + "/reference.safetensors");
  FixtureResult out;
  out.loss = r.loss;
  out.ref_loss = ref.read_f64("loss").data<double>()[0];
  out.loss_rel = std::fabs(out.loss - out.ref_loss) / std::fabs(out.ref_loss);
  for (const Parameter& p : trained.params()) {
    const std::string name = "grad." + p.name;
    ULY_CHECK(ref.contains(name), dir << ": reference has no " << name);
    const double e = rel_error(p.grad, ref.read_f64(name));
    if (out.compared == 0 || !(e <= out.worst_grad_rel)) {  // NaN counts as worst
      out.worst_grad_rel = e;
      out.worst_grad = p.name;
    }
    ++out.compared;
  }
  int ref_grads = 0;
  for (const auto& e : ref.entries()) ref_grads += e.name.rfind("grad.", 0) == 0;
  ULY_CHECK(ref_grads == out.compared,
            dir << ": reference has " << ref_grads << " gradients, the engine " << out.compared);
  return out;
}

}  // namespace

std::vector<std::string> fixture_cases() { return case_dirs(fixtures_dir()); }

std::vector<std::string> lora_fixture_cases() { return case_dirs(fixtures_dir() + "/lora"); }

FixtureResult run_fixture(const std::string& dir, Communicator& world, int sp, const StepOptions& options, int ring,
                          bool zigzag) {
  return run_case(dir, world, sp, options, ring, zigzag, "");
}

FixtureResult run_lora_fixture(const std::string& dir, Communicator& world, int sp, const StepOptions& options,
                               int ring, bool zigzag) {
  return run_case(dir, world, sp, options, ring, zigzag, dir + "/adapter");
}

}  // namespace ulysses::test
