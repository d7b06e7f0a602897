#include "fixture_check.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/model_folder.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/step.h"

namespace ulysses::test {

std::vector<std::string> fixture_cases() {
  std::vector<std::string> out;
  namespace fs = std::filesystem;
  if (!fs::exists(fixtures_dir())) return out;
  for (const auto& e : fs::directory_iterator(fixtures_dir()))
    if (e.is_directory() && fs::exists(e.path() / "reference.safetensors")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

FixtureResult run_fixture(const std::string& dir, Communicator& world, int sp, const StepOptions& options, int ring,
                          bool zigzag) {
  ModelFolder folder = ModelFolder::open(dir + "/model");
  TokenBatch batch = load_batch_file(dir + "/batch.safetensors", folder.config().vocab_size);
  ProcessMesh mesh(world, sp, ring, zigzag);
  const ModelConfig& c = folder.config();
  check_ulysses_degree(c.num_attention_heads, c.num_key_value_heads, mesh.ulysses_size(), batch.S);
  auto backend = make_cpu_backend();
  LlamaWeights weights(c);
  weights.load(folder, *backend);
  LlamaModel model(weights, *backend,
                   make_sequence_attention(*backend, mesh, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                           c.attention_scale()),
                   options);
  StepResult r = compute_loss_and_grads(model, weights, *backend, mesh, batch);

  SafetensorsFile ref = SafetensorsFile::open(dir + "/reference.safetensors");
  FixtureResult out;
  out.loss = r.loss;
  out.ref_loss = ref.read_f64("loss").data<double>()[0];
  out.loss_rel = std::fabs(out.loss - out.ref_loss) / std::fabs(out.ref_loss);
  for (const Parameter& p : weights.params()) {
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

}  // namespace ulysses::test
