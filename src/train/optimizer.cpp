#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "backend/profile_scope.h"
#include "io/safetensors.h"
#include "parallel/collectives.h"

namespace ulysses {

double learning_rate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  const int64_t decay_steps = c.total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / decay_steps);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

namespace {

// Rank r's elements of a parameter of n elements over P ranks: [r·c, (r+1)·c) clipped to n,
// c = ceil(n / P) (the all-gather's equal blocks).
int64_t piece(int64_t n, int P) { return (n + P - 1) / P; }

}  // namespace

AdamW::AdamW(LlamaWeights& weights, Backend& backend, OptimizerConfig config, Communicator* shard_group)
    : w_(weights), be_(backend), config_(config), group_(shard_group != nullptr && shard_group->size() > 1
                                                          ? shard_group
                                                          : nullptr) {
  const int P = shards(), r = group_ == nullptr ? 0 : group_->rank();
  for (Parameter& p : w_.params()) {
    Slot s;
    const int64_t n = p.value.numel(), c = piece(n, P);
    s.lo = std::min(n, r * c);
    s.hi = std::min(n, s.lo + c);
    s.master = be_.empty({s.hi - s.lo}, DType::F32, Pool::Optimizer);
    s.m = be_.empty({s.hi - s.lo}, DType::F32, Pool::Optimizer);
    s.v = be_.empty({s.hi - s.lo}, DType::F32, Pool::Optimizer);
    be_.copy(s.master, part(p.value, s));
    be_.zero(s.m);
    be_.zero(s.v);
    s.decay = p.shape.size() >= 2;
    slots_.push_back(std::move(s));
  }
}

Tensor AdamW::part(const Tensor& t, const Slot& s) { return t.reshape({t.numel()}).slice(s.lo, s.hi); }

void AdamW::load_master(const ModelFolder& folder) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = w_.params()[i];
    be_.copy(slots_[i].master, part(folder.file_of(p.name).read_f32(p.name), slots_[i]));
  }
}

AdamW::StepInfo AdamW::step() {
  ProfileScope prof(be_, "optimizer");
  StepInfo info;
  // The gradients are whole on every rank: the norm needs no communication.
  std::vector<const Tensor*> grads;
  for (const Parameter& p : w_.params()) grads.push_back(&p.grad);
  info.grad_norm = std::sqrt(be_.sum_squares_all(grads));
  if (!std::isfinite(info.grad_norm)) {
    info.applied = false;
    info.lr = learning_rate(config_, steps_ + 1);
    return info;
  }
  ++steps_;
  info.lr = learning_rate(config_, steps_);
  AdamWParams a;
  a.lr = info.lr;
  a.beta1 = config_.beta1;
  a.beta2 = config_.beta2;
  a.eps = config_.eps;
  a.step = steps_;
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when the norm exceeds max_norm.
  a.grad_scale = (config_.grad_clip > 0 && info.grad_norm > config_.grad_clip)
                     ? config_.grad_clip / (info.grad_norm + 1e-6)
                     : 1.0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Parameter& p = w_.params()[i];
    Slot& s = slots_[i];
    if (s.hi == s.lo) continue;
    a.weight_decay = s.decay ? config_.weight_decay : 0.0;
    Tensor weight = part(p.value, s);
    be_.adamw_step(s.master, s.m, s.v, weight, part(p.grad, s), a);
  }
  if (group_ != nullptr) {
    prof.next("optimizer all-gather");
    for (size_t i = 0; i < slots_.size(); ++i) all_gather_weights(w_.params()[i], slots_[i]);
  }
  return info;
}

void AdamW::all_gather_weights(Parameter& p, const Slot& s) {
  const int P = group_->size();
  const int64_t n = p.value.numel(), c = piece(n, P), r = group_->rank();
  Tensor flat = p.value.reshape({n});
  if (n == c * P) {  // equal blocks: in place, this rank's block already where it belongs
    all_gather(*group_, be_, flat.slice(s.lo, s.hi), flat);
    return;
  }
  // Blocks of c elements, the last ones short or empty: gathered through a padded buffer.
  Tensor padded = be_.empty({c * P}, p.value.dtype());
  Tensor mine = padded.slice(r * c, r * c + c);
  if (s.hi > s.lo) {
    Tensor dst = mine.slice(0, s.hi - s.lo);
    be_.copy(dst, part(p.value, s));
  }
  all_gather(*group_, be_, mine, padded);
  be_.copy(flat, padded.slice(0, n));
}

std::vector<std::string> AdamW::nonfinite_gradients() const {
  std::vector<std::string> out;
  for (const Parameter& p : w_.params())
    if (!std::isfinite(be_.sum_squares(p.grad))) out.push_back(p.name);
  return out;
}

Tensor AdamW::gather(const Tensor& shard, const Slot& s, const Shape& shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor whole = Tensor::empty(shape, DType::F32);
  if (group_ == nullptr) {
    Tensor flat = whole.reshape({n});
    be_.copy(flat, shard);
    return whole;
  }
  // On the host (checkpoints are not the hot path): every rank's block, padded to c elements.
  const int P = group_->size();
  const int64_t c = piece(n, P);
  Tensor mine = Tensor::empty({c}, DType::F32), all = Tensor::empty({c * P}, DType::F32);
  std::fill(mine.data<float>(), mine.data<float>() + c, 0.0f);
  if (s.hi > s.lo) {
    Tensor dst = mine.slice(0, s.hi - s.lo);
    be_.copy(dst, shard);
  }
  group_->all_gather(mine.raw(), all.raw(), static_cast<size_t>(c), DType::F32);
  std::copy(all.data<float>(), all.data<float>() + n, whole.data<float>());
  return whole;
}

OptimizerSnapshot AdamW::snapshot(bool keep) const {
  OptimizerSnapshot out;
  out.steps_taken = steps_;
  if (!keep && group_ == nullptr) return out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = w_.params()[i];
    const Slot& s = slots_[i];
    Tensor master = gather(s.master, s, p.shape);
    out.master.emplace_back(p.name, master);
    out.state.emplace_back("master." + p.name, master);
    out.state.emplace_back("exp_avg." + p.name, gather(s.m, s, p.shape));
    out.state.emplace_back("exp_avg_sq." + p.name, gather(s.v, s, p.shape));
    if (!keep) out.master.clear(), out.state.clear();  // took part in the gathers only
  }
  return out;
}

void AdamW::load_state(const std::string& path, int64_t steps_taken) {
  SafetensorsFile f = SafetensorsFile::open(path);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Parameter& p = w_.params()[i];
    Slot& s = slots_[i];
    for (const auto& [prefix, t] :
         {std::pair<const char*, Tensor*>{"master.", &s.master}, {"exp_avg.", &s.m}, {"exp_avg_sq.", &s.v}}) {
      const std::string name = prefix + p.name;
      ULY_CHECK(f.contains(name), path << ": optimizer state has no '" << name << "'");
      ULY_CHECK(f.info(name).shape == p.shape, path << ": '" << name << "' has shape " << shape_str(f.info(name).shape)
                                                    << ", the model needs " << shape_str(p.shape));
      const Tensor whole = f.read_f32(name);
      be_.copy(*t, part(whole, s));
      if (t == &s.master) be_.copy(p.value, whole);  // the compute copy follows the master exactly
    }
  }
  steps_ = steps_taken;
}

}  // namespace ulysses
