// A set of named parameters, each with its compute copy and its gradient buffer, and how they
// are sharded over ranks: the decoder's weights (model/llama_weights.h) and the LoRA adapters
// (model/lora_weights.h). The optimizer (train/optimizer.h) updates any set.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"

namespace ulysses {

class Communicator;

// Rank r's elements of a flattened parameter of n elements shared by P ranks: [r·c, (r+1)·c)
// clipped to n, c = ceil(n / P) (equal blocks, the last ones short or empty). ZeRO's layout,
// for the optimizer's state (stage 1) and the gradients (stage 2).
struct ElementRange {
  int64_t lo = 0, hi = 0;
  int64_t block = 0;  // c: every rank's block size (padded)
};
ElementRange shard_range(int64_t n, int rank, int ranks);
// flat (n elements, on the device or the host) holds this rank's shard_range(n, rank, size) of
// `group` at its place; afterwards it holds every rank's. Collective over the group.
void all_gather_blocks(Communicator& group, Backend& backend, Tensor& flat);

// ZeRO stages 2 and 3: every gradient sharded over `ranks` ranks, this one holding
// shard_range(n, rank, ranks) of each; the backward reduce-scatters each group of parameters'
// gradients over `group` (model/gradient_accumulator.h). Stage 3 (weights = true) shards the
// compute copies the same way: the model gathers a group's whole values before using them and
// drops them after (model/parameter_store.h). A null group (the memory planner's dry run) keeps
// this rank's block as it is and gathers nothing. The group must outlive the weights.
struct ParameterSharding {
  Communicator* group = nullptr;
  int rank = 0, ranks = 1;
  bool weights = false;
};
// ZeRO stage `stage` over every rank of `group`, as this rank of it: nothing sharded below 2,
// the gradients at 2, the gradients and the weights at 3.
ParameterSharding zero_sharding(Communicator& group, int stage);

struct Parameter {
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
  Tensor value;  // compute copy on the backend's device, in its act_dtype(); with weight sharding
                 // (ZeRO stage 3) defined only while gathered (model/parameter_store.h)
  Tensor shard;  // weight sharding only: this rank's elements of the value, flat, one whole block
                 // (shard_range's block; past the parameter's end zero), so that it can be all-gathered as it is
  Tensor grad;   // on the backend's device: float32, or bfloat16 (the set's grad_dtype); with
                 // gradient sharding, this rank's elements only (flat, ParameterSet::grad_range); undefined
                 // when the set is frozen
  // zero_grads deferred (whole float32 gradients): `grad` holds no value yet. Its first contribution
  // overwrites it (a weight gradient's GEMM with beta 0, GradientAccumulator::first_write) instead of a
  // zeroing pass and an accumulate; anything else zeroes it first (settle_grad).
  bool grad_unset = false;
};

// Zeroes p's gradient if it is unset (Parameter::grad_unset), so that it can be added into or read.
void settle_grad(Parameter& p, Backend& backend);

class ParameterSet {
 public:
  // grad_dtype: the gradient buffers' dtype, float32, or bfloat16 for half their memory.
  explicit ParameterSet(DType grad_dtype = DType::F32, ParameterSharding sharding = {});
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;
  virtual ~ParameterSet() = default;

  // Whole float32 gradients are only marked unset (Parameter::grad_unset): the backward's first
  // contribution to each overwrites it. Others (bfloat16, sharded) are zeroed here.
  void zero_grads(Backend& backend);
  // Zeroes every gradient still unset: before gradients are read other than by a backward.
  void settle_grads(Backend& backend);
  // Values and gradients allocated (values uninitialised), gradients zeroed; with weight
  // sharding the shards instead of the values (zeroed: their padding is gathered too).
  // A frozen set gets no gradient buffers.
  void allocate(Backend& backend);
  // Sets p's value from a whole host float32 tensor (p's shard of it, with weight sharding).
  void set_value(Backend& backend, Parameter& p, const Tensor& host);

  // Frozen (LoRA's base): no gradient is computed or kept for any parameter. Set before allocate.
  void freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }
  DType grad_dtype() const { return grad_dtype_; }
  const ParameterSharding& sharding() const { return sharding_; }
  bool grads_sharded() const { return sharding_.ranks > 1; }
  bool weights_sharded() const { return sharding_.ranks > 1 && sharding_.weights; }
  // The elements of p's flattened gradient (and, with weight sharding, value) this rank holds
  // ([0, n) unsharded).
  ElementRange grad_range(const Parameter& p) const;
  // The elements [range.lo, range.hi) of p's value, flat: part of the whole value, or the shard.
  Tensor value_part(const Parameter& p, const ElementRange& range) const;
  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  size_t num_elements() const;

 protected:
  // Appends a parameter (no memory yet); its index. Pointers into params() are taken only after
  // the last one is added.
  size_t add(const std::string& name, Shape shape);

 private:
  DType grad_dtype_;
  ParameterSharding sharding_;
  bool frozen_ = false;
  std::vector<Parameter> params_;
};

}  // namespace ulysses
