#include "model/gradient_accumulator.h"

#include "backend/profile_scope.h"
#include "comm/communicator.h"
#include "parallel/collectives.h"

namespace ulysses {

GradientAccumulator::GradientAccumulator(LlamaWeights& weights, Backend& backend, bool overlap)
    : w_(weights), be_(backend), frozen_(weights.frozen()),
      uses_scratch_(!frozen_ && (weights.grad_dtype() != DType::F32 || weights.grads_sharded())),
      overlap_(overlap) {
  const ParameterSharding& sh = w_.sharding();
  ULY_CHECK(sh.group == nullptr || sh.group->size() == sh.ranks,
            "gradient sharding over " << sh.ranks << " ranks but its group has " << sh.group->size());
}

int64_t GradientAccumulator::span_of(const Parameter& p) const {
  const int64_t n = shape_numel(p.shape);
  return w_.grads_sharded() ? w_.grad_range(p).block * w_.sharding().ranks : n;
}

void GradientAccumulator::open(std::span<Parameter* const> group) {
  open_.clear();
  scratch_ = Tensor{};
  if (frozen_) return;
  if (!uses_scratch_) {
    for (Parameter* p : group) open_.push_back(Open{p, p->grad, p->grad});
    return;
  }
  int64_t total = 0;
  for (Parameter* p : group) total += span_of(*p);
  // The group before last's reduce-scatters ran during the last group's backward: their sums go
  // into the shards and their scratch is freed before this one's is taken. The last group's run on,
  // during this one's backward.
  while (in_flight_.size() > 1) {
    finish(in_flight_.front());
    in_flight_.pop_front();
  }
  scratch_ = be_.empty({total}, DType::F32, Pool::Gradients);
  int64_t at = 0;
  for (Parameter* p : group) {
    const int64_t span = span_of(*p);
    Tensor padded = scratch_.slice(at, at + span);
    be_.zero(padded);  // the padding too: it takes part in the reduce-scatter
    open_.push_back(Open{p, padded.slice(0, shape_numel(p->shape)).reshape(p->shape), padded});
    at += span;
  }
}

Tensor& GradientAccumulator::target(Parameter& p) {
  if (frozen_) {
    const int64_t n = shape_numel(p.shape);
    if (!discard_.defined() || discard_.numel() < n) {
      discard_ = be_.empty({n}, be_.accumulator_dtype(be_.act_dtype()), Pool::Gradients);
      be_.zero(discard_);
    }
    discard_view_ = discard_.slice(0, n).reshape(p.shape);
    return discard_view_;
  }
  if (!uses_scratch_) {
    settle_grad(p, be_);
    return p.grad;
  }
  for (Open& o : open_)
    if (o.p == &p) return o.view;
  ULY_FAIL("gradient of " << p.name << " added outside its group (no open group holds it)");
}

Tensor& GradientAccumulator::first_write(Parameter& p, double& beta) {
  beta = !uses_scratch_ && p.grad_unset ? 0.0 : 1.0;
  if (beta == 0.0) {
    p.grad_unset = false;
    return p.grad;
  }
  return target(p);
}

void GradientAccumulator::close() {
  if (frozen_) return;
  const ParameterSharding& sh = w_.sharding();
  if (!uses_scratch_) {
    for (Open& o : open_) settle_grad(*o.p, be_);
    open_.clear();
    return;
  }
  if (!w_.grads_sharded()) {
    for (Open& o : open_) be_.axpy(o.p->grad, o.view, 1.0);
    open_.clear();
    scratch_ = Tensor{};
    return;
  }
  ProfileScope prof(be_, "grad reduce-scatter");
  Closed closed;
  for (Open& o : open_) {
    const ElementRange r = w_.grad_range(*o.p);
    InFlight f{o.p, be_.empty({r.block}, DType::F32), nullptr};
    if (sh.group != nullptr) {
      f.request = reduce_scatter_sum_async(*sh.group, be_, o.padded, f.mine);
    } else {  // the planner's dry run: this rank's block as it is (the same memory, no peers)
      be_.copy(f.mine, o.padded.slice(sh.rank * r.block, (sh.rank + 1) * r.block));
    }
    closed.parts.push_back(std::move(f));
  }
  closed.scratch = std::move(scratch_);
  scratch_ = Tensor{};
  open_.clear();
  if (overlap_) in_flight_.push_back(std::move(closed));
  else finish(closed);
}

void GradientAccumulator::finish(Closed& closed) {
  if (closed.parts.empty()) return;
  ProfileScope prof(be_, "grad reduce-scatter");
  for (InFlight& f : closed.parts) {
    if (f.request) f.request->wait();
    const ElementRange r = w_.grad_range(*f.p);
    if (r.hi > r.lo) be_.axpy(f.p->grad, f.mine.slice(0, r.hi - r.lo), 1.0);
  }
  closed = Closed{};
}

void GradientAccumulator::flush() {
  // Oldest first: the shards get their sums in the order the groups closed.
  for (Closed& c : in_flight_) finish(c);
  in_flight_.clear();
}

}  // namespace ulysses
