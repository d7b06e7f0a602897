#include "train/trainer.h"

#include <algorithm>
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <vector>

#include "comm/launch_env.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "io/checksums.h"
#include "io/model_folder.h"
#include "io/regular_file.h"
#include "io/tensorboard.h"
#include "parallel/step_communicator.h"
#include "train/batch_source.h"
#include "train/checkpoint.h"
#include "train/engine.h"
#include "train/fingerprint.h"
#include "train/flops.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/out_dir.h"
#include "train/rank_agreement.h"
#include "train/run_lock.h"
#include "train/step.h"

namespace ulysses {
namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
// The first SIGINT/SIGTERM asks for a checkpoint at the next step boundary; a second one
// ends the process at once (the last complete checkpoint stays the latest).
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    static const char msg[] = "\nulysses train: second signal: stopping now, without a checkpoint of this step\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(128 + sig);
  }
  g_stop_signal = sig;
  static const char msg[] = "\nulysses train: signal: checkpoint and stop after this step (send it again to stop now)\n";
  (void)!write(2, msg, sizeof msg - 1);
}

std::string format_duration(double s) {
  char buf[32];
  const long long t = static_cast<long long>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

ModelConfig model_config_for(const TrainConfig& c) {
  ModelConfig mc;
  if (!c.model.empty()) {
    mc = ModelFolder::open(c.model).config();
  } else {
    if (!named_model_config(c.model_config, &mc)) mc = load_hf_config(c.model_config);
    if (c.num_layers > 0) {
      mc.num_hidden_layers = c.num_layers;
      mc.raw["num_hidden_layers"] = c.num_layers;
    }
  }
  if (!c.rope_scaling.is_null()) {
    // Read as config.json's 5.x block (theta the model's unless given), then written back into
    // the config in the layout the model's file uses.
    nlohmann::json block = c.rope_scaling;
    if (!block.contains("rope_theta")) block["rope_theta"] = mc.rope.theta;
    const nlohmann::json as_config = {{"rope_parameters", block},
                                      {"max_position_embeddings", mc.max_position_embeddings}};
    mc.rope = parse_rope(as_config, "train config 'rope_scaling'", mc.max_position_embeddings);
    mc.raw = hf_config_json(mc);
  }
  return mc;
}

DType save_dtype_of(const std::string& s) {
  return s == "bfloat16" ? DType::BF16 : s == "float16" ? DType::F16 : DType::F32;
}

// Where the checkpoints' tokenizer, chat template and generation config come from: the
// `tokenizer` key, then the model folder, then the tokenizer the training data was prepared with.
std::vector<std::string> checkpoint_asset_dirs(const TrainConfig& c) {
  std::vector<std::string> dirs;
  if (!c.tokenizer.empty()) {
    std::error_code ec;
    const fs::path t = c.tokenizer;
    ULY_CHECK(fs::exists(t, ec), "train: tokenizer '" << c.tokenizer << "' does not exist (give a folder holding "
                                                      << "tokenizer.json, or leave 'tokenizer' empty)");
    dirs.push_back(fs::is_directory(t, ec) ? t.string() : t.parent_path().string());
  }
  if (!c.model.empty()) dirs.push_back(c.model);
  std::error_code ec;
  const fs::path manifest = fs::path(c.train_data) / "manifest.json";
  if (fs::is_regular_file(manifest, ec)) {
    try {
      const nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
      const std::string spec = m.at("tokenizer").at("spec").get<std::string>();
      if (spec != "byte" && !spec.empty())
        dirs.push_back(fs::is_directory(spec, ec) ? spec : fs::path(spec).parent_path().string());
    } catch (const std::exception&) {  // the loader reports a bad manifest with its own message
    }
  }
  return dirs;
}

// Keeps the metrics lines up to `step` (a resumed run rewrites what follows).
void truncate_metrics(const fs::path& path, int64_t step) {
  if (!fs::exists(path)) return;
  require_regular_file(path.string(), "metrics log");  // a FIFO here would block the read forever
  std::ifstream in(path);
  std::ostringstream kept;
  for (std::string line; std::getline(in, line);) {
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= step) kept << line << "\n";
    } catch (...) {
    }
  }
  in.close();
  write_file_atomic(path.string(), kept.str());
}

