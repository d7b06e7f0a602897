#include "model/parameter_store.h"

#include "backend/profile_scope.h"
#include "parallel/collectives.h"

namespace ulysses {

ParameterStore::ParameterStore(LlamaWeights& weights, Backend& backend, bool prefetching)
    : w_(weights), be_(backend), sharded_(weights.weights_sharded()), prefetching_(prefetching) {
  if (sharded_) slots_.resize(w_.params().size());
}

ParameterStore::~ParameterStore() {
  try {
    drop_unused();
  } catch (const std::exception&) {
    // A destructor cannot throw; a failure here follows another one already on its way up.
  }
}

std::vector<Parameter*> ParameterStore::members(int64_t group) {
  if (group == kEmbedding) return {&w_.embed()};
  if (group == kHead) return {&w_.final_norm(), &w_.lm_head()};
  ULY_CHECK(group >= 0 && group < w_.config().num_hidden_layers, "parameter store: no group " << group);
  const auto all = w_.layer(group).all();
  return {all.begin(), all.end()};
}

ParameterStore::Slot& ParameterStore::slot(const Parameter& p) {
  return slots_[static_cast<size_t>(&p - w_.params().data())];
}

void ParameterStore::start(Parameter& p) {
  Slot& s = slot(p);
  if (s.padded.defined()) return;
  const ParameterSharding& sh = w_.sharding();
  const int64_t block = p.shard.numel();
  s.padded = be_.empty({block * sh.ranks}, p.shard.dtype(), Pool::Weights);
  if (sh.group != nullptr) {
    s.gather = all_gather_async(*sh.group, be_, p.shard, s.padded);
  } else {  // the planner's dry run: the same memory, no peers
    Tensor mine = s.padded.slice(sh.rank * block, (sh.rank + 1) * block);
    be_.copy(mine, p.shard);
  }
}

void ParameterStore::finish(Parameter& p) {
  Slot& s = slot(p);
  if (s.gather) {
    s.gather->wait();
    s.gather.reset();
  }
  if (!p.value.defined()) p.value = s.padded.slice(0, shape_numel(p.shape)).reshape(p.shape);
}

void ParameterStore::prefetch(int64_t group) {
  if (!sharded_ || !prefetching_ || group == kNone) return;
  ProfileScope prof(be_, "weight all-gather");
  for (Parameter* p : members(group)) start(*p);
}

void ParameterStore::acquire(int64_t group) {
  if (!sharded_) return;
  ProfileScope prof(be_, "weight all-gather");
  const std::vector<Parameter*> ps = members(group);
  for (Parameter* p : ps) start(*p);
  for (Parameter* p : ps) {
    finish(*p);
    ++slot(*p).users;
  }
}

void ParameterStore::release(int64_t group) {
  if (!sharded_) return;
  for (Parameter* p : members(group)) {
    Slot& s = slot(*p);
    if (s.users > 0 && --s.users == 0) {
      p->value = Tensor{};
      s.padded = Tensor{};
    }
  }
}

void ParameterStore::drop_unused() {
  if (!sharded_) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.gather) {
      s.gather->wait();
      s.gather.reset();
    }
    if (s.users == 0) {
      w_.params()[i].value = Tensor{};
      s.padded = Tensor{};
    }
  }
}

}  // namespace ulysses
