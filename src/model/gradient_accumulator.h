// Where the backward adds each parameter's gradient. With float32 gradient buffers: into the
// buffers themselves. With bfloat16 buffers (LlamaWeights' grad_dtype, half the memory): into a
// float32 scratch that holds one group of parameters at a time (a layer, the final norm with
// lm_head, the embedding), added into the buffers when the group's backward is done. Every
// contribution of a group (MLP tiles, loss tiles, head chunks) is then summed in float32 and a
// buffer is rounded once per group per sequence, not once per tile.
#pragma once
#include <span>
#include <utility>
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
  // The tensor p's gradient is added into (float32): p.grad, or p's slice of the scratch.
  Tensor& target(Parameter& p);
  // bfloat16 buffers: each parameter's buffer += its scratch (one rounding). Nothing otherwise.
  void close();

  // Elements of the scratch: the largest group's (0 with float32 buffers).
  int64_t scratch_elements() const { return reduced_ ? largest_group_ : 0; }

 private:
  LlamaWeights& w_;
  Backend& be_;
  bool reduced_;
  int64_t largest_group_ = 0;
  Tensor scratch_;  // float32 [largest_group_] in the Gradients pool, allocated at the first open()
  std::vector<std::pair<Parameter*, Tensor>> open_;  // the open group's parameters and their scratch
};

}  // namespace ulysses