// JSON has no NaN or infinity: such values are written as null.
nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

// "model.layers.3.mlp.down_proj.weight, lm_head.weight" — the first few names and the count.
std::string describe_parameters(const std::vector<std::string>& names) {
  if (names.empty()) return "none found";
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < 4; ++i) os << (i ? ", " : "") << names[i];
  if (names.size() > 4) os << " and " << names.size() - 4 << " more";
  return os.str();
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

struct Trainer::State {
  State(const TrainConfig& c, Communicator& w, TrainerHooks h)
      : cfg(c),
        world(w),
        hooks(std::move(h)),
        mc(model_config_for(c)),
        agreed(ranks_agree(c, mc, w)),
        engine(c.engine, w),
        rank0(w.rank() == 0),
        out_dir(c.out_dir),
        metrics_path(out_dir / "metrics.jsonl"),
        rows(c.batch_size * c.grad_accum) {}

  // Before the first collective of the run (NCCL's set-up, the mesh's splits): every rank must
  // have read the same config and model (ranks apart ran, or died in MPI).
  static bool ranks_agree(const TrainConfig& c, const ModelConfig& mc, Communicator& w) {
    check_ranks_agree(w, {{"config", c.as_json}, {"model", run_fingerprint(c, mc, {}, nullptr)}}, "train");
    return true;
  }

  const TrainConfig& cfg;
  Communicator& world;
  TrainerHooks hooks;
  const ModelConfig mc;
  const bool agreed;
  Engine engine;
  const bool rank0;
  const fs::path out_dir, metrics_path;
  const int64_t rows;  // sequences per optimizer step
  MemorySnapshot planned;
  std::unique_ptr<RunLock> lock;
  std::unique_ptr<ModelFolder> folder;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<BatchSource> train, val;
  CheckpointMesh this_mesh;
  nlohmann::json fingerprint;
  std::vector<std::string> asset_dirs;
  std::unique_ptr<AppendFile> metrics;
  std::unique_ptr<EventFileWriter> events;  // the same figures for TensorBoard
  StepFlops flops;
  int64_t start_step = 0, nonfinite_steps = 0;
  std::chrono::steady_clock::time_point t_start;

  Backend& backend() { return engine.backend(); }
  ProcessMesh& mesh() { return engine.mesh(); }

  void check_shapes();
  void plan_memory();
  void open_run_folder();
  void load_model_and_optimizer();
  void load_adapters();
  void open_data();
  void announce();
  void open_logs();
  void save_optimizer_shards(int64_t step);
  bool skip_nonfinite(int64_t step, const StepResult& r, const AdamW::StepInfo& info);
  void log_step(int64_t step, const StepResult& r, const AdamW::StepInfo& info, double dt);
};

// The shapes the mesh must divide, before anything is planned or allocated.
void Trainer::State::check_shapes() {
  ProcessMesh& m = mesh();
  ULY_CHECK(cfg.seq_len % m.sp_size() == 0,
            "data.seq_len " << cfg.seq_len << " is not divisible by the sequence-parallel degree " << m.sp_size()
                            << "; choose a multiple of " << m.sp_size());
  if (m.zigzag()) m.layout().check_length(cfg.seq_len, "data.seq_len");
  check_ulysses_degree(mc.num_attention_heads, mc.num_key_value_heads, m.ulysses_size(), cfg.seq_len);
  ULY_CHECK(cfg.batch_size % m.dp_size() == 0,
            "batch_size " << cfg.batch_size << " cannot be dealt evenly to " << m.dp_size()
                          << " data-parallel groups; choose a multiple of " << m.dp_size());
  check_tokens_fit_host("train: a step", cfg.batch_size * cfg.grad_accum / m.dp_size() * cfg.seq_len,
                        host_memory_available());
}

