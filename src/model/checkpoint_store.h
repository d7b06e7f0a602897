// Where each layer's input (its activation checkpoint) lives between the
// forward and the backward pass: in the device Checkpoints pool, or, for the
// first K layers (or all), in host memory (HostCheckpoints pool, pinned on CUDA).
//
// Offloaded copies run on the backend's transfer stream (Backend::copy_async):
// a layer's input goes out while that layer runs, and the compute stream waits
// for it only when the next layer's checkpoint is stored (then the device copy
// can be freed). In backward, prefetch(l - 1) brings the next checkpoint in
// while layer l runs; take() waits for it. On the CPU backend the copies are
// plain and the pools are only accounted.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace ulysses {

class CheckpointStore {
 public:
  // offload_layers: how many of the first layers go to the host; -1 = all.
  CheckpointStore(Backend& backend, int64_t layers, int64_t offload_layers);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  bool offloaded(int64_t layer) const;
  // Keeps a copy of x (the layer's input) until take(). x must not change until
  // the next put() or take() (the copy out may still be reading it).
  void put(int64_t layer, const Tensor& x);
  // Starts bringing an offloaded checkpoint back to the device (no-op when it is there).
  void prefetch(int64_t layer);
  // The checkpoint on the device; its slot is released.
  Tensor take(int64_t layer);
  // Joins the copy out still in flight (if any) and lets go of its source; the
  // forward pass calls it after the last layer so that input is freed early.
  void finish_put();

 private:
  struct Slot {
    Tensor stored;          // device or host copy
    Tensor fetched;         // device copy of an offloaded checkpoint, after prefetch
    uint64_t fetch_id = 0;  // the copy in, until take() joins it
  };
  Backend& backend_;
  int64_t offload_layers_;
  std::vector<Slot> slots_;
  Tensor put_source_;     // the layer input an offload copy is reading
  uint64_t put_id_ = 0;
};

}  // namespace ulysses
