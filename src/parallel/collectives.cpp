#include "parallel/collectives.h"

namespace ulysses {
namespace {

bool needs_staging(const Communicator& comm, const Tensor& t) {
  return t.device() != Device::CPU && !comm.device_buffers();
}

// Runs `call(send_buffer, recv_buffer)` on the buffers the communicator takes: the
// tensors themselves, or host copies staged here (the result copied back into recv).
template <class Call>
void staged(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv, Call call) {
  if (!needs_staging(comm, send)) {
    call(send.raw(), recv.raw());
    return;
  }
  Tensor hs = Tensor::empty(send.shape(), send.dtype(), backend.offload_allocator());
  backend.copy(hs, send);
  Tensor hr = Tensor::empty(recv.shape(), recv.dtype(), backend.offload_allocator());
  call(hs.raw(), hr.raw());
  backend.copy(recv, hr);
}

}  // namespace

void all_to_all(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype() && send.numel() % comm.size() == 0,
            "all_to_all: send " << send.describe() << " and recv " << recv.describe() << " do not match for "
                                << comm.size() << " ranks");
  const size_t count = static_cast<size_t>(send.numel() / comm.size());
  staged(comm, backend, send, recv, [&](const void* s, void* r) { comm.all_to_all(s, r, count, send.dtype()); });
}

void sendrecv(Communicator& comm, Backend& backend, const Tensor& send, int dest, Tensor& recv, int source) {
  ULY_CHECK(send.dtype() == recv.dtype(), "sendrecv: send " << send.describe() << " and recv " << recv.describe()
                                                            << " differ in dtype");
  const auto n = [](const Tensor& t) { return static_cast<size_t>(t.numel()); };
  staged(comm, backend, send, recv, [&](const void* s, void* r) {
    comm.sendrecv(s, n(send), dest, r, n(recv), source, send.dtype(), /*tag=*/7);
  });
}

void all_reduce_sum(Communicator& comm, Backend& backend, Tensor& t) {
  if (comm.size() == 1) return;
  const size_t count = static_cast<size_t>(t.numel());
  staged(comm, backend, t, t,
         [&](const void* s, void* r) { comm.all_reduce(s, r, count, t.dtype(), ReduceOp::Sum); });
}

void all_gather(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(recv.numel() == send.numel() * comm.size() && send.dtype() == recv.dtype(),
            "all_gather: recv " << recv.describe() << " must hold " << comm.size() << " × send " << send.describe());
  const size_t count = static_cast<size_t>(send.numel());
  staged(comm, backend, send, recv, [&](const void* s, void* r) { comm.all_gather(s, r, count, send.dtype()); });
}

void reduce_scatter_sum(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(send.numel() == recv.numel() * comm.size() && send.dtype() == recv.dtype(),
            "reduce_scatter: send " << send.describe() << " must hold " << comm.size() << " × recv "
                                    << recv.describe());
  const size_t count = static_cast<size_t>(recv.numel());
  staged(comm, backend, send, recv,
         [&](const void* s, void* r) { comm.reduce_scatter(s, r, count, send.dtype(), ReduceOp::Sum); });
}

}  // namespace ulysses