void Trainer::State::plan_memory() {
  // Rows pack documents: plan the variable-length attention.
  planned = engine.prepare_memory(mc, cfg.seq_len, std::min<int64_t>(2, cfg.seq_len));
}

void Trainer::State::open_run_folder() {
  if (rank0) {
    prepare_out_dir(cfg.out_dir);  // before the lock: its run.lock marks the folder as a run of ours
    lock = std::make_unique<RunLock>(cfg.out_dir);
    check_fresh_out_dir(cfg.out_dir, cfg.resume, cfg.overwrite);
  }
  world.barrier();
}

void Trainer::State::load_model_and_optimizer() {
  if (!cfg.model.empty()) folder = std::make_unique<ModelFolder>(ModelFolder::open(cfg.model));
  engine.load_weights(mc, folder.get(), cfg.init_seed);
  // LoRA: the adapters are what the optimizer updates (the base is frozen).
  if (cfg.engine.lora.enabled()) load_adapters();
  OptimizerConfig oc;
  oc.lr = cfg.lr;
  oc.min_lr = cfg.min_lr;
  oc.warmup_steps = cfg.warmup_steps;
  oc.total_steps = cfg.steps;
  oc.weight_decay = cfg.weight_decay;
  oc.beta1 = cfg.beta1;
  oc.beta2 = cfg.beta2;
  oc.eps = cfg.eps;
  oc.grad_clip = cfg.grad_clip;
  const EngineConfig& e = cfg.engine;
  optimizer = std::make_unique<AdamW>(engine.trained(), backend(), oc,
                                      OptimizerPlacement{e.zero >= 1 ? &mesh().world() : nullptr, e.offload_optimizer});
  if (folder && !engine.lora()) optimizer->load_master(*folder);
}

void Trainer::State::load_adapters() {
  const LoraConfig& want = cfg.engine.lora;
  if (!cfg.lora_adapter.empty()) {
    // The adapter must be the one the config describes: its shapes and scaling are the run's.
    LoraConfig have = read_peft_adapter_config(cfg.lora_adapter);
    have.base_model = want.base_model;
    ULY_CHECK(have == want, cfg.lora_adapter << "/adapter_config.json: r " << have.r << ", alpha " << have.alpha
                                             << ", use_rslora " << have.use_rslora << ", target_modules "
                                             << nlohmann::json(have.target_names()).dump()
                                             << " differ from the train config's lora block (r " << want.r
                                             << ", alpha " << want.alpha << ", use_rslora " << want.use_rslora
                                             << ", target_modules " << nlohmann::json(want.target_names()).dump()
                                             << "); make them the same");
  }
  LoraWeights& lora = engine.load_lora(cfg.lora_adapter, cfg.init_seed);
  if (rank0)
    ULY_INFO("train: LoRA r " << want.r << ", alpha " << want.alpha << (want.use_rslora ? " (rsLoRA)" : "")
                              << " on " << nlohmann::json(want.target_names()).dump() << ": " << lora.num_elements()
                              << " trained parameters, the base's " << engine.weights().num_elements() << " frozen"
                              << (cfg.lora_adapter.empty() ? "" : ", from " + cfg.lora_adapter));
}

