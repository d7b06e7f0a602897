// Where the backward adds each parameter's gradient. With whole float32 gradient buffers: into
// the buffers themselves. Otherwise into a float32 scratch that holds one group of parameters at
// a time (a layer, the final norm with lm_head, the embedding), handed on when the group's
// backward is done:
//  - bfloat16 buffers (LlamaWeights' grad_dtype, half the memory): added into them, so every
//    contribution of a group (MLP tiles, loss tiles, head chunks) is summed in float32 and a
//    buffer is rounded once per group per sequence, not once per tile;
//  - sharded buffers (ZeRO stage 2, LlamaWeights' grad_sharding): each parameter's gradient
//    reduce-scattered over the sharding group, this rank's block added into its shard, so a
//    rank never holds more than one group's whole gradients. Every rank of the group must run
//    the same groups in the same order (as many sequences each).
#pragma once
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/llama_weights.h"

namespace ulysses {

class GradientAccumulator {
 public:
  GradientAccumulator(LlamaWeights& weights, Backend& backend);

  // From here until close(), target(p) for the group's parameters. A group opened while another
  // is open (after a failure in the middle of a backward) drops the other's scratch.
  void open(std::span<Parameter* const> group);
  void open(std::initializer_list<Parameter*> group) { open(std::span<Parameter* const>(group.begin(), group.size())); }
  // The tensor p's gradient is added into (float32, p's shape): p.grad, or p's part of the scratch.
  Tensor& target(Parameter& p);
  // Hands the open group's scratch on (above). Nothing with whole float32 buffers.
  void close();

  // Elements of the scratch: the largest group's, each parameter padded to whole blocks when
  // sharded (0 with whole float32 buffers).
  int64_t scratch_elements() const { return uses_scratch_ ? largest_group_ : 0; }

 private:
  struct Open {
    Parameter* p;
    Tensor view;    // p's shape
    Tensor padded;  // flat, ranks × block elements (sharded), else the view's elements
  };
  // Scratch elements of p: n, or ranks × block when sharded.
  int64_t span_of(const Parameter& p) const;
  LlamaWeights& w_;
  Backend& be_;
  bool uses_scratch_;
  int64_t largest_group_ = 0;
  Tensor scratch_;  // float32 [largest_group_] in the Gradients pool, allocated at the first open()
  std::vector<Open> open_;
};

}  // namespace ulysses
