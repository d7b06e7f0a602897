// The communicator the training step runs on, chosen by --comm (or `comm:` in a
// train config):
//   mpi  — the world itself; device tensors are staged through pinned host
//          memory (works with several ranks sharing one GPU);
//   nccl — the same ranks with device buffers on NCCL (bootstrapped over the
//          world) and host buffers on the world (comm/routing_communicator.h).
//          Needs the cuda backend and one GPU per rank.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace ulysses {

class StepCommunicator {
 public:
  // Collective over `world` for kind "nccl"; throws a clear error for an unknown
  // kind, a non-cuda backend, or ranks that share a GPU.
  StepCommunicator(Communicator& world, Backend& backend, const std::string& kind);
  Communicator& get() { return *comm_; }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* comm_;
};

}  // namespace ulysses