void Trainer::State::open_data() {
  ProcessMesh& m = mesh();
  const MeshPosition where{m.dp_rank(), m.dp_size(), m.sp_rank(), m.sp_size(), m.ring_size(), m.zigzag()};
  train = open_token_batches(cfg.train_data, "train", cfg.seq_len, cfg.data_mode, cfg.data_seed, mc.vocab_size, where);
  // data.val, when given, is opened and checked here even without evaluation: a wrong path must
  // not wait to be found (or never be) until the first evaluation.
  if (cfg.eval_every > 0 || !cfg.val_data.empty()) {
    const std::string val_path = cfg.val_data.empty() ? cfg.train_data : cfg.val_data;
    try {
      val = open_token_batches(val_path, "val", cfg.seq_len, cfg.data_mode, cfg.data_seed, mc.vocab_size, where);
    } catch (const Error& e) {
      ULY_FAIL((cfg.val_data.empty() ? "" : "data.val: ") << e.message()
                            << (cfg.eval_every > 0 ? "; or train without evaluation: eval_every=0"
                                                   : "; or leave data.val out (eval_every is 0: nothing evaluates)"));
    }
    if (cfg.eval_every == 0) val.reset();
  }
  if (rank0 && cfg.seq_len > mc.max_position_embeddings)
    ULY_WARN("data.seq_len " << cfg.seq_len << " is above the model's max_position_embeddings ("
                             << mc.max_position_embeddings << "): positions beyond it were never trained; "
                             << "extend the RoPE (rope_scaling) in config.json for long-context training");
  this_mesh = CheckpointMesh{m.world_size(), m.sp_size(), m.dp_size()};
  fingerprint = run_fingerprint(cfg, mc, this_mesh, {{"train", train->fingerprint()}});
  check_ranks_agree(world, fingerprint, "train");  // the data too: the same path may hold other files on another node
}

Trainer::Trainer(const TrainConfig& config, Communicator& world, TrainerHooks hooks)
    : s_(std::make_unique<State>(config, world, std::move(hooks))) {
  s_->check_shapes();
  s_->plan_memory();
  s_->open_run_folder();
  s_->load_model_and_optimizer();
  s_->open_data();
}

Trainer::~Trainer() = default;

int64_t Trainer::resume() {
  State& s = *s_;
  const TrainConfig& cfg = s.cfg;
  if (!cfg.resume) {
    if (s.rank0) {
      write_file_atomic(s.metrics_path.string(), "");
      remove_event_files(cfg.out_dir);  // a fresh run's TensorBoard shows only itself
    }
    s.start_step = 0;
    return 0;
  }
  const auto ckpt = latest_checkpoint(cfg.out_dir);
  ULY_CHECK(ckpt.has_value(), "train: resume asked but " << (s.out_dir / "checkpoints").string()
                                                          << " holds no complete checkpoint");
  // Every file as it was written (rank 0 reads them; a refusal there aborts the others).
  if (s.rank0) verify_checksums(*ckpt);
  const TrainerState st = read_trainer_state(*ckpt);
  // Past the last step the loop would not run: a "resumed" run that trains nothing and exits 0.
  ULY_CHECK(st.step <= cfg.steps, "train: " << *ckpt << " is at step " << st.step << ", past this run's steps="
                                            << cfg.steps << "; nothing would be trained (raise steps to go on)");
  // The checkpoint holds whole tensors (or the state in blocks of known layout) and a global data
  // position, so any mesh can take it up; only the order of the sums changes, which is why it
  // takes reshard=true.
  const auto mesh_of = [](const nlohmann::json& f) {
    return f.is_object() && f.contains("mesh") ? f.at("mesh") : nlohmann::json();
  };
  ProcessMesh& mesh = s.mesh();
  const bool same_mesh = st.mesh.world == mesh.world_size() && st.mesh.sp == mesh.sp_size() &&
                         (st.fingerprint.is_null() || mesh_of(st.fingerprint) == mesh_of(s.fingerprint));
  ULY_CHECK(same_mesh || cfg.reshard,
            *ckpt << " was written on " << st.mesh.world << " ranks (sp " << st.mesh.sp << ") and this run has "
                  << mesh.world_size() << " ranks (sp " << mesh.sp_size() << ", " << mesh.describe()
                  << "): resume on the same mesh for a bit-exact continuation, or add reshard=true to continue "
                     "on this one (the same maths, summed in another order)");
  if (!same_mesh && s.rank0)
    ULY_WARN("resuming " << *ckpt << " (" << st.mesh.world << " ranks, sp " << st.mesh.sp << ") on "
                         << mesh.describe() << ": the following steps equal the original run's up to the order "
                         << "of sums, not bit for bit");
  if (st.fingerprint.is_null())
    ULY_WARN(*ckpt << " records no fingerprint (written by an older version): the model, data and settings "
                      "cannot be checked against it");
  else
    check_resume_fingerprint(st.fingerprint, s.fingerprint, *ckpt, /*ignore_mesh=*/!same_mesh);
  if (st.optimizer_shards > 0) s.optimizer->load_shards(*ckpt, st.optimizer_shards, st.step);
  else s.optimizer->load_state(*ckpt + "/optimizer.safetensors", st.step);
  s.train->restore(st.loader);
  s.start_step = st.step;
  if (s.rank0) {
    truncate_metrics(s.metrics_path, s.start_step);
    ULY_INFO("resumed from " << *ckpt << " at step " << s.start_step);
  }
  return s.start_step;
}

