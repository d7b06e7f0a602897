#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "backend/profile_scope.h"
#include "io/safetensors.h"
#include "parallel/collectives.h"
#include "train/checkpoint.h"

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

// Elements per host round trip of the offloaded update (64 MiB of float32 each way).
constexpr int64_t kHostChunk = int64_t{1} << 24;

}  // namespace

AdamW::AdamW(ParameterSet& weights, Backend& backend, OptimizerConfig config, OptimizerPlacement placement)
    : w_(weights),
      be_(backend),
      config_(config),
      group_(placement.shard_group != nullptr && placement.shard_group->size() > 1 ? placement.shard_group : nullptr),
      offload_(placement.offload) {
  const int P = shards(), r = group_ == nullptr ? 0 : group_->rank();
  // ZeRO stage 2: this rank holds only the gradients of the elements it updates.
  const ParameterSharding& sh = w_.sharding();
  ULY_CHECK(!w_.grads_sharded() || (sh.ranks == P && sh.rank == r),
            "the gradients are sharded over " << sh.ranks << " ranks (ZeRO stage 2) but the optimizer's state over "
                                              << P << ": shard both over the same ranks");
  const Pool pool = offload_ ? Pool::HostOptimizer : Pool::Optimizer;
  int64_t largest = 0;
  for (Parameter& p : w_.params()) {
    Slot s;
    const ElementRange range = shard_range(shape_numel(p.shape), r, P);
    s.lo = range.lo;
    s.hi = range.hi;
    largest = std::max(largest, s.hi - s.lo);
    s.master = be_.empty({s.hi - s.lo}, DType::F32, pool);
    s.m = be_.empty({s.hi - s.lo}, DType::F32, pool);
    s.v = be_.empty({s.hi - s.lo}, DType::F32, pool);
    if (offload_) to_host(s.master, weight_part(p, s));
    else be_.copy(s.master, weight_part(p, s));
    be_.zero(s.m);
    be_.zero(s.v);
    s.decay = p.shape.size() >= 2;
    slots_.push_back(std::move(s));
  }
  if (offload_) {
    host_ = make_cpu_backend();
    const int64_t chunk = std::max<int64_t>(1, std::min(largest, kHostChunk));
    for (int i = 0; i < 2; ++i) {
      grad_stage_[i] = be_.empty({chunk}, w_.grad_dtype(), Pool::HostOptimizer);  // moved as stored
      weight_stage_[i] = be_.empty({chunk}, DType::F32, Pool::HostOptimizer);
    }
  }
}

void AdamW::to_host(Tensor& dst, const Tensor& src) {
  if (src.device() == Device::CPU || src.dtype() == DType::F32) {
    be_.copy(dst, src);
    return;
  }
  for (int64_t a = 0; a < src.numel(); a += kHostChunk) {
    const int64_t b = std::min(src.numel(), a + kHostChunk);
    Tensor f32 = be_.empty({b - a}, DType::F32);  // the cast runs on the device
    be_.copy(f32, src.slice(a, b));
    Tensor out = dst.slice(a, b);
    be_.copy(out, f32);
  }
}

