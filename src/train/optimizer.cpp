#include "train/optimizer.h"

#include <cmath>

#include "backend/profile_scope.h"
#include "io/safetensors.h"

namespace ulysses {

double learning_rate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  const int64_t decay_steps = c.total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / decay_steps);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(LlamaWeights& weights, Backend& backend, OptimizerConfig config)
    : w_(weights), be_(backend), config_(config) {
  for (Parameter& p : w_.params()) {
    Slot s;
    s.master = be_.empty(p.shape, DType::F32, Pool::Optimizer);
    s.m = be_.empty(p.shape, DType::F32, Pool::Optimizer);
    s.v = be_.empty(p.shape, DType::F32, Pool::Optimizer);
    be_.copy(s.master, p.value);
    be_.zero(s.m);
    be_.zero(s.v);
    s.decay = p.shape.size() >= 2;
    slots_.push_back(std::move(s));
  }
}

void AdamW::load_master(const ModelFolder& folder) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = w_.params()[i];
    be_.copy(slots_[i].master, folder.file_of(p.name).read_f32(p.name));
  }
}

AdamW::StepInfo AdamW::step() {
  ProfileScope prof(be_, "optimizer");
  StepInfo info;
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
    a.weight_decay = slots_[i].decay ? config_.weight_decay : 0.0;
    be_.adamw_step(slots_[i].master, slots_[i].m, slots_[i].v, p.value, p.grad, a);
  }
  return info;
}

std::vector<std::string> AdamW::nonfinite_gradients() const {
  std::vector<std::string> out;
  for (const Parameter& p : w_.params())
    if (!std::isfinite(be_.sum_squares(p.grad))) out.push_back(p.name);
  return out;
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::string& name = w_.params()[i].name;
    for (const auto& [prefix, t] : {std::pair<const char*, const Tensor*>{"master.", &slots_[i].master},
                                    {"exp_avg.", &slots_[i].m},
                                    {"exp_avg_sq.", &slots_[i].v}}) {
      Tensor host = Tensor::empty(t->shape(), DType::F32);
      be_.copy(host, *t);
      out.emplace_back(prefix + name, host);
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> AdamW::master_weights() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Tensor host = Tensor::empty(slots_[i].master.shape(), DType::F32);
    be_.copy(host, slots_[i].master);
    out.emplace_back(w_.params()[i].name, host);
  }
  return out;
}

void AdamW::load_state(const std::string& path, int64_t steps_taken) {
  SafetensorsFile f = SafetensorsFile::open(path);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Parameter& p = w_.params()[i];
    for (const auto& [prefix, t] : {std::pair<const char*, Tensor*>{"master.", &slots_[i].master},
                                    {"exp_avg.", &slots_[i].m},
                                    {"exp_avg_sq.", &slots_[i].v}}) {
      const std::string name = prefix + p.name;
      ULY_CHECK(f.contains(name), path << ": optimizer state has no '" << name << "'");
      ULY_CHECK(f.info(name).shape == p.shape, path << ": '" << name << "' has shape " << shape_str(f.info(name).shape)
                                                    << ", the model needs " << shape_str(p.shape));
      be_.copy(*t, f.read_f32(name));
    }
    be_.copy(p.value, slots_[i].master);  // the compute copy follows the master exactly
  }
  steps_ = steps_taken;
}

}  // namespace ulysses