void Trainer::State::announce() {
  const EngineConfig& e = cfg.engine;
  ULY_INFO("train: " << mesh().describe() << ", backend " << backend().name() << ", "
                     << engine.weights().num_elements() << " parameters, " << rows << " x " << cfg.seq_len
                     << " tokens per step, " << cfg.steps << " steps, data " << train->describe());
  if (!rank0 || (optimizer->shards() <= 1 && !e.offload_optimizer)) return;
  std::string sharding;
  if (optimizer->shards() > 1)
    sharding = " (ZeRO stage " + std::to_string(e.zero) + ": 1/" + std::to_string(optimizer->shards()) + " of it" +
               (e.zero >= 3   ? ", of the gradients and of the weights)"
                : e.zero == 2 ? ", and of the gradients)"
                              : ")");
  ULY_INFO("train: AdamW state " << format_bytes(planned.peak(e.offload_optimizer ? Pool::HostOptimizer
                                                                                  : Pool::Optimizer))
                                 << " per rank" << sharding
                                 << (e.offload_optimizer ? ", in pinned host memory, updated on the CPU"
                                                         : ", on the device"));
}

void Trainer::State::open_logs() {
  if (rank0) write_file_atomic((out_dir / "config.json").string(), cfg.as_json.dump(2) + "\n");
  asset_dirs = checkpoint_asset_dirs(cfg);
  if (rank0) metrics = std::make_unique<AppendFile>(metrics_path.string());
  if (rank0 && cfg.tensorboard) {
    events = std::make_unique<EventFileWriter>(cfg.out_dir);
    if (start_step > 0) events->session_start(start_step + 1);  // older files' later steps are superseded
  }
}

// Sharded state: each rank writes its own file into the staging folder (no rank gathers the
// state); a failure on any rank abandons the checkpoint on all.
void Trainer::State::save_optimizer_shards(int64_t step) {
  if (rank0) prepare_checkpoint_dir(cfg.out_dir, step);
  world.barrier();
  std::string failure;
  try {
    optimizer->save_shard(
        optimizer_shard_file(checkpoint_staging_dir(cfg.out_dir, step), world.rank(), optimizer->shards()));
  } catch (const Error& e) {
    failure = e.message();
  }
  int64_t failed = failure.empty() ? 0 : 1, any = 0;
  world.all_reduce(&failed, &any, 1, DType::I64, ReduceOp::Max);
  if (!any) return;
  if (rank0) abandon_checkpoint(cfg.out_dir, step);
  ULY_FAIL("saving the checkpoint of step " << step << " failed: "
                                            << (failure.empty() ? "another rank could not write its optimizer shard"
                                                                : failure)
                                            << "; the previous checkpoint is untouched");
}

