#include "model/checkpoint_store.h"

namespace ulysses {

CheckpointStore::CheckpointStore(Backend& backend, int64_t layers, int64_t offload_layers)
    : backend_(backend),
      offload_layers_(offload_layers < 0 ? layers : std::min(offload_layers, layers)),
      slots_(layers),
      fetched_(layers) {}

bool CheckpointStore::offloaded(int64_t layer) const { return layer < offload_layers_; }

void CheckpointStore::put(int64_t layer, const Tensor& x) {
  Tensor slot = backend_.empty(x.shape(), x.dtype(), offloaded(layer) ? Pool::HostCheckpoints : Pool::Checkpoints);
  backend_.copy(slot, x);
  slots_[layer] = slot;
}

void CheckpointStore::prefetch(int64_t layer) {
  if (layer < 0 || !offloaded(layer) || fetched_[layer].defined()) return;
  const Tensor& host = slots_[layer];
  ULY_CHECK(host.defined(), "checkpoint of layer " << layer << " was never stored");
  fetched_[layer] = backend_.empty(host.shape(), host.dtype(), Pool::Working);
  backend_.copy(fetched_[layer], host);
  slots_[layer] = Tensor{};
}

Tensor CheckpointStore::take(int64_t layer) {
  prefetch(layer);
  Tensor out = offloaded(layer) ? fetched_[layer] : slots_[layer];
  ULY_CHECK(out.defined(), "checkpoint of layer " << layer << " was never stored");
  slots_[layer] = fetched_[layer] = Tensor{};
  return out;
}

}  // namespace ulysses
