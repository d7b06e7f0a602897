// AdamW with fp32 master weights, the learning-rate schedule and gradient
// clipping. State lives in the Optimizer pool. Without a shard group every rank
// holds all of it; with one (ZeRO stage 1 over the data × sequence ranks) each
// rank keeps master, m and v for its 1/P of every parameter's elements, updates
// that part of the weights, and the updated weights are all-gathered. Gradients
// are whole on every rank (all-reduced by the step), so the update, elementwise,
// is bit-identical to the unsharded one; or (ZeRO stage 2) sharded as the state is,
// each rank holding the reduce-scattered sums of its elements only (LlamaWeights'
// sharding, the same blocks); or (ZeRO stage 3) the compute copies sharded too: each rank
// updates its shard of the weights and nothing is gathered (the model gathers a layer's
// weights when it uses them: model/parameter_store.h).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
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

// The optimizer's state gathered whole (for a checkpoint), named as in optimizer.safetensors.
struct OptimizerSnapshot {
  std::vector<std::pair<std::string, Tensor>> master;  // host float32, named like the parameters
  std::vector<std::pair<std::string, Tensor>> state;   // master.<name>, exp_avg.<name>, exp_avg_sq.<name>
  int64_t steps_taken = 0;
};

// Where the optimizer's state lives and who updates it.
struct OptimizerPlacement {
  // ZeRO stage 1: the state sharded over these ranks (null or one rank: unsharded). The
  // group must outlive the optimizer; every call below is then collective over it.
  Communicator* shard_group = nullptr;
  // The state in (pinned) host memory and the update on the CPU: each gradient comes to
  // the host in chunks, AdamW runs there (all cores), the new weights go back.
  bool offload = false;
};

class AdamW {
 public:
  // Allocates master (= the current weight values, in float32), m and v (zeros): for
  // every element, or with a shard group of P ranks for this rank's 1/P of each parameter.
  AdamW(ParameterSet& weights, Backend& backend, OptimizerConfig config, OptimizerPlacement placement = {});
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
  // Ranks sharing the state (1: unsharded).
  int shards() const { return group_ == nullptr ? 1 : group_->size(); }

  // The whole state as host tensors, on the ranks that keep it (the one that writes the
  // checkpoint); collective when sharded, so every rank of the group calls it. State
  // already whole in host memory is returned as views of it: valid until the next step().
  // masters_only: the masters alone (for the model folder, when the ranks write their own shards).
  OptimizerSnapshot snapshot(bool keep, bool masters_only = false) const;
  // This rank's part of the state (master., exp_avg., exp_avg_sq.<name>, flat) as one safetensors
  // file: a checkpoint's optimizer/rank-R-of-P (train/checkpoint.h). Not collective.
  void save_shard(const std::string& path) const;
  // Reads the `ranks` shard files a checkpoint's optimizer/ holds (written by any number of
  // ranks) and takes this rank's elements from the files that hold them; the weights follow the
  // masters exactly. Collective over the shard group (the weights are gathered).
  void load_shards(const std::string& checkpoint_dir, int ranks, int64_t steps_taken);
  // Reads optimizer.safetensors (whole tensors, whatever group wrote them) and takes this
  // rank's part; the weights follow the masters exactly.
  void load_state(const std::string& optimizer_file, int64_t steps_taken);

 private:
  struct Slot {
    Tensor master, m, v;  // [hi - lo] float32: elements [lo, hi) of the flattened parameter
    int64_t lo = 0, hi = 0;
    bool decay;  // matrices decay, norms do not
  };
  // After the masters changed outside step(): the weights take their values (rounded to the
  // compute dtype), and unsharded weights are gathered whole again.
  void weights_from_masters();
  // A parameter's elements [lo, hi) as a flat view.
  static Tensor part(const Tensor& t, const Slot& s);
  // The compute copy of a slot's elements: part of p's whole value, or its shard (ZeRO stage 3).
  Tensor weight_part(const Parameter& p, const Slot& s) const;
  // The gradient of a slot's elements: part of p's whole gradient, or p's shard (ZeRO stage 2).
  Tensor grad_part(const Parameter& p, const Slot& s) const;
  // The whole of one of a slot's tensors on the host, in the parameter's shape.
  Tensor gather(const Tensor& shard, const Slot& s, const Shape& shape) const;
  // Unsharded weights of which each rank updated its part: gathered whole again on every rank
  // (nothing without a shard group, or with ZeRO stage 3's sharded weights).
  void gather_weights();
  // dst (host, float32) <- src (the backend's, any float dtype), converted on the device in chunks.
  void to_host(Tensor& dst, const Tensor& src);
  // The offloaded update of every slot, as a pipeline over chunks: chunk k + 1's gradient
  // comes to the host (transfer stream) while the CPU updates chunk k, whose new weights go
  // back (transfer stream, then the cast to the compute dtype on the device) during k + 1.
  void update_on_host(AdamWParams a);
  ParameterSet& w_;
  Backend& be_;
  OptimizerConfig config_;
  Communicator* group_;  // null: unsharded
  bool offload_;
  std::unique_ptr<Backend> host_;  // runs the offloaded update
  Tensor grad_stage_[2], weight_stage_[2];  // host chunks (offload; gradients in their buffers' dtype), double-buffered
  std::vector<Slot> slots_;
  int64_t steps_ = 0;
};

}  // namespace ulysses