void Trainer::save(int64_t step) {
  State& s = *s_;
  // Only the masters are gathered, for the model folder, when the state is sharded.
  const bool sharded = s.optimizer->shards() > 1;
  if (sharded) s.save_optimizer_shards(step);
  const OptimizerSnapshot snapshot = s.optimizer->snapshot(s.rank0, /*masters_only=*/sharded);  // collective if sharded
  if (s.rank0) {
    s.metrics->sync();  // the metrics up to a checkpoint are on disk before it is
    if (s.events) s.events->sync();
    TrainerState st;
    st.step = step;
    st.loader = s.train->state();
    st.mesh = s.this_mesh;
    st.config = s.cfg.as_json;
    st.fingerprint = s.fingerprint;
    st.optimizer_shards = sharded ? s.optimizer->shards() : 0;
    CheckpointSaveOptions so;
    so.sharded_optimizer = sharded;
    so.dtype = save_dtype_of(s.cfg.save_dtype);
    so.asset_dirs = s.asset_dirs;
    so.keep_last = s.cfg.keep_last;
    so.before_commit = s.hooks.before_checkpoint_commit;
    so.lora = s.engine.lora() ? &s.cfg.engine.lora : nullptr;
    const std::string dir = save_checkpoint(s.cfg.out_dir, s.mc, snapshot, st, so);
    ULY_INFO("checkpoint: " << dir);
  }
  s.world.barrier();
}

// Whether the update was skipped for a non-finite loss or gradient norm; past skip_nonfinite such
// steps the run stops, naming the last good checkpoint.
bool Trainer::State::skip_nonfinite(int64_t step, const StepResult& r, const AdamW::StepInfo& info) {
  if (info.applied) return false;
  ++nonfinite_steps;
  std::ostringstream what;
  const double bad_value = std::isfinite(r.loss) ? info.grad_norm : r.loss;
  what << "step " << step << ": " << (std::isfinite(r.loss) ? "the gradient norm" : "the loss") << " is "
       << (std::isnan(bad_value) ? std::string("NaN") : bad_value > 0 ? "inf" : "-inf") << " (non-finite gradients: "
       << describe_parameters(optimizer->nonfinite_gradients()) << ")";
  if (nonfinite_steps > cfg.skip_nonfinite) {
    const auto last = latest_checkpoint(cfg.out_dir);
    ULY_FAIL(what.str() << "; the run stops without applying it or saving a checkpoint from it; "
                        << (last ? "the last good checkpoint is " + *last : std::string("no checkpoint was written"))
                        << " (skip_nonfinite: " << cfg.skip_nonfinite
                        << " such steps may be skipped; a lower lr or a stricter grad_clip may help)");
  }
  ULY_WARN(what.str() << "; the update is skipped (" << nonfinite_steps << " of skip_nonfinite " << cfg.skip_nonfinite
                      << ")");
  return true;
}

void Trainer::State::log_step(int64_t step, const StepResult& r, const AdamW::StepInfo& info, double dt) {
  const bool on_gpu = backend().device() == Device::CUDA;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const double eta = elapsed / static_cast<double>(step - start_step) * static_cast<double>(cfg.steps - step);
  const double tflops = flops.alst / dt / world.size() / 1e12;
  const double mfu = flops.useful / dt / world.size() / kH100PeakBf16Flops;
  const size_t peak = backend().pools().device().peak;
  if (!rank0) return;
  nlohmann::json m = {{"step", step},          {"loss", finite_or_null(r.loss)},   {"lr", info.lr},
                      {"grad_norm", finite_or_null(info.grad_norm)}, {"tokens", r.tokens},
                      {"targets", r.valid_targets},
                      {"tokens_per_s", r.tokens / dt},
                      {"tflops", tflops},      {"step_time_s", dt}, {"peak_device_bytes", peak},
                      {"elapsed_s", elapsed},  {"eta_s", eta}};
  if (on_gpu) m["mfu"] = mfu;
  if (!info.applied) m["skipped_nonfinite"] = true;
  metrics->append(m.dump() + "\n");
  if (events) {
    std::vector<std::pair<std::string, double>> scalars = {
        {"train/loss", r.loss}, {"train/lr", info.lr}, {"train/grad_norm", info.grad_norm},
        {"train/tokens_per_s", r.tokens / dt}, {"train/tflops", tflops}};
    if (on_gpu) scalars.emplace_back("train/mfu", mfu);
    events->scalars(step, scalars);
  }
  if (step % cfg.log_every != 0 && step != cfg.steps) return;
  char mfu_text[16] = "-";
  if (on_gpu) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", mfu * 100.0);
  char line[320];
  std::snprintf(line, sizeof line,
                "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | %.3f TFLOPS | MFU %s | mem %s "
                "| ETA %s",
                static_cast<long long>(step), static_cast<long long>(cfg.steps), r.loss, info.lr, info.grad_norm,
                r.tokens / dt, tflops, mfu_text, format_bytes(peak).c_str(), format_duration(eta).c_str());
  std::cout << line << std::endl;
}