void AdamW::update_on_host(AdamWParams a) {
  struct Chunk {
    size_t slot;
    int64_t lo, hi;  // of the slot's elements
  };
  std::vector<Chunk> chunks;
  const int64_t size = grad_stage_[0].numel();
  for (size_t i = 0; i < slots_.size(); ++i)
    for (int64_t lo = 0; lo < slots_[i].hi - slots_[i].lo; lo += size)
      chunks.push_back({i, lo, std::min(slots_[i].hi - slots_[i].lo, lo + size)});
  const auto grad_of = [&](const Chunk& c) { return grad_part(w_.params()[c.slot], slots_[c.slot]).slice(c.lo, c.hi); };
  const bool device = be_.device() != Device::CPU;
  Tensor scratch[2];  // the new weights in float32 on the device, before the cast
  uint64_t incoming = 0;
  if (!chunks.empty()) {
    Tensor g = grad_stage_[0].slice(0, chunks[0].hi - chunks[0].lo);
    incoming = be_.copy_async(g, grad_of(chunks[0]));
  }
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Chunk& c = chunks[k];
    Slot& s = slots_[c.slot];
    Parameter& p = w_.params()[c.slot];
    const int64_t n = c.hi - c.lo;
    const int b = static_cast<int>(k % 2);
    // Chunk k's gradient is here once the compute stream (which waits for it) has drained;
    // that also retires chunk k - 2's weights, whose staging buffer this chunk reuses.
    be_.wait_transfer(incoming);
    be_.synchronize();
    if (k + 1 < chunks.size()) {
      Tensor g = grad_stage_[1 - b].slice(0, chunks[k + 1].hi - chunks[k + 1].lo);
      incoming = be_.copy_async(g, grad_of(chunks[k + 1]));
    }
    Tensor g = grad_stage_[b].slice(0, n), w = weight_stage_[b].slice(0, n);
    Tensor master = s.master.slice(c.lo, c.hi), m = s.m.slice(c.lo, c.hi), v = s.v.slice(c.lo, c.hi);
    a.weight_decay = s.decay ? config_.weight_decay : 0.0;
    host_->adamw_step(master, m, v, w, g, a);
    Tensor dst = weight_part(p, s).slice(c.lo, c.hi);
    if (!device) {
      be_.copy(dst, w);
    } else if (dst.dtype() == DType::F32) {
      be_.wait_transfer(be_.copy_async(dst, w));
    } else {  // float32 to the device, rounded to the compute dtype there
      if (!scratch[b].defined()) scratch[b] = be_.empty({size}, DType::F32);
      Tensor f32 = scratch[b].slice(0, n);
      be_.wait_transfer(be_.copy_async(f32, w));
      be_.copy(dst, f32);
    }
  }
  be_.synchronize();  // the staging buffers are free again when step() returns
}

Tensor AdamW::part(const Tensor& t, const Slot& s) { return t.reshape({t.numel()}).slice(s.lo, s.hi); }

Tensor AdamW::weight_part(const Parameter& p, const Slot& s) const { return w_.value_part(p, {s.lo, s.hi}); }

Tensor AdamW::grad_part(const Parameter& p, const Slot& s) const {
  return w_.grads_sharded() ? p.grad : part(p.grad, s);
}

void AdamW::load_master(const ModelFolder& folder) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = w_.params()[i];
    be_.copy(slots_[i].master, part(folder.file_of(p.name).read_f32(p.name), slots_[i]));
  }
}

AdamW::StepInfo AdamW::step() {
  ProfileScope prof(be_, "optimizer");
  w_.settle_grads(be_);  // a step with no backward since zero_grads reads zeros
  StepInfo info;
  // Whole gradients are the same on every rank: their norm needs no communication; sharded ones
  // (ZeRO stage 2) sum their squares over the group.
  std::vector<const Tensor*> grads;
  for (const Parameter& p : w_.params()) grads.push_back(&p.grad);
  double squares = be_.sum_squares_all(grads);
  if (w_.grads_sharded()) {
    double local = squares;
    group_->all_reduce(&local, &squares, 1, DType::F64, ReduceOp::Sum);
  }
  info.grad_norm = std::sqrt(squares);
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
  if (offload_) {
    update_on_host(a);
  } else {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Parameter& p = w_.params()[i];
      Slot& s = slots_[i];
      if (s.hi == s.lo) continue;
      a.weight_decay = s.decay ? config_.weight_decay : 0.0;
      Tensor weight = weight_part(p, s);
      be_.adamw_step(s.master, s.m, s.v, weight, grad_part(p, s), a);
    }
  }
  if (group_ != nullptr && !w_.weights_sharded()) {  // ZeRO stage 3 keeps only the shards
    prof.next("optimizer all-gather");
    gather_weights();
  }
  return info;
}

std::vector<std::string> AdamW::nonfinite_gradients() const {
  std::vector<std::string> out;
  for (const Parameter& p : w_.params())
    if (!std::isfinite(be_.sum_squares(p.grad))) out.push_back(p.name);
  return out;
}

Tensor AdamW::gather(const Tensor& shard, const Slot& s, const Shape& shape) const {
  // Whole and already in host memory (offloaded, or the CPU backend): a view, not a copy (for
  // the 8B shape the offloaded state is 89 GiB of the host's memory; a copy would not fit).
  if (group_ == nullptr && shard.device() == Device::CPU) return shard.reshape(shape);
  // On the host (checkpoints are not the hot path).
  Tensor whole = Tensor::empty(shape, DType::F32);
  Tensor flat = whole.reshape({whole.numel()});
  if (s.hi > s.lo) {
    Tensor mine = flat.slice(s.lo, s.hi);
    be_.copy(mine, shard);
  }
  if (group_ != nullptr) all_gather_blocks(*group_, be_, flat);
  return whole;
}

