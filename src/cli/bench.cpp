// ulysses bench --shape NAME | --model DIR --seq S [--layers N] [--no-optimizer] [options]
// Times full training steps (forward, backward and, unless --no-optimizer, the
// AdamW update) on random weights and tokens, and reports step time, tokens/s,
// ALST-formula TFLOPS per GPU, MFU and peak memory (DESIGN.md §5), as a table
// and as JSON. --profile adds where the time of the timed steps goes, per op
// family (core/step_profile.h).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include "backend/profile_scope.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/log.h"
#include "core/step_profile.h"
#include "io/atomic_file.h"
#include "io/model_folder.h"
#include "train/flops.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/rank_agreement.h"
#include "train/step.h"
#include "train/step_time.h"

namespace ulysses {

namespace {

std::vector<OptionSpec> bench_specs() {
  std::vector<OptionSpec> specs = {
      {"model", true, false, "Hugging Face model folder (its config; weights are random)"},
      {"shape", true, false, "a named shape: llama-3.1-8b, llama-3.2-1b/3b, qwen2.5-7b/1.5b, qwen3-8b, mistral-7b, tiny"},
      {"layers", true, false, "use only this many layers (a shorter model of the same width)"},
      {"seq", true, false, "sequence length in tokens (default 32768)"},
      {"batch", true, false, "sequences per step (default 1)"},
      {"steps", true, false, "timed steps (default 3), after --warmup steps (default 1)"},
      {"warmup", true, false, "untimed steps first (default 1)"},
      {"no-optimizer", false, false, "forward + backward only (no AdamW state, no update)"},
      {"json", true, false, "also write the result as JSON to this file"},
      {"find-max-seq", false, false, "find the longest sequence the plan fits (as plan --max-seq, over the options "
                                     "given and a ladder of others), then confirm it by measured steps at that length "
                                     "with the options chosen"},
      {"host-mem-limit", true, false, "host memory budget in GiB for --find-max-seq (default: what this host has)"},
      {"profile", false, false, "time each op family of the timed steps (a table, and \"profile\" in the JSON)"},
      {"rates-out", true, false, "with --profile: add this step's measured rate per op family (its seconds over the "
                                 "work the planner counts for it) to the rates table FILE, for plan --time "
                                 "(docs/step-time-model.md); one sequence (--batch 1)"},
      {"help", false, false, "show this help"},
  };
  for (auto& s : engine_option_specs())
    if (s.name != "memory-report") specs.push_back(s);
  for (auto& s : lora_option_specs()) specs.push_back(s);
  return specs;
}

// B rows of S tokens, the same ids every run; positions 0..S-1, targets shifted.
TokenBatch synthetic_batch(int64_t B, int64_t S, int64_t vocab) {
  TokenBatch batch;
  batch.B = B;
  batch.S = S;
  for (int64_t i = 0; i < B * S; ++i) {
    batch.ids.push_back(static_cast<int32_t>((i * 2654435761ull) % static_cast<uint64_t>(vocab)));
    batch.positions.push_back(static_cast<int32_t>(i % S));
  }
  batch.targets = shift_labels(batch.ids, batch.positions, B, S);
  return batch;
}

// The times of `steps` steps after `warmup` untimed ones (each step: zero the gradients, forward,
// backward, the update), every rank in step; with `profile`, the timed steps' op families.
// first_step: the first step's time, warm-up or not (it pays the plans the warm ones reuse).
std::vector<double> time_steps(Engine& engine, AdamW* optimizer, const TokenBatch& batch, int64_t warmup,
                               int64_t steps, StepProfile* profile, double& first_step) {
  Backend& backend = engine.backend();
  LlamaWeights& weights = engine.weights();
  ParameterSet& trained = engine.trained();  // the weights, or with LoRA the adapters
  std::vector<double> times;
  backend.pools().reset_peaks();
  for (int64_t i = 0; i < warmup + steps; ++i) {
    if (profile && i == warmup) backend.enable_profiling(profile);
    backend.synchronize();
    engine.world().barrier();
    const auto t0 = std::chrono::steady_clock::now();
    {
      ProfileScope prof(backend, "zero grads");
      trained.zero_grads(backend);
    }
    compute_loss_and_grads(engine.model(), weights, backend, engine.mesh(), batch);
    if (optimizer) optimizer->step();
    backend.synchronize();
    engine.world().barrier();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) first_step = dt;
    if (i >= warmup) times.push_back(dt);
    if (profile && i >= warmup) {
      backend.profile_flush();  // after the step's synchronize: reading the events stalls nothing
      profile->add_step(dt);
    }
    ULY_INFO("step " << i + 1 << (i < warmup ? " (warm-up)" : "") << ": " << dt << " s");
  }
  backend.enable_profiling(nullptr);
  return times;
}

// The profiled step's rates, added to FILE (a new table, or one more measurement in an existing
// one, so that a ladder of lengths builds one table): per family the measured seconds and the
// work the planner counts for the same configuration (train/step_time.h).
void write_rates(const std::string& path, Engine& engine, const ModelConfig& config, int64_t S,
                 const StepProfile& profile, const std::string& device) {
  RatesTable table;
  if (std::ifstream(path).good()) table = read_rates_table(path);  // refused when malformed: no silent overwrite
  PlanRequest req = engine.plan_request(config, S);
  req.options = engine.step_options();  // as the step ran (keep-attention chosen by the plan)
  RatesMeasurement m = make_measurement(profile.json(), plan_step_work(req));
  m.seq_len = S;
  m.local_tokens = local_tokens(req);
  m.ranks = engine.world().size();
  m.sp = engine.mesh().sp_size();
  m.ring = engine.mesh().ring_size();
  m.model = std::to_string(config.num_hidden_layers) + " layers, hidden " + std::to_string(config.hidden_size);
  table.device = device;
  table.measurements.push_back(m);
  write_file_atomic(path, table.to_json().dump(2) + "\n");
  std::cout << "rates: " << m.families.size() << " families at " << S << " tokens added to " << path << " ("
            << table.measurements.size() << " measurement" << (table.measurements.size() > 1 ? "s" : "") << ")\n";
}

}  // namespace

