#include "train/engine.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "comm/launch_env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory_pools.h"
#include "core/process_clock.h"

namespace ulysses {

const char* backend_kind_name(BackendKind b) { return b == BackendKind::Cuda ? "cuda" : "cpu"; }
const char* comm_kind_name(CommKind c) { return c == CommKind::Nccl ? "nccl" : "mpi"; }

std::unique_ptr<Backend> make_backend(const EngineConfig& c, int world_rank) {
  if (c.backend == BackendKind::Cpu) {
    ULY_CHECK(c.act_dtype == DType::F32, "the cpu backend computes in fp32 only (it is the reference)");
    return make_cpu_backend();
  }
  return make_cuda_backend(
      cuda_device_for_local_rank(node_local_rank(world_rank), c.comm == CommKind::Nccl, node_local_rank_source()),
      c.act_dtype);
}

namespace {

// What LoRA does not run with yet, refused in one line naming the setting.
void check_lora_engine(const EngineConfig& c) {
  if (!c.lora.enabled()) return;
  const bool flags = c.spelling == OptionSpelling::Flags;
  ULY_CHECK(c.zero == 0, "LoRA with ZeRO stage " << c.zero << " is not supported yet (the adapters are small and "
                                                 << "replicated); drop " << (flags ? "--zero" : "zero"));
  ULY_CHECK(!c.offload_optimizer, "LoRA with the optimizer offloaded is not supported yet (the adapters' state is "
                                  "small); drop " << (flags ? "--offload-optimizer" : "offload_optimizer"));
  ULY_CHECK(c.memory.grad_dtype == DType::F32,
            "LoRA keeps float32 gradients for the adapters and none for the base; drop "
                << (flags ? "--grad-dtype bf16" : "grad_dtype: bfloat16"));
}

}  // namespace

PlanRequest make_plan_request(const EngineConfig& c, const ModelConfig& model, int64_t seq_len, int ranks,
                              Device device, Backend* runtime) {
  PlanRequest req;
  req.config = model;
  req.seq_len = seq_len;
  req.sp = c.sp > 0 ? c.sp : ranks;
  req.ring = c.ring;
  req.zigzag = c.zigzag;
  req.options = c.memory;
  req.options.keep_attention = c.keep_attention == KeepAttention::On;
  req.act_dtype = c.act_dtype;
  req.device = device;
  // ZeRO shards over every rank: the optimizer state from stage 1 (only where there is one),
  // the gradients from 2, the weights from 3.
  req.optimizer = c.optimizer;
  req.optimizer_shards = c.optimizer && c.zero >= 1 ? ranks : 1;
  req.optimizer_offload = c.optimizer && c.offload_optimizer;
  req.gradient_shards = c.zero >= 2 ? ranks : 1;
  req.weight_shards = c.zero >= 3 ? ranks : 1;
  req.runtime = runtime;
  check_lora_engine(c);  // plan refuses what the engine would
  req.lora = c.lora;
  return req;
}

Engine::Engine(const EngineConfig& config, Communicator& world)
    : config_(config), world_(world), backend_(make_backend(config, world.rank())) {
  check_lora_engine(config);
  comm_ = std::make_unique<StepCommunicator>(world, *backend_, comm_kind_name(config.comm));
  comm_name_ = comm_->get().name();
  mesh_ = std::make_unique<ProcessMesh>(comm_->get(), config.sp, config.ring, config.zigzag);
  config_.memory.keep_attention = config.keep_attention == KeepAttention::On;
  mark("backend and communicator");
}

void Engine::mark(const std::string& phase) {
  const double now = seconds_since_launch();
  // A phase met again (plan() called twice) adds to its first entry.
  auto it = std::find_if(startup_.begin(), startup_.end(), [&](const auto& p) { return p.first == phase; });
  if (it != startup_.end()) it->second += now - last_mark_;
  else startup_.emplace_back(phase, now - last_mark_);
  last_mark_ = now;
}

std::string Engine::startup_report() const {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << "start-up " << last_mark_ << " s since launch:";
  for (size_t i = 0; i < startup_.size(); ++i) o << (i ? ", " : " ") << startup_[i].first << " " << startup_[i].second << " s";
  return o.str();
}

nlohmann::json Engine::startup_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [phase, s] : startup_) j[phase] = s;
  j["total"] = last_mark_;
  return j;
}

