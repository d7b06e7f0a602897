#include "model/checkpoint_store.h"

#include <algorithm>

#include "backend/profile_scope.h"

namespace ulysses {

CheckpointStore::CheckpointStore(Backend& backend, int64_t layers, int64_t offload_layers)
    : backend_(backend), offload_layers_(offload_layers < 0 ? layers : std::min(offload_layers, layers)), slots_(layers) {}

CheckpointStore::~CheckpointStore() {
  // A store dropped mid-pass (an error) must not free memory a copy still uses.
  try {
    finish_put();
    for (Slot& s : slots_) backend_.wait_transfer(s.fetch_id);
  } catch (const std::exception&) {
    try {
      backend_.synchronize();  // cannot order the copies: wait for everything instead
    } catch (const std::exception&) {
      // the device is already failing; the error that brought us here is being reported
    }
  }
}

bool CheckpointStore::offloaded(int64_t layer) const { return layer < offload_layers_; }

void CheckpointStore::finish_put() {
  ProfileScope prof(backend_, "checkpoint store");
  backend_.wait_transfer(put_id_);
  put_id_ = 0;
  put_source_ = Tensor{};
}

void CheckpointStore::put(int64_t layer, const Tensor& x) {
  ProfileScope prof(backend_, "checkpoint store");
  finish_put();
  Slot& s = slots_[layer];
  if (offloaded(layer)) {
    s.stored = backend_.empty(x.shape(), x.dtype(), Pool::HostCheckpoints);
    put_id_ = backend_.copy_async(s.stored, x);
    put_source_ = x;
  } else {
    s.stored = backend_.empty(x.shape(), x.dtype(), Pool::Checkpoints);
    backend_.copy(s.stored, x);
  }
}

void CheckpointStore::prefetch(int64_t layer) {
  ProfileScope prof(backend_, "checkpoint store");
  finish_put();
  if (layer < 0 || !offloaded(layer)) return;
  Slot& s = slots_[layer];
  if (s.fetched.defined()) return;
  ULY_CHECK(s.stored.defined(), "checkpoint of layer " << layer << " was never stored");
  s.fetched = backend_.empty(s.stored.shape(), s.stored.dtype(), Pool::Working);
  s.fetch_id = backend_.copy_async(s.fetched, s.stored);
}

Tensor CheckpointStore::take(int64_t layer) {
  ProfileScope prof(backend_, "checkpoint store");
  prefetch(layer);
  Slot& s = slots_[layer];
  Tensor out = offloaded(layer) ? s.fetched : s.stored;
  ULY_CHECK(out.defined(), "checkpoint of layer " << layer << " was never stored");
  backend_.wait_transfer(s.fetch_id);
  s = Slot{};  // the host copy may go: the copy in has been joined
  return out;
}

}  // namespace ulysses
