#include "model/gradient_accumulator.h"

#include <algorithm>

#include "comm/communicator.h"
#include "parallel/collectives.h"

namespace ulysses {

GradientAccumulator::GradientAccumulator(LlamaWeights& weights, Backend& backend)
    : w_(weights), be_(backend), uses_scratch_(weights.grad_dtype() != DType::F32 || weights.grads_sharded()) {
  const GradientSharding& sh = w_.grad_sharding();
  ULY_CHECK(sh.group == nullptr || sh.group->size() == sh.ranks,
            "gradient sharding over " << sh.ranks << " ranks but its group has " << sh.group->size());
  int64_t largest = span_of(w_.embed());  // the embedding's group
  largest = std::max(largest, span_of(w_.final_norm()) + span_of(w_.lm_head()));
  for (int64_t l = 0; l < w_.config().num_hidden_layers; ++l) {
    int64_t n = 0;
    for (const Parameter* p : w_.layer(l).all()) n += span_of(*p);
    largest = std::max(largest, n);
  }
  largest_group_ = largest;
}

int64_t GradientAccumulator::span_of(const Parameter& p) const {
  const int64_t n = shape_numel(p.shape);
  return w_.grads_sharded() ? w_.grad_range(p).block * w_.grad_sharding().ranks : n;
}

void GradientAccumulator::open(std::span<Parameter* const> group) {
  open_.clear();
  if (!uses_scratch_) return;
  if (!scratch_.defined()) scratch_ = be_.empty({largest_group_}, DType::F32, Pool::Gradients);
  int64_t at = 0;
  for (Parameter* p : group) {
    const int64_t span = span_of(*p);
    ULY_CHECK(at + span <= largest_group_, "gradient scratch: the group of " << p->name << " is larger than planned");
    Tensor padded = scratch_.slice(at, at + span);
    be_.zero(padded);  // the padding too: it takes part in the reduce-scatter
    open_.push_back(Open{p, padded.slice(0, shape_numel(p->shape)).reshape(p->shape), padded});
    at += span;
  }
}

Tensor& GradientAccumulator::target(Parameter& p) {
  if (!uses_scratch_) return p.grad;
  for (Open& o : open_)
    if (o.p == &p) return o.view;
  ULY_FAIL("gradient of " << p.name << " added outside its group (no open group holds it)");
}

void GradientAccumulator::close() {
  const GradientSharding& sh = w_.grad_sharding();
  for (Open& o : open_) {
    if (!w_.grads_sharded()) {
      be_.axpy(o.p->grad, o.view, 1.0);
      continue;
    }
    const ElementRange r = w_.grad_range(*o.p);
    Tensor mine = be_.empty({r.block}, DType::F32);
    if (sh.group != nullptr) {
      reduce_scatter_sum(*sh.group, be_, o.padded, mine);
    } else {  // the planner's dry run: this rank's block as it is (the same memory, no peers)
      be_.copy(mine, o.padded.slice(sh.rank * r.block, (sh.rank + 1) * r.block));
    }
    if (r.hi > r.lo) be_.axpy(o.p->grad, mine.slice(0, r.hi - r.lo), 1.0);
  }
  open_.clear();
}

}  // namespace ulysses
