// Where each layer's input (its activation checkpoint) lives between the
// forward and the backward pass: in the device Checkpoints pool, or, for the
// first K layers (or all), in host memory (HostCheckpoints pool, pinned on CUDA).
// The backward pass asks for a layer one step ahead (prefetch) so that a
// backend with copy streams can bring it in while the layer above runs; on the
// CPU backend the copies are plain and the pools are only accounted.
#pragma once
#include <vector>

#include "backend/backend.h"

namespace ulysses {

class CheckpointStore {
 public:
  // offload_layers: how many of the first layers go to the host; -1 = all.
  CheckpointStore(Backend& backend, int64_t layers, int64_t offload_layers);
  bool offloaded(int64_t layer) const;
  // Keeps a copy of x (the layer's input) until take().
  void put(int64_t layer, const Tensor& x);
  // Starts bringing an offloaded checkpoint back to the device (no-op when it is there).
  void prefetch(int64_t layer);
  // The checkpoint on the device; its slot is released.
  Tensor take(int64_t layer);

 private:
  Backend& backend_;
  int64_t offload_layers_;
  std::vector<Tensor> slots_;    // device or host copy, per layer
  std::vector<Tensor> fetched_;  // device copy of an offloaded checkpoint, after prefetch
};

}  // namespace ulysses
