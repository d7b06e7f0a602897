// Where the backward adds each parameter's gradient. With whole float32 gradient buffers: into
// the buffers themselves. Otherwise into a float32 scratch that holds one group of parameters at
// a time (a layer, the final norm with lm_head, the embedding), handed on when the group's
// backward is done:
//  - bfloat16 buffers (LlamaWeights' grad_dtype, half the memory): added into them, so every
//    contribution of a group (MLP tiles, loss tiles, head chunks) is summed in float32 and a
//    buffer is rounded once per group per sequence, not once per tile;
//  - sharded buffers (ZeRO stages 2 and 3, LlamaWeights' sharding): each parameter's gradient
//    reduce-scattered over the sharding group, this rank's block added into its shard, so a
//    rank never holds more than two groups' whole gradients. The reduce-scatter is started
//    when the group closes and runs during the next group's backward; its block is added into
//    the shard, and its scratch freed, when the group after that opens, or at flush(). Every
//    rank of the group must run the same groups in the same order (as many sequences each).
// Frozen weights (LoRA's base) have no gradients: the model skips their weight GEMMs, and the
// small ops that compute a weight's gradient beside an input's (RMSNorm, biases) write theirs
// into a scratch that nothing reads.
#pragma once
#include <deque>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/llama_weights.h"

namespace ulysses {

class GradientAccumulator {
 public:
  // overlap: sharded, a group's reduce-scatter runs until the group after next opens (else it is
  // waited for at close()).
  GradientAccumulator(LlamaWeights& weights, Backend& backend, bool overlap = true);

  // From here until close(), target(p) for the group's parameters. A group opened while another
  // is open (after a failure in the middle of a backward) drops the other's scratch.
  void open(std::span<Parameter* const> group);
  void open(std::initializer_list<Parameter*> group) { open(std::span<Parameter* const>(group.begin(), group.size())); }
  // The tensor p's gradient is added into (float32, p's shape): p.grad, or p's part of the scratch.
  // An unset gradient (zero_grads deferred) is zeroed first.
  Tensor& target(Parameter& p);
  // The same tensor for a contribution that can overwrite instead of add (a GEMM's beta): beta = 0
  // when it is p's first this step (its gradient was unset), else 1.
  Tensor& first_write(Parameter& p, double& beta);
  // Hands the open group's scratch on (above). With whole float32 buffers, zeroes the group's
  // gradients that no contribution reached (e.g. after an empty backward).
  void close();
  // Sharded: waits for every reduce-scatter in flight and adds its block into the shards, so
  // that the gradient buffers are complete. The model calls it at the end of each backward.
  void flush();
  // The weights are frozen: no gradient of theirs is kept (target() gives a scratch).
  bool frozen() const { return frozen_; }

 private:
  struct Open {
    Parameter* p;
    Tensor view;    // p's shape
    Tensor padded;  // flat, ranks × block elements (sharded), else the view's elements
  };
  // A reduce-scatter in flight: this rank's block of p's summed gradient arrives in `mine`.
  struct InFlight {
    Parameter* p;
    Tensor mine;  // float32 [block]
    CommHandle request;
  };
  // A closed group whose reduce-scatters are in flight, with the scratch they read.
  struct Closed {
    Tensor scratch;
    std::vector<InFlight> parts;
  };
  // Waits for a closed group's reduce-scatters and adds their blocks into the shards.
  void finish(Closed& closed);
  // Scratch elements of p: n, or ranks × block when sharded.
  int64_t span_of(const Parameter& p) const;
  LlamaWeights& w_;
  Backend& be_;
  bool frozen_;
  bool uses_scratch_;
  bool overlap_;
  // Frozen: the discarded gradients' buffer (the largest asked for so far) and its view.
  Tensor discard_, discard_view_;
  // The open group's scratch: float32, the group's elements, in the Gradients pool. Sized per group
  // (the embedding's and lm_head's are several layers' size), so that a group in flight and the
  // open one hold only their own.
  Tensor scratch_;
  std::vector<Open> open_;
  // Sharded: the closed groups whose reduce-scatters are in flight, oldest first (at most two: the
  // last one runs during the open group's backward).
  std::deque<Closed> in_flight_;
};

}  // namespace ulysses
