#include "model/gradient_accumulator.h"

#include <algorithm>

namespace ulysses {

GradientAccumulator::GradientAccumulator(LlamaWeights& weights, Backend& backend)
    : w_(weights), be_(backend), reduced_(weights.grad_dtype() != DType::F32) {
  const auto numel = [](const Parameter* p) { return shape_numel(p->shape); };
  int64_t largest = numel(&w_.embed());  // the embedding's group
  largest = std::max(largest, numel(&w_.final_norm()) + numel(&w_.lm_head()));
  for (int64_t l = 0; l < w_.config().num_hidden_layers; ++l) {
    int64_t n = 0;
    for (const Parameter* p : w_.layer(l).all()) n += numel(p);
    largest = std::max(largest, n);
  }
  largest_group_ = largest;
}

void GradientAccumulator::open(std::span<Parameter* const> group) {
  open_.clear();
  if (!reduced_) return;
  if (!scratch_.defined()) scratch_ = be_.empty({largest_group_}, DType::F32, Pool::Gradients);
  int64_t at = 0;
  for (Parameter* p : group) {
    const int64_t n = shape_numel(p->shape);
    ULY_CHECK(at + n <= largest_group_, "gradient scratch: the group of " << p->name << " is larger than planned");
    Tensor s = scratch_.slice(at, at + n).reshape(p->shape);
    be_.zero(s);
    open_.emplace_back(p, std::move(s));
    at += n;
  }
}

Tensor& GradientAccumulator::target(Parameter& p) {
  if (!reduced_) return p.grad;
  for (auto& [q, s] : open_)
    if (q == &p) return s;
  ULY_FAIL("gradient of " << p.name << " added outside its group (no open group holds it)");
}

void GradientAccumulator::close() {
  for (auto& [p, s] : open_) be_.axpy(p->grad, s, 1.0);
  open_.clear();
}

}  // namespace ulysses