OptimizerSnapshot AdamW::snapshot(bool keep, bool masters_only) const {
  OptimizerSnapshot out;
  out.steps_taken = steps_;
  if (!keep && group_ == nullptr) return out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = w_.params()[i];
    const Slot& s = slots_[i];
    Tensor master = gather(s.master, s, p.shape);
    out.master.emplace_back(p.name, master);
    if (!masters_only) {
      out.state.emplace_back("master." + p.name, master);
      out.state.emplace_back("exp_avg." + p.name, gather(s.m, s, p.shape));
      out.state.emplace_back("exp_avg_sq." + p.name, gather(s.v, s, p.shape));
    }
    if (!keep) out.master.clear(), out.state.clear();  // took part in the gathers only
  }
  return out;
}

void AdamW::save_shard(const std::string& path) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    for (const auto& [prefix, t] : {std::pair<const char*, const Tensor*>{"master.", &s.master},
                                    {"exp_avg.", &s.m}, {"exp_avg_sq.", &s.v}}) {
      Tensor host = t->device() == Device::CPU ? *t : Tensor::empty({s.hi - s.lo}, DType::F32);
      if (t->device() != Device::CPU) be_.copy(host, *t);
      out.emplace_back(prefix + w_.params()[i].name, host);
    }
  }
  write_safetensors(path, out,
                    {{"steps_taken", std::to_string(steps_)},
                     {"rank", std::to_string(group_ == nullptr ? 0 : group_->rank())},
                     {"ranks", std::to_string(shards())}});
}

void AdamW::load_shards(const std::string& dir, int ranks, int64_t steps_taken) {
  ULY_CHECK(ranks >= 1, dir << ": optimizer state in " << ranks << " shards");
  std::vector<SafetensorsFile> files;
  for (int k = 0; k < ranks; ++k) files.push_back(SafetensorsFile::open(optimizer_shard_file(dir, k, ranks)));
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = w_.params()[i];
    Slot& s = slots_[i];
    const int64_t n = shape_numel(p.shape);
    for (const auto& [prefix, t] :
         {std::pair<const char*, Tensor*>{"master.", &s.master}, {"exp_avg.", &s.m}, {"exp_avg_sq.", &s.v}}) {
      const std::string name = prefix + p.name;
      // Old rank k held [k c, (k + 1) c) clipped to n: the files overlapping this rank's [lo, hi).
      for (int k = 0; k < ranks; ++k) {
        const ElementRange old = shard_range(n, k, ranks);
        const int64_t lo = std::max(old.lo, s.lo), hi = std::min(old.hi, s.hi);
        if (lo >= hi) continue;
        const SafetensorsFile& f = files[static_cast<size_t>(k)];
        ULY_CHECK(f.contains(name), f.path() << ": optimizer shard has no '" << name << "'");
        ULY_CHECK(f.info(name).shape == Shape{old.hi - old.lo},
                  f.path() << ": '" << name << "' has shape " << shape_str(f.info(name).shape) << ", rank " << k
                           << " of " << ranks << " holds " << old.hi - old.lo << " elements of it");
        const Tensor part = f.read_f32(name);
        Tensor dst = t->slice(lo - s.lo, hi - s.lo);
        be_.copy(dst, part.slice(lo - old.lo, hi - old.lo));
      }
    }
  }
  steps_ = steps_taken;
  weights_from_masters();
}

void AdamW::weights_from_masters() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.hi == s.lo) continue;
    Tensor weight = weight_part(w_.params()[i], s);
    be_.copy(weight, s.master);
  }
  gather_weights();
}

void AdamW::gather_weights() {
  if (group_ == nullptr || w_.weights_sharded()) return;
  for (Parameter& p : w_.params()) {
    Tensor flat = p.value.reshape({p.value.numel()});
    all_gather_blocks(*group_, be_, flat);
  }
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
      if (t == &s.master) w_.set_value(be_, p, whole);  // the compute copy follows the master exactly
    }
  }
  steps_ = steps_taken;
}

}  // namespace ulysses
