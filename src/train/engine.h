// The engine every step-running command is built on: the backend, the communicator and mesh, the
// memory plan and its reservation, the weights and the model, made in one order from one typed
// EngineConfig. train (train/trainer.cpp), bench and loss-grad construct an Engine; plan builds
// the same plan request without one (make_plan_request); generate takes its backend from here.
// The flags and YAML keys that fill an EngineConfig are cli/engine_options.cpp and
// train/train_config.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "io/model_folder.h"
#include "io/peft_adapter.h"
#include "model/llama.h"
#include "model/llama_weights.h"
#include "parallel/mesh.h"
#include "parallel/step_communicator.h"
#include "train/memory_plan.h"

namespace ulysses {

enum class BackendKind { Cpu, Cuda };
enum class CommKind { Mpi, Nccl };
enum class KeepAttention { Off, On, Auto };  // Auto: on when the plan with it fits

const char* backend_kind_name(BackendKind b);  // "cpu", "cuda"
const char* comm_kind_name(CommKind c);        // "mpi", "nccl"

struct EngineConfig {
  BackendKind backend = BackendKind::Cpu;
  DType act_dtype = DType::F32;  // F32 on the cpu; BF16 (the default there) or F32 on cuda
  CommKind comm = CommKind::Mpi;
  int sp = 0;  // sequence-parallel degree; 0 = all ranks
  int ring = 1;  // ring-attention degree inside it (parallel/mesh.h)
  bool zigzag = false;
  StepOptions memory;  // its keep_attention is decided by keep_attention below
  KeepAttention keep_attention = KeepAttention::Off;
  bool optimizer = true;  // the step includes AdamW (its state is planned and allocated)
  int zero = 0;           // ZeRO stage over all ranks (1 the optimizer state, 2 the gradients too, 3 the weights too)
  bool offload_optimizer = false;
  bool reserve = true;          // back the pools with one block each at the planned peaks
  size_t device_limit = 0;      // bytes the step may take on the device; 0: the device's free memory
  OptionSpelling spelling = OptionSpelling::Flags;  // how refusals name the options
  // LoRA (off unless lora.r > 0): the base frozen, the adapters trained. Not an option of the table:
  // train's `lora` block or loss-grad's --lora-adapter folder sets it.
  LoraConfig lora;

  bool operator==(const EngineConfig&) const = default;
};

// The backend an EngineConfig asks for; on cuda, rank r of a node takes GPU r % (visible GPUs).
std::unique_ptr<Backend> make_backend(const EngineConfig& c, int world_rank);

// The memory-plan request of a step of `seq_len`-token rows under `c` over `ranks` ranks (the
// ZeRO shards), the one place it is built. `runtime`: the backend the step will run on, if any.
PlanRequest make_plan_request(const EngineConfig& c, const ModelConfig& model, int64_t seq_len, int ranks,
                              Device device, Backend* runtime);

class Engine {
 public:
  Engine(const EngineConfig& config, Communicator& world);
  ~Engine();

  const EngineConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }
  ProcessMesh& mesh() { return *mesh_; }
  Communicator& world() { return world_; }
  const std::string& comm_name() const { return comm_name_; }

  PlanRequest plan_request(const ModelConfig& model, int64_t seq_len) const;
  struct Plan {
    PlanRequest request;
    MemorySnapshot memory;
    size_t device_budget = 0, host_budget = 0;  // device_limit (or the free device memory); this host's
  };
  // Plans the step's memory, turning keep_attention on where Auto and the plan with it fits.
  // documents: how many documents a row packs (the attention's workspace may depend on it).
  Plan plan(const ModelConfig& model, int64_t seq_len, int64_t documents = 1);
  // Refuses a plan that does not fit its budgets; reserves the pools at its peaks (config.reserve).
  void check_and_reserve(const Plan& plan);
  // Both.
  MemorySnapshot prepare_memory(const ModelConfig& model, int64_t seq_len, int64_t documents = 1);
  // The step options after plan (keep_attention decided).
  const StepOptions& step_options() const { return config_.memory; }
  // Other step options before planning (bench --find-max-seq's choice).
  void set_step_options(const StepOptions& options, KeepAttention keep);

  // The weights, sharded as the ZeRO stage says: from a model folder, or (folder null) random with `seed`.
  // Frozen (no gradients) with LoRA.
  LlamaWeights& load_weights(const ModelConfig& model, const ModelFolder* folder, uint64_t seed);
  LlamaWeights& weights() { return *weights_; }
  // LoRA: the adapters of config().lora, from a PEFT adapter folder, or (dir empty) PEFT's
  // initialisation with `seed`; the model made afterwards runs them. After load_weights.
  LoraWeights& load_lora(const std::string& dir, uint64_t seed);
  LoraWeights* lora() { return lora_.get(); }
  // What the step trains: the adapters with LoRA, else the weights.
  ParameterSet& trained();
  LlamaModel& model();

  // Start-up by phase: each mark() closes a phase that began at the previous mark (the first at
  // launch); the engine marks its own (backend and communicator, plan, reserved pools, weights),
  // a command its others (optimizer state, data). report(): one line; json(): {phase: seconds,
  // "total": seconds since launch}.
  void mark(const std::string& phase);
  std::string startup_report() const;
  nlohmann::json startup_json() const;

 private:
  std::vector<std::pair<std::string, double>> startup_;
  double last_mark_ = 0;
  EngineConfig config_;
  Communicator& world_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<StepCommunicator> comm_;
  std::string comm_name_;
  std::unique_ptr<ProcessMesh> mesh_;
  std::unique_ptr<LlamaWeights> weights_;
  std::unique_ptr<LoraWeights> lora_;
  std::unique_ptr<LlamaModel> model_;
};

}  // namespace ulysses
