#include "model/parameter_set.h"

#include <algorithm>

#include "comm/communicator.h"
#include "parallel/collectives.h"

namespace ulysses {

ElementRange shard_range(int64_t n, int rank, int ranks) {
  ElementRange r;
  r.block = (n + ranks - 1) / ranks;
  r.lo = std::min(n, rank * r.block);
  r.hi = std::min(n, r.lo + r.block);
  return r;
}

void all_gather_blocks(Communicator& group, Backend& backend, Tensor& flat) {
  const int P = group.size(), r = group.rank();
  const int64_t n = flat.numel();
  const ElementRange mine = shard_range(n, r, P);
  const int64_t c = mine.block;
  if (n == c * P) {  // equal blocks: in place, this rank's block already where it belongs
    all_gather(group, backend, flat.slice(mine.lo, mine.hi), flat);
    return;
  }
  // Blocks of c elements, the last ones short or empty: gathered through a padded buffer.
  Tensor padded = flat.device() == Device::CPU ? Tensor::empty({c * P}, flat.dtype())
                                               : backend.empty({c * P}, flat.dtype());
  Tensor block = padded.slice(r * c, r * c + c);
  if (mine.hi > mine.lo) {
    Tensor dst = block.slice(0, mine.hi - mine.lo);
    backend.copy(dst, flat.slice(mine.lo, mine.hi));
  }
  all_gather(group, backend, block, padded);
  backend.copy(flat, padded.slice(0, n));
}

ParameterSharding zero_sharding(Communicator& group, int stage) {
  ULY_CHECK(stage >= 0 && stage <= 3, "ZeRO stage " << stage << " does not exist (0 to 3)");
  if (stage < 2) return {};
  return {&group, group.rank(), group.size(), stage >= 3};
}

ParameterSet::ParameterSet(DType grad_dtype, ParameterSharding sharding)
    : grad_dtype_(grad_dtype), sharding_(sharding) {
  ULY_CHECK(grad_dtype == DType::F32 || grad_dtype == DType::BF16,
            "gradient buffers are float32 or bfloat16, not " << dtype_name(grad_dtype));
  ULY_CHECK(sharding.ranks >= 1 && sharding.rank >= 0 && sharding.rank < sharding.ranks,
            "gradient sharding: rank " << sharding.rank << " of " << sharding.ranks);
}

size_t ParameterSet::add(const std::string& name, Shape shape) {
  params_.push_back(Parameter{name, std::move(shape), {}, {}, {}});
  return params_.size() - 1;
}

ElementRange ParameterSet::grad_range(const Parameter& p) const {
  return shard_range(shape_numel(p.shape), sharding_.rank, sharding_.ranks);
}

size_t ParameterSet::num_elements() const {
  size_t n = 0;
  for (const auto& p : params_) n += static_cast<size_t>(shape_numel(p.shape));
  return n;
}

Tensor ParameterSet::value_part(const Parameter& p, const ElementRange& range) const {
  if (weights_sharded()) {
    const ElementRange mine = grad_range(p);
    ULY_CHECK(range.lo >= mine.lo && range.hi <= mine.hi,
              p.name << ": elements [" << range.lo << ", " << range.hi << ") are outside this rank's shard ["
                     << mine.lo << ", " << mine.hi << ")");
    return p.shard.slice(range.lo - mine.lo, range.hi - mine.lo);
  }
  return p.value.reshape({p.value.numel()}).slice(range.lo, range.hi);
}

void ParameterSet::set_value(Backend& backend, Parameter& p, const Tensor& host) {
  if (!weights_sharded()) {
    backend.copy(p.value, host);
    return;
  }
  const ElementRange r = grad_range(p);
  if (r.hi == r.lo) return;
  Tensor dst = p.shard.slice(0, r.hi - r.lo);
  backend.copy(dst, host.reshape({host.numel()}).slice(r.lo, r.hi));
}

void ParameterSet::allocate(Backend& backend) {
  for (auto& p : params_) {
    const ElementRange r = grad_range(p);
    if (weights_sharded()) {
      p.value = Tensor{};
      p.shard = backend.empty({r.block}, backend.act_dtype(), Pool::Weights);
      backend.zero(p.shard);
    } else {
      p.value = backend.empty(p.shape, backend.act_dtype(), Pool::Weights);
    }
    if (frozen_) continue;
    p.grad = grads_sharded() ? backend.empty({r.hi - r.lo}, grad_dtype_, Pool::Gradients)
                             : backend.empty(p.shape, grad_dtype_, Pool::Gradients);
    backend.zero(p.grad);
  }
}

void ParameterSet::zero_grads(Backend& backend) {
  if (frozen_) return;
  const bool defer = grad_dtype_ == DType::F32 && !grads_sharded();
  for (auto& p : params_) {
    if (defer) p.grad_unset = true;
    else backend.zero(p.grad);
  }
}

void settle_grad(Parameter& p, Backend& backend) {
  if (!p.grad_unset) return;
  backend.zero(p.grad);
  p.grad_unset = false;
}

void ParameterSet::settle_grads(Backend& backend) {
  for (auto& p : params_) settle_grad(p, backend);
}

}  // namespace ulysses
