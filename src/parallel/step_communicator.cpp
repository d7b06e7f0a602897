#include "parallel/step_communicator.h"

#include <unistd.h>

#include <functional>
#include <vector>

#include "comm/nccl_communicator.h"
#include "comm/routing_communicator.h"
#include "core/error.h"

namespace ulysses {
namespace {

// Ranks on one node that would put two NCCL ranks on one GPU (NCCL refuses
// that); the message names them and the way out. GPUs are compared by PCI bus id,
// so ranks that each see their own GPU as device 0 (srun --gpus-per-task=1) pass.
void check_one_gpu_per_rank(Communicator& world, int device) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string bus = cuda_device_bus_id(device);
  const int64_t gpu = bus.empty() ? device : static_cast<int64_t>(std::hash<std::string>{}(bus));
  const int64_t mine[3] = {static_cast<int64_t>(std::hash<std::string>{}(host)), gpu, device};
  std::vector<int64_t> all(3 * static_cast<size_t>(world.size()));
  world.all_gather(mine, all.data(), 3, DType::I64);
  for (int a = 0; a < world.size(); ++a)
    for (int b = a + 1; b < world.size(); ++b)
      ULY_CHECK(all[3 * a] != all[3 * b] || all[3 * a + 1] != all[3 * b + 1],
                "comm nccl needs one GPU per rank, but ranks " << a << " and " << b << " share one GPU (cuda:"
                                                                << all[3 * a + 2] << " of rank " << a << ", cuda:"
                                                                << all[3 * b + 2] << " of rank " << b
                                                                << ") on one node; start at most "
                                                                << "as many ranks per node as it has GPUs, or use "
                                                                << "--comm mpi (device tensors staged through host "
                                                                << "memory), which lets ranks share a GPU");
}

}  // namespace

StepCommunicator::StepCommunicator(Communicator& world, Backend& backend, const std::string& kind) : comm_(&world) {
  if (kind == "mpi") return;
  ULY_CHECK(kind == "nccl", "unknown communicator '" << kind << "' (choose mpi or nccl)");
  ULY_CHECK(backend.device() == Device::CUDA,
            "comm nccl moves device buffers and needs the cuda backend (--backend cuda, or backend: cuda in a "
            "train config); the " << backend.name() << " backend's tensors are in host memory");
  const int device = backend.device_index();
  check_one_gpu_per_rank(world, device);
  owned_ = make_routing_communicator(world, make_nccl_communicator(world, device, backend.native_stream()),
                                     cuda_device_pointer);
  comm_ = owned_.get();
}

}  // namespace ulysses
