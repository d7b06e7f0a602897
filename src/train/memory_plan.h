// The memory plan of a training step: the step code run on the planning
// backend (backend/planning_backend.h) for a model, a sequence length, a
// sequence-parallel degree and the memory options. Planned and measured
// figures come in the same MemorySnapshot form so they can be compared.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_pools.h"
#include "io/hf_config.h"
#include "io/peft_adapter.h"
#include "model/llama.h"

namespace ulysses {

class WorkLedger;

struct MemorySnapshot {
  std::array<PoolCounters, kNumPools> pools{};
  std::array<PoolCounters, kNumMemTags> tags{};
  PoolCounters device{}, host{};
  // The device allocations live at the device peak (plan_step_memory with itemize).
  std::vector<LiveAllocation> at_peak;
  static MemorySnapshot of(const MemoryPools& pools);
  size_t peak(Pool p) const { return pools[static_cast<int>(p)].peak; }
  size_t peak(MemTag t) const { return tags[static_cast<int>(t)].peak; }
};

struct PlanRequest {
  ModelConfig config;
  int64_t seq_len = 0;  // tokens of one sequence (the global length)
  int sp = 1;           // sequence-parallel degree
  int ring = 1;         // ring-attention degree inside sp (the hybrid mesh; parallel/mesh.h)
  bool zigzag = false;  // zigzag token layout over the ring
  StepOptions options;
  DType act_dtype = DType::F32;  // F32 plans the cpu backend, BF16 the cuda one
  Device device = Device::CPU;
  bool optimizer = false;  // include AdamW state (fp32 master + two moments) as the trainer allocates it
  int optimizer_shards = 1;  // ranks sharing that state (ZeRO stage 1: the world size); rank 0's share is planned
  int gradient_shards = 1;   // ranks sharing the gradients (ZeRO stage 2: the world size); rank 0's share
  int weight_shards = 1;     // ranks sharing the compute weights (ZeRO stage 3: the world size, as the gradients)
  bool optimizer_offload = false;  // that state in host memory (host-optimizer pool), the update on the CPU
  int64_t documents = 1;   // documents packed in the sequence (equal lengths); kernels' workspaces may depend on it
  // The backend the step will run on, when it exists: it answers for its own scratch memory
  // (backend/planning_backend.h). Without it a CUDA plan estimates the attention workspace.
  Backend* runtime = nullptr;
  // LoRA (lora.r > 0): the base frozen (no gradients, no optimizer state), the adapters with theirs.
  LoraConfig lora;
  // The step-time model's dry run (train/step_time.h): each op's work and every collective go
  // here, and the dry run is the whole step bench times (zero grads, the gradient reduction over
  // the sp ranks, the optimizer), not only the forward and backward whose memory peaks.
  WorkLedger* work = nullptr;
};

// Local tokens per rank (the sequence padded by the token layout, divided by sp).
int64_t local_tokens(const PlanRequest& r);
// itemize: a second dry run records the allocations live when the device peak is reached.
MemorySnapshot plan_step_memory(const PlanRequest& r, bool itemize = false);

// The allocations live at the device peak, grouped by pool and label, largest first: at most
// `rows` lines, then one for the rest.
std::string peak_items_report(const MemorySnapshot& m, size_t rows = 16);

// c = (device peak − weights − gradients − optimizer − device checkpoints) /
//     (local tokens × hidden × 2 bytes): the working set per token, in units of
// one bf16 hidden vector (ALST ≈ 13-18; lower is better).
double working_coefficient(const MemorySnapshot& m, int64_t local_tokens, int64_t hidden);

// A table per pool (current at the end of the step, peak) with the totals and c.
std::string memory_report(const MemorySnapshot& m, int64_t local_tokens, int64_t hidden);

// The longest sequence (a multiple of `granularity` tokens and of the degree) whose plan
// fits `device_budget` and `host_budget` bytes with the request's options; 0 when even
// `granularity` tokens do not fit. req.seq_len is ignored. Doubling, then bisection: about
// 2 log2(S / granularity) dry runs.
int64_t max_sequence(PlanRequest req, size_t device_budget, size_t host_budget, int64_t granularity = 1024);

// How advice names the memory options: as the flags of loss-grad, bench and plan, or as
// the keys of a train config (which takes no flags).
enum class OptionSpelling { Flags, TrainKeys };

// Empty when the planned device peak fits `device_available` bytes and the host peak
// `host_available`; otherwise one sentence: which is over and by how much, and which
// memory option (or degree) would make the step fit, spelled as `spelling` says.
std::string plan_misfit(const PlanRequest& r, const MemorySnapshot& planned, size_t device_available,
                        size_t host_available, OptionSpelling spelling = OptionSpelling::Flags);

// keep-attention auto's rule (Engine::plan, and ulysses plan): whether the step of `r` with each
// layer's attention output kept fits both budgets; `device_peak`: that step's planned device peak.
bool keep_attention_fits(const PlanRequest& r, size_t device_available, size_t host_available,
                         size_t* device_peak = nullptr);

// Throws plan_misfit's sentence, with where to see the plan per pool, when the step does not fit.
void check_plan_fits(const PlanRequest& r, const MemorySnapshot& planned, size_t device_available,
                     size_t host_available, OptionSpelling spelling = OptionSpelling::Flags);

// The step's host-side token arrays (ids, targets, positions, document starts) and the
// planner's own per-token bookkeeping take about kHostBytesPerToken bytes per token of a
// sequence, outside the pools the plan counts. Refuses, before any of them is allocated,
// `tokens` that would not fit `host_available` bytes ("`what` of N tokens needs ...").
inline constexpr size_t kHostBytesPerToken = 64;
void check_tokens_fit_host(const std::string& what, int64_t tokens, size_t host_available);

}  // namespace ulysses
