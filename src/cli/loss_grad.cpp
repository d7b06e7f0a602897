// ulysses loss-grad --model DIR --batch BATCH.safetensors --out OUT.safetensors [--lora-adapter DIR]
// The loss and every parameter's gradient for one batch, for checking the
// engine against PyTorch (README: "The loss-grad contract"); with a PEFT LoRA
// adapter, the base frozen and the adapters' gradients instead.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/log.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "train/memory_plan.h"
#include "train/rank_agreement.h"
#include "train/step.h"

namespace ulysses {
namespace {

// p's whole gradient as a host float32 tensor; collective over the sharding group when sharded.
Tensor whole_gradient(const ParameterSet& w, Backend& backend, const Parameter& p) {
  Tensor whole = Tensor::empty(p.shape, DType::F32);
  if (!w.grads_sharded()) {
    backend.copy(whole, p.grad);
    return whole;
  }
  const ElementRange r = w.grad_range(p);
  Tensor flat = whole.reshape({whole.numel()});
  if (r.hi > r.lo) {
    Tensor mine = flat.slice(r.lo, r.hi);
    backend.copy(mine, p.grad);
  }
  all_gather_blocks(*w.sharding().group, backend, flat);
  return whole;
}

// FNV-1a over the batch's ids, targets and positions: two ranks with other batch files differ here.
std::string tokens_hash(const TokenBatch& b) {
  uint64_t h = 1469598103934665603ull;
  for (const std::vector<int32_t>* v : {&b.ids, &b.targets, &b.positions})
    for (int32_t x : *v)
      for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<uint32_t>(x) >> (8 * k)) & 0xff)) * 1099511628211ull;
  return std::to_string(h);
}

}  // namespace

int run_loss_grad(int argc, char** argv, Communicator& world) {
  std::vector<OptionSpec> specs = {
      {"model", true, false, "Hugging Face model folder (config.json + safetensors)"},
      {"batch", true, false, "batch safetensors: input_ids [B,S], optional labels/shift_labels/position_ids"},
      {"out", true, false, "output safetensors: loss [1] and grad.<name> for every parameter"},
      {"lora-adapter", true, false,
       "PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors): the base frozen, the output "
       "holds the adapters' gradients (grad.<PEFT name>)"},
      {"help", false, false, "show this help"},
  };
  for (auto& s : engine_option_specs()) specs.push_back(s);
  Args args("loss-grad", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("loss-grad", specs)
              << "\nThe step has no optimizer: --zero 2 and 3 shard the gradients (and weights) during the step; the "
                 "gradients written are gathered whole at every stage.\n";
    return 0;
  }
  const std::string model_dir = args.require("model"), batch_path = args.require("batch"),
                    out_path = args.require("out");

  ModelFolder folder = ModelFolder::open(model_dir);
  const ModelConfig& config = folder.config();
  TokenBatch batch = load_batch_file(batch_path, config.vocab_size);
  // Before the first collective: every rank read the same options, model and batch (a rank with
  // another batch file died inside MPI with MPI_ERR_TRUNCATE).
  check_ranks_agree(world,
                    {{"options", std::vector<std::string>(argv + 1, argv + argc)},
                     {"model", {{"vocab_size", config.vocab_size}, {"hidden_size", config.hidden_size},
                                {"num_hidden_layers", config.num_hidden_layers},
                                {"num_attention_heads", config.num_attention_heads},
                                {"num_key_value_heads", config.num_key_value_heads}, {"head_dim", config.head_dim}}},
                     {"batch", {{"rows", batch.B}, {"length", batch.S}, {"tokens_hash", tokens_hash(batch)}}}},
                    "loss-grad");

  EngineConfig engine_config = engine_config_from(args, /*optimizer=*/false);
  const std::string adapter_dir = args.get("lora-adapter", "");
  if (!adapter_dir.empty()) engine_config.lora = read_peft_adapter_config(adapter_dir);
  Engine engine(engine_config, world);
  Backend* backend = &engine.backend();
  ProcessMesh& mesh = engine.mesh();
  check_ulysses_degree(config.num_attention_heads, config.num_key_value_heads, mesh.ulysses_size(), batch.S);
  const int zero = engine.config().zero;
  ULY_CHECK(zero < 2 || batch.B % mesh.dp_size() == 0,
            "loss-grad: --zero " << zero << " reduce-scatters each layer's gradients during the backward, so "
                                 << "every rank must hold as many rows: the batch's " << batch.B
                                 << " rows are not a multiple of dp = " << mesh.dp_size() << " (give --sp "
                                 << world.size() << ", or a batch of a multiple of " << mesh.dp_size() << " rows)");
  const Engine::Plan plan = engine.plan(config, batch.S);
  if (print_dry_run(args, engine, plan, batch.S)) return 0;
  engine.check_and_reserve(plan);
  ULY_INFO("loss-grad: " << mesh.describe() << ", backend " << backend->name() << ", batch " << batch.B << " x "
                         << batch.S << " tokens, " << batch.valid_targets() << " targets");

  LlamaWeights& weights = engine.load_weights(config, &folder, 0);
  if (!adapter_dir.empty()) engine.load_lora(adapter_dir, 0);
  ParameterSet& trained = engine.trained();
  LlamaModel& model = engine.model();
  backend->pools().reset_peaks();
  StepResult r = compute_loss_and_grads(model, weights, *backend, mesh, batch);
  if (args.has("memory-report") && world.rank() == 0)
    std::cout << "measured memory (rank 0):\n"
              << memory_report(MemorySnapshot::of(backend->pools()),
                               mesh.layout().padded_length(batch.S) / mesh.sp_size(), config.hidden_size);

  // Every gradient whole in host memory (gathered from the ranks' shards with ZeRO 2 and 3), so
  // that the output is the same at every stage.
  std::vector<Tensor> grads;
  for (const Parameter& p : trained.params()) grads.push_back(whole_gradient(trained, *backend, p));
  // Non-finite results are refused rather than written (every rank holds the same reduced values).
  std::vector<std::string> bad;
  for (size_t i = 0; i < grads.size(); ++i)
    if (!std::all_of(grads[i].data<float>(), grads[i].data<float>() + grads[i].numel(),
                     [](float v) { return std::isfinite(v); }))
      bad.push_back(trained.params()[i].name);
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
    for (size_t i = 0; i < grads.size(); ++i) out.emplace_back("grad." + trained.params()[i].name, grads[i]);
    write_safetensors(out_path, out, {{"valid_targets", std::to_string(r.valid_targets)}});
    std::cout << "loss " << r.loss << " over " << r.valid_targets << " targets; wrote " << out_path << "\n";
  }
  world.barrier();
  return 0;
}

}  // namespace ulysses