void Trainer::step(int64_t step) {
  State& s = *s_;
  Backend& backend = s.backend();
  LlamaWeights& weights = s.engine.weights();
  const auto t0 = std::chrono::steady_clock::now();
  s.engine.trained().zero_grads(backend);
  const std::vector<SequenceShard> shards = s.train->next(s.rows);
  backend.pools().reset_peaks();
  const StepResult r = compute_loss_and_grads(s.engine.model(), weights, backend, s.mesh(), shards);
  if (s.hooks.after_backward) s.hooks.after_backward(step, weights, backend);
  // Loss and gradients are the same on every rank (reduced), so every rank decides alike.
  AdamW::StepInfo info;
  if (std::isfinite(r.loss)) {
    info = s.optimizer->step();
  } else {
    info.applied = false;
    info.grad_norm = std::numeric_limits<double>::quiet_NaN();
  }
  s.skip_nonfinite(step, r, info);
  backend.synchronize();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.log_step(step, r, info, dt);
}

void Trainer::evaluate(int64_t step) {
  State& s = *s_;
  s.val->restore(nlohmann::json());  // the same held-out batches every time
  double loss_sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < s.cfg.eval_batches; ++i) {
    const StepResult e = compute_loss(s.engine.model(), s.backend(), s.mesh(), s.val->next(s.cfg.batch_size));
    loss_sum += e.loss_sum;
    count += e.valid_targets;
  }
  const double eval_loss = count > 0 ? loss_sum / static_cast<double>(count) : 0.0;
  if (!s.rank0) return;
  s.metrics->append(nlohmann::json({{"step", step}, {"eval_loss", eval_loss}}).dump() + "\n");
  if (s.events) s.events->scalars(step, {{"eval/loss", eval_loss}});
  std::cout << "eval step " << step << " | loss " << eval_loss << std::endl;
}

int Trainer::run() {
  State& s = *s_;
  const TrainConfig& cfg = s.cfg;
  const int64_t start = resume();
  s.open_logs();
  (void)s.engine.model();
  s.flops = step_flops(s.mc, std::vector<int64_t>(s.rows, cfg.seq_len), cfg.engine.memory.checkpoint,
                       s.engine.lora() ? static_cast<double>(s.engine.lora()->num_elements()) : 0.0);
  s.announce();
  s.engine.mark(cfg.resume ? "optimizer, data and resume" : "optimizer and data");
  if (s.rank0) ULY_INFO("train: " << s.engine.startup_report() << "; the first step starts now");
  s.t_start = std::chrono::steady_clock::now();
  for (int64_t n = start + 1; n <= cfg.steps; ++n) {
    step(n);
    if (s.val && (n % cfg.eval_every == 0 || n == cfg.steps)) evaluate(n);
    // All ranks agree on stopping, so none waits in a collective for another.
    int stop = g_stop_signal != 0, any_stop = 0;
    s.world.all_reduce(&stop, &any_stop, 1, DType::I32, ReduceOp::Max);
    const bool last = n == cfg.steps;
    if (any_stop || last || (cfg.checkpoint_every > 0 && n % cfg.checkpoint_every == 0)) save(n);
    if (s.hooks.after_step) s.hooks.after_step(n);
    if (any_stop && !last) {
      ULY_INFO("stopped by a signal at step " << n << "; resume with resume=true (a second signal stops at once)");
      return 130;
    }
  }
  return 0;
}

int run_training(const TrainConfig& config, Communicator& world, TrainerHooks hooks) {
  Trainer trainer(config, world, std::move(hooks));
  return trainer.run();
}

}  // namespace ulysses