int run_bench(int argc, char** argv, Communicator& world) {
  const std::vector<OptionSpec> specs = bench_specs();
  Args args("bench", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("bench", specs);
    return 0;
  }
  ModelConfig config = model_config_from(args, "bench");
  int64_t S = args.get_int("seq", 32768, limits::kSeqLen);
  const int64_t B = args.get_int("batch", 1, limits::kBatch);
  const int64_t steps = args.get_int("steps", 3, limits::kSteps), warmup = args.get_int("warmup", 1, limits::kStepCount);
  const bool find_max = args.has("find-max-seq");
  // An option read in one mode only is refused in the others, not ignored unchecked.
  ULY_CHECK(find_max || !args.has("host-mem-limit"),
            "bench: --host-mem-limit is the host budget of --find-max-seq; give it with --find-max-seq or leave it out");
  ULY_CHECK(!find_max || (B == 1 && !args.has("seq")),
            "bench --find-max-seq finds the sequence length itself, for one sequence: leave out --seq and --batch");
  if (!find_max) check_tokens_fit_host("bench: a step", B * S, host_memory_available());
  const bool optimize = !args.has("no-optimizer");
  const bool profiling = args.has("profile");
  ULY_CHECK(!args.has("rates-out") || (profiling && B == 1 && !find_max),
            "bench --rates-out records the rates of one profiled sequence: add --profile, and leave out --batch and "
            "--find-max-seq");
  // Before the first collective: every rank was started with the same options (another --seq on
  // one rank died inside MPI).
  check_ranks_agree(world, {{"options", std::vector<std::string>(argv + 1, argv + argc)}}, "bench");

  EngineConfig engine_config = engine_config_from(args, optimize);
  engine_config.lora = lora_config_from(args, "bench");
  Engine engine(engine_config, world);
  Backend* backend = &engine.backend();
  ProcessMesh& mesh = engine.mesh();
  if (mesh.zigzag()) mesh.layout().check_length(S, "--seq");
  check_ulysses_degree(config.num_attention_heads, config.num_key_value_heads, mesh.ulysses_size(), S);
  const int zero = engine_config.zero;
  ULY_CHECK(zero < 2 || B % mesh.dp_size() == 0,
            "bench: --zero " << zero
                             << " reduce-scatters each layer's gradients during the backward, so every rank must "
                                "hold as many rows: --batch "
                << B << " is not a multiple of dp = " << mesh.dp_size() << " (give --batch " << mesh.dp_size()
                << ", or --sp " << world.size() << ")");
  StepOptions options = engine_config.memory;
  PlanRequest found;  // --find-max-seq: the plan the measured steps confirm
  if (find_max) {
    found = engine.plan_request(config, 0);
    // bench runs the step here: the budgets are this machine's unless given.
    const size_t device_budget = gib_option(args, "memory-limit", backend->device_memory_available());
    const size_t host_budget = gib_option(args, "host-mem-limit", host_memory_available());
    const std::string budgets = "budgets: device " + format_bytes(device_budget) +
                                (args.has("memory-limit") ? " (--memory-limit)" : " (this device's free memory)") +
                                ", host " + format_bytes(host_budget) +
                                (args.has("host-mem-limit") ? " (--host-mem-limit)" : " (this host's available memory)");
    S = find_max_seq(found, device_budget, host_budget, budgets, options, world.rank() == 0);
    check_tokens_fit_host("bench: a step", S, host_memory_available());
    if (mesh.zigzag()) mesh.layout().check_length(S, "--find-max-seq's length");
    // The options the search chose, as given (an explicit --keep-attention stays as it was).
    engine.set_step_options(options, options.keep_attention ? KeepAttention::On : engine_config.keep_attention);
  }
  const Engine::Plan plan = engine.plan(config, S);
  if (print_dry_run(args, engine, plan, S)) return 0;
  engine.check_and_reserve(plan);
  options = engine.step_options();

  engine.load_weights(config, nullptr, 1234);
  if (engine_config.lora.enabled()) engine.load_lora("", 1234);
  std::unique_ptr<AdamW> optimizer;
  if (optimize)
    optimizer = std::make_unique<AdamW>(
        engine.trained(), *backend, OptimizerConfig{},
        OptimizerPlacement{zero >= 1 ? &mesh.world() : nullptr, engine_config.offload_optimizer});
  const TokenBatch batch = synthetic_batch(B, S, config.vocab_size);
  engine.mark(optimize ? "optimizer state and batch" : "batch");
  if (world.rank() == 0) ULY_INFO("bench: " << engine.startup_report());

  ULY_INFO("bench: " << config.num_hidden_layers << " layers, hidden " << config.hidden_size << ", " << B << " x " << S
                     << " tokens, " << mesh.describe() << ", backend " << backend->name()
                     << (optimize ? ", with AdamW" : ", forward + backward only"));
  StepProfile profile;
  double first_step = 0;
  std::vector<double> times =
      time_steps(engine, optimizer.get(), batch, warmup, steps, profiling ? &profile : nullptr, first_step);
  std::sort(times.begin(), times.end());
  const double t = times[times.size() / 2];
  const StepFlops f = step_flops(config, std::vector<int64_t>(B, S), options.checkpoint,
                                 engine.lora() ? static_cast<double>(engine.lora()->num_elements()) : 0.0);
  const double gpus = world.size();
  const MemorySnapshot mem = MemorySnapshot::of(backend->pools());
  nlohmann::json j = {
      {"model_layers", config.num_hidden_layers}, {"hidden", config.hidden_size}, {"seq_len", S}, {"batch", B},
      {"ranks", world.size()}, {"sp", mesh.sp_size()}, {"sp_ring", mesh.ring_size()}, {"zigzag", mesh.zigzag()},
      {"backend", backend->name()}, {"comm", engine.comm_name()},
      {"dtype", dtype_name(backend->act_dtype())}, {"reserved", !args.has("no-reserve")}, {"optimizer", optimize},
      {"zero", world.size() > 1 ? zero : 0}, {"offload_optimizer", engine_config.offload_optimizer},
      {"checkpoint", options.checkpoint}, {"offload_layers", options.offload_layers},
      {"keep_attention", options.keep_attention}, {"checkpoint_segment", options.checkpoint_segment},
      {"head_chunks", options.head_chunks}, {"grad_dtype", dtype_name(options.grad_dtype)},
      {"comm_overlap", options.overlap_communication}, {"lora_r", engine_config.lora.r},
      {"tiled_mlp", options.mlp_tiles}, {"tiled_loss", options.loss_tile_tokens}, {"step_time_s", t},
      {"tokens_per_s", B * S / t}, {"alst_tflops_per_gpu", f.alst / t / gpus / 1e12},
      {"mfu", f.useful / t / gpus / kH100PeakBf16Flops}, {"peak_device_bytes", mem.device.peak},
      {"peak_host_pool_bytes", mem.host.peak},
      {"working_coefficient",
       working_coefficient(mem, mesh.layout().padded_length(S) / mesh.sp_size(), config.hidden_size)}};
  j["startup_s"] = engine.startup_json();
  j["first_step_time_s"] = first_step;
  if (profiling) j["profile"] = profile.json();
  if (world.rank() == 0) {
    std::printf("%-28s %s\n", "step time (median)", (std::to_string(t) + " s").c_str());
    std::printf("%-28s %.1f\n", "tokens/s", B * S / t);
    std::printf("%-28s %.1f\n", "ALST TFLOPS per GPU", f.alst / t / gpus / 1e12);
    std::printf("%-28s %.2f%%\n", "MFU", 100.0 * f.useful / t / gpus / kH100PeakBf16Flops);
    std::printf("%-28s %s\n", "peak device memory (pools)", format_bytes(mem.device.peak).c_str());
    std::printf("%-28s %s\n", "peak host memory (pools)", format_bytes(mem.host.peak).c_str());
    if (find_max) {
      found.seq_len = S;
      found.options = options;
      const MemorySnapshot planned = plan_step_memory(found);
      std::printf("%-28s %lld tokens: planned device peak %zu bytes, measured %zu (%s); host %zu, %zu (%s)\n",
                  "find-max-seq confirmed", static_cast<long long>(S), planned.device.peak, mem.device.peak,
                  planned.device.peak == mem.device.peak ? "equal" : "differ", planned.host.peak, mem.host.peak,
                  planned.host.peak == mem.host.peak ? "equal" : "differ");
      j["find_max_seq"] = {{"seq_len", S}, {"planned_device_bytes", planned.device.peak},
                           {"planned_host_bytes", planned.host.peak}};
    }
    const std::string arena = backend->memory_reservation_report();
    if (!arena.empty()) std::cout << arena << "\n";
    if (profiling)
      std::cout << "\nprofile of rank 0, mean per timed step (the step time above is the median):\n"
                << profile.table();
    if (args.has("rates-out")) write_rates(args.get("rates-out"), engine, config, S, profile, backend->name());
    std::cout << "BENCH_JSON " << j.dump() << std::endl;
    if (args.has("json")) write_file_atomic(args.get("json"), j.dump(2) + "\n");  // a regular file or nothing
  }
  return 0;
}

}  // namespace ulysses
