// One group, two transports: collectives on device buffers go to the device
// communicator (NCCL), those on host buffers to the host one (MPI or TCP). The step
// code mixes both — tensors on the GPU, and host scalars such as token counts
// and the agreement checks of the mesh — so a GPU run with NCCL needs both, in
// the same group with the same ranks.
//
// Every buffer of one call must be on the same side (else a clear error). The
// two communicators must be over the same processes in the same rank order
// (the device one bootstrapped from the host one, as make_nccl_communicator does).
#pragma once
#include <functional>
#include <memory>

#include "comm/communicator.h"

namespace ulysses {

using DevicePointerTest = std::function<bool(const void*)>;

// host: borrowed (it must outlive the result, e.g. the MPI world); device: owned.
std::unique_ptr<Communicator> make_routing_communicator(Communicator& host, std::unique_ptr<Communicator> device,
                                                        DevicePointerTest on_device);

}  // namespace ulysses