Engine::~Engine() = default;

void Engine::set_step_options(const StepOptions& options, KeepAttention keep) {
  ULY_CHECK(!model_, "the step options are set before the model is made");
  config_.memory = options;
  config_.keep_attention = keep;
  config_.memory.keep_attention = keep == KeepAttention::On;
}

PlanRequest Engine::plan_request(const ModelConfig& model, int64_t seq_len) const {
  PlanRequest req = make_plan_request(config_, model, seq_len, world_.size(), backend_->device(), backend_.get());
  req.sp = mesh_->sp_size();
  req.options = config_.memory;
  return req;
}

Engine::Plan Engine::plan(const ModelConfig& model, int64_t seq_len, int64_t documents) {
  PlanRequest req = plan_request(model, seq_len);
  req.documents = documents;
  const size_t device_budget = config_.device_limit > 0 ? config_.device_limit : backend_->device_memory_available();
  const size_t host_budget = host_memory_available();
  if (config_.keep_attention == KeepAttention::Auto && req.options.checkpoint) {
    size_t need = 0;
    const bool fits = keep_attention_fits(req, device_budget, host_budget, &need);
    if (world_.rank() == 0)
      ULY_INFO((config_.spelling == OptionSpelling::Flags ? "--keep-attention" : "memory.keep_attention")
               << " auto: " << (fits ? "on" : "off") << " (the step with it needs "
                                       << format_bytes(need) << " of "
                                       << format_bytes(device_budget) << ")");
    if (fits) req.options.keep_attention = config_.memory.keep_attention = true;
  }
  const MemorySnapshot memory = plan_step_memory(req);
  mark("plan");
  return Plan{req, memory, device_budget, host_budget};
}

void Engine::check_and_reserve(const Plan& p) {
  check_plan_fits(p.request, p.memory, p.device_budget, p.host_budget, config_.spelling);
  if (config_.reserve) backend_->reserve_memory(p.memory.device.peak, p.memory.host.peak);
  mark("reserved pools");
}

MemorySnapshot Engine::prepare_memory(const ModelConfig& model, int64_t seq_len, int64_t documents) {
  const Plan p = plan(model, seq_len, documents);
  check_and_reserve(p);
  return p.memory;
}

LlamaWeights& Engine::load_weights(const ModelConfig& model, const ModelFolder* folder, uint64_t seed) {
  ULY_CHECK(!weights_, "the engine's weights are loaded once");
  weights_ = std::make_unique<LlamaWeights>(model, config_.memory.grad_dtype, zero_sharding(mesh_->world(), config_.zero));
  if (config_.lora.enabled()) weights_->freeze();
  if (folder) weights_->load(*folder, *backend_);
  else weights_->init_random(*backend_, seed);
  backend_->synchronize();  // the phase ends when the weights are on the device
  mark(folder ? "weights (read and upload)" : "weights (random, on the device)");
  return *weights_;
}

LoraWeights& Engine::load_lora(const std::string& dir, uint64_t seed) {
  ULY_CHECK(weights_ && !lora_ && !model_, "the engine's adapters are loaded once, after the weights, before the model");
  ULY_CHECK(config_.lora.enabled(), "load_lora without a LoRA config");
  lora_ = std::make_unique<LoraWeights>(weights_->config(), config_.lora);
  if (dir.empty()) lora_->init(*backend_, seed);
  else lora_->load(dir, *backend_);
  return *lora_;
}

ParameterSet& Engine::trained() {
  if (lora_) return *lora_;
  ULY_CHECK(weights_, "the engine has no weights yet (load_weights)");
  return *weights_;
}

LlamaModel& Engine::model() {
  ULY_CHECK(weights_, "the engine's model needs its weights first (load_weights)");
  ULY_CHECK(!config_.lora.enabled() || lora_, "the engine's model needs its LoRA adapters first (load_lora)");
  if (!model_) {
    model_ = std::make_unique<LlamaModel>(*weights_, *backend_, *mesh_, config_.memory);
    if (lora_) model_->attach_lora(*lora_);
  }
  return *model_;
}

}  // namespace ulysses
