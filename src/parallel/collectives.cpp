#include "parallel/collectives.h"

namespace ulysses {
namespace {

bool needs_staging(const Communicator& comm, const Tensor& t) {
  return t.device() != Device::CPU && !comm.device_buffers();
}

Tensor host_copy(Backend& backend, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), backend.offload_allocator());
  backend.copy(h, t);
  return h;
}

}  // namespace

void all_to_all(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype() && send.numel() % comm.size() == 0,
            "all_to_all: send " << send.describe() << " and recv " << recv.describe() << " do not match for "
                                << comm.size() << " ranks");
  const size_t count = static_cast<size_t>(send.numel() / comm.size());
  if (!needs_staging(comm, send)) {
    comm.all_to_all(send.raw(), recv.raw(), count, send.dtype());
    return;
  }
  Tensor hs = host_copy(backend, send);
  Tensor hr = Tensor::empty(recv.shape(), recv.dtype(), backend.offload_allocator());
  comm.all_to_all(hs.raw(), hr.raw(), count, send.dtype());
  backend.copy(recv, hr);
}

void sendrecv(Communicator& comm, Backend& backend, const Tensor& send, int dest, Tensor& recv, int source) {
  ULY_CHECK(send.dtype() == recv.dtype(), "sendrecv: send " << send.describe() << " and recv " << recv.describe()
                                                            << " differ in dtype");
  const auto n = [](const Tensor& t) { return static_cast<size_t>(t.numel()); };
  if (!needs_staging(comm, send)) {
    comm.sendrecv(send.raw(), n(send), dest, recv.raw(), n(recv), source, send.dtype(), /*tag=*/7);
    return;
  }
  Tensor hs = host_copy(backend, send);
  Tensor hr = Tensor::empty(recv.shape(), recv.dtype(), backend.offload_allocator());
  comm.sendrecv(hs.raw(), n(send), dest, hr.raw(), n(recv), source, send.dtype(), /*tag=*/7);
  backend.copy(recv, hr);
}

void all_reduce_sum(Communicator& comm, Backend& backend, Tensor& t) {
  if (comm.size() == 1) return;
  if (!needs_staging(comm, t)) {
    comm.all_reduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), t.dtype(), ReduceOp::Sum);
    return;
  }
  Tensor h = host_copy(backend, t);
  comm.all_reduce(h.raw(), h.raw(), static_cast<size_t>(t.numel()), t.dtype(), ReduceOp::Sum);
  backend.copy(t, h);
}

}  // namespace ulysses
