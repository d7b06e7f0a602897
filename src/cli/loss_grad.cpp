// ulysses loss-grad --model DIR --batch BATCH.safetensors --out OUT.safetensors
// The loss and every parameter's gradient for one batch, for checking the
// engine against PyTorch (README: "The loss-grad contract").
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/log.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "parallel/step_communicator.h"
#include "train/memory_plan.h"
#include "train/step.h"

namespace ulysses {

int run_loss_grad(int argc, char** argv, Communicator& world) {
  std::vector<OptionSpec> specs = {
      {"model", true, false, "Hugging Face model folder (config.json + safetensors)"},
      {"batch", true, false, "batch safetensors: input_ids [B,S], optional labels/shift_labels/position_ids"},
      {"out", true, false, "output safetensors: loss [1] and grad.<name> for every parameter"},
      {"help", false, false, "show this help"},
  };
  for (auto& s : engine_option_specs()) specs.push_back(s);
  Args args("loss-grad", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("loss-grad", specs);
    return 0;
  }
  const std::string model_dir = args.require("model"), batch_path = args.require("batch"),
                    out_path = args.require("out");
  ULY_CHECK(args.positional().empty(), "loss-grad: unexpected argument '" << args.positional()[0] << "'");

  ModelFolder folder = ModelFolder::open(model_dir);
  const ModelConfig& config = folder.config();
  TokenBatch batch = load_batch_file(batch_path, config.vocab_size);

  std::unique_ptr<Backend> backend = backend_from(args, world.rank());
  StepCommunicator comm(world, *backend, args.get("comm", "mpi"));
  ProcessMesh mesh(comm.get(), sp_degree_from(args), ring_degree_from(args), zigzag_from(args));
  check_ulysses_degree(config.num_attention_heads, config.num_key_value_heads, mesh.ulysses_size(), batch.S);
  StepOptions options = step_options_from(args);
  if (plan_and_check_memory(args, *backend, config, batch.S, mesh.sp_size(), options, OptimizerChoice{},
                            mesh.ring_size(), mesh.zigzag()))
    return 0;
  ULY_INFO("loss-grad: " << mesh.describe() << ", backend " << backend->name() << ", batch " << batch.B << " x "
                         << batch.S << " tokens, " << batch.valid_targets() << " targets");

  LlamaWeights weights(config, options.grad_dtype);
  weights.load(folder, *backend);
  LlamaModel model(weights, *backend, mesh, options);
  backend->pools().reset_peaks();
  StepResult r = compute_loss_and_grads(model, weights, *backend, mesh, batch);
  if (args.has("memory-report") && world.rank() == 0)
    std::cout << "measured memory (rank 0):\n"
              << memory_report(MemorySnapshot::of(backend->pools()),
                               mesh.layout().padded_length(batch.S) / mesh.sp_size(), config.hidden_size);

  // Non-finite results are refused rather than written (every rank holds the same reduced values).
  std::vector<std::string> bad;
  for (const Parameter& p : weights.params())
    if (!std::isfinite(backend->sum_squares(p.grad))) bad.push_back(p.name);
  ULY_CHECK(std::isfinite(r.loss) && bad.empty(),
            "loss-grad: the loss is " << (std::isnan(r.loss) ? std::string("NaN") : std::to_string(r.loss)) << " and " << bad.size() << " gradients hold NaN or infinity"
                                      << (bad.empty() ? std::string() : " (the first: " + bad.front() + ")")
                                      << ": the weights in " << args.get("model", "") << " or the batch give non-finite "
                                      << "values; nothing was written to " << out_path);

  if (world.rank() == 0) {
    std::vector<std::pair<std::string, Tensor>> out;
    Tensor loss = Tensor::empty({1}, DType::F32);
    loss.data<float>()[0] = static_cast<float>(r.loss);
    out.emplace_back("loss", loss);
    for (const Parameter& p : weights.params()) {
      Tensor host = Tensor::empty(p.shape, DType::F32);
      backend->copy(host, p.grad);
      out.emplace_back("grad." + p.name, host);
    }
    write_safetensors(out_path, out, {{"valid_targets", std::to_string(r.valid_targets)}});
    std::cout << "loss " << r.loss << " over " << r.valid_targets << " targets; wrote " << out_path << "\n";
  }
  world.barrier();
  return 0;
}

}  // namespace ulysses
