// AdamW with fp32 master weights, the learning-rate schedule and gradient
// clipping. State lives in the Optimizer pool; every rank holds all of it
// today (gradients are all-reduced first), and a ZeRO-sharded variant will
// keep a shard per rank behind the same interface.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/llama_weights.h"

namespace ulysses {

struct OptimizerConfig {
  double lr = 3e-4, min_lr = 3e-5;
  int64_t warmup_steps = 10, total_steps = 100;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;  // 0 = off
};

// Linear warmup from 0 to lr over warmup_steps, then cosine to min_lr at total_steps.
// step is 1-based (the step about to be taken).
double learning_rate(const OptimizerConfig& c, int64_t step);

class AdamW {
 public:
  // Allocates master (= the current weight values, in float32), m and v (zeros).
  AdamW(LlamaWeights& weights, Backend& backend, OptimizerConfig config);
  // Master weights from a model folder's stored tensors (exact, whatever the compute dtype).
  void load_master(const ModelFolder& folder);

  struct StepInfo {
    double lr = 0;
    double grad_norm = 0;  // before clipping
    bool applied = true;   // false: the norm was not finite, nothing was updated
  };
  // Clips by the global gradient norm and applies one update (the step count advances).
  // A non-finite gradient norm applies nothing (weights, moments and step count unchanged).
  StepInfo step();
  // The parameters whose gradients hold a NaN or an infinity (a read-back per tensor: for
  // the message after a non-finite norm, not for every step).
  std::vector<std::string> nonfinite_gradients() const;
  int64_t steps_taken() const { return steps_; }

  // State for checkpoints: master.<name>, exp_avg.<name>, exp_avg_sq.<name>, as host tensors.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::string& optimizer_file, int64_t steps_taken);
  // The master weights as host tensors named like the parameters (for saving the model).
  std::vector<std::pair<std::string, Tensor>> master_weights() const;

 private:
  struct Slot {
    Tensor master, m, v;
    bool decay;  // matrices decay, norms do not
  };
  LlamaWeights& w_;
  Backend& be_;
  OptimizerConfig config_;
  std::vector<Slot> slots_;
  int64_t steps_ = 0;
};

}  // namespace ulysses
