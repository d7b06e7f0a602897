#include "parallel/collectives.h"

#include <optional>
#include <vector>

namespace ulysses {
namespace {

bool needs_staging(const Communicator& comm, const Tensor& t) {
  return t.device() != Device::CPU && !comm.device_buffers();
}

// The dtype a sum moves in. A bfloat16 tensor the communicator reduces natively where it lies
// (NCCL on device memory) goes as it is: no copy, half the bytes of float32 on the wire, and
// one rounding per step of the collective's algorithm (one in all for two ranks, as the float32
// path). Otherwise a float32 copy is reduced and rounded back into the tensor once.
DType sum_wire(const Communicator& comm, const Tensor& t) {
  if (t.dtype() != DType::BF16) return t.dtype();
  return !needs_staging(comm, t) && comm.reduces_bf16(t.raw()) ? DType::BF16 : DType::F32;
}

// A communication on tensors in flight: holds the tensors until the transfer is done
// (a device buffer freed earlier could be reused by compute while the transfer still
// reads it), and, when staged, copies the host result into the device tensor.
class TensorRequest final : public CommRequest {
 public:
  TensorRequest(Backend& backend, CommHandle inner, std::vector<Tensor> keep, Tensor staged_recv, Tensor recv)
      : backend_(backend), inner_(std::move(inner)), keep_(std::move(keep)), staged_recv_(std::move(staged_recv)),
        recv_(std::move(recv)) {}
  ~TensorRequest() override {
    try {
      wait();
    } catch (const std::exception&) {
      // A destructor cannot throw; a failure here follows another one already on its way up.
    }
  }
  void wait() override {
    if (!inner_) return;
    CommHandle inner = std::move(inner_);
    inner->wait();
    if (staged_recv_.defined()) backend_.copy(recv_, staged_recv_);
    keep_.clear();
    staged_recv_ = recv_ = Tensor{};
  }

 private:
  Backend& backend_;
  CommHandle inner_;
  std::vector<Tensor> keep_;
  Tensor staged_recv_, recv_;
};

// Runs `start(send_buffer, recv_buffer)` on the buffers the communicator takes: the
// tensors themselves, or copies staged here (the result copied back into recv by the
// returned request's wait()): in host memory when the communicator takes no device
// buffers, and in the dtype `wire` when it is not the tensors' own (copies convert).
// start returns the communicator's request. in_place: send and recv are one tensor
// (all_reduce), so one buffer serves both.
template <class Start>
CommHandle staged(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv, Start start,
                  bool in_place = false, std::optional<DType> wire_dtype = std::nullopt) {
  const DType wire = wire_dtype.value_or(send.dtype());
  const bool to_host = needs_staging(comm, send);
  if (!to_host && wire == send.dtype()) {
    CommHandle inner = start(send.raw(), recv.raw());
    return std::make_unique<TensorRequest>(backend, std::move(inner), std::vector<Tensor>{send, recv}, Tensor{},
                                           Tensor{});
  }
  const auto buffer = [&](const Shape& shape) {
    return to_host ? Tensor::empty(shape, wire, backend.staging_allocator()) : backend.empty(shape, wire);
  };
  Tensor hs = buffer(send.shape());
  // The copy waits for the compute that makes `send`: meanwhile the transfers already in flight
  // move on (a layer's reduce-scatter during the next layer's backward).
  if (to_host && send.device() != Device::CPU) backend.synchronize_polling([&] { comm.progress(); });
  backend.copy(hs, send);
  Tensor hr = in_place ? hs : buffer(recv.shape());
  CommHandle inner = start(hs.raw(), hr.raw());
  return std::make_unique<TensorRequest>(backend, std::move(inner), std::vector<Tensor>{hs, send}, hr, recv);
}

// staged() for a blocking call `call(send_buffer, recv_buffer)`: complete on return.
template <class Call>
void staged_now(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv, Call call) {
  staged(comm, backend, send, recv, [&](const void* s, void* r) {
    call(s, r);
    return completed_request();
  })->wait();
}

}  // namespace

CommHandle sendrecv_async(Communicator& comm, Backend& backend, const Tensor& send, int dest, Tensor& recv,
                          int source, int tag) {
  ULY_CHECK(send.dtype() == recv.dtype(), "sendrecv: send " << send.describe() << " and recv " << recv.describe()
                                                            << " differ in dtype");
  const auto n = [](const Tensor& t) { return static_cast<size_t>(t.numel()); };
  return staged(comm, backend, send, recv, [&](const void* s, void* r) {
    return comm.sendrecv_async(s, n(send), dest, r, n(recv), source, send.dtype(), tag);
  });
}

CommHandle all_reduce_sum_async(Communicator& comm, Backend& backend, Tensor& t) {
  if (comm.size() == 1) return completed_request();
  const size_t count = static_cast<size_t>(t.numel());
  const DType wire = sum_wire(comm, t);
  return staged(
      comm, backend, t, t,
      [&](const void* s, void* r) { return comm.all_reduce_async(s, r, count, wire, ReduceOp::Sum); },
      /*in_place=*/true, wire);
}

void all_to_all(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype() && send.numel() % comm.size() == 0,
            "all_to_all: send " << send.describe() << " and recv " << recv.describe() << " do not match for "
                                << comm.size() << " ranks");
  const size_t count = static_cast<size_t>(send.numel() / comm.size());
  staged_now(comm, backend, send, recv, [&](const void* s, void* r) { comm.all_to_all(s, r, count, send.dtype()); });
}

void sendrecv(Communicator& comm, Backend& backend, const Tensor& send, int dest, Tensor& recv, int source) {
  sendrecv_async(comm, backend, send, dest, recv, source, /*tag=*/7)->wait();
}

void all_reduce_sum(Communicator& comm, Backend& backend, Tensor& t) {
  all_reduce_sum_async(comm, backend, t)->wait();
}

CommHandle all_gather_async(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(recv.numel() == send.numel() * comm.size() && send.dtype() == recv.dtype(),
            "all_gather: recv " << recv.describe() << " must hold " << comm.size() << " × send " << send.describe());
  const size_t count = static_cast<size_t>(send.numel());
  return staged(comm, backend, send, recv,
                [&](const void* s, void* r) { return comm.all_gather_async(s, r, count, send.dtype()); });
}

CommHandle reduce_scatter_sum_async(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  ULY_CHECK(send.numel() == recv.numel() * comm.size() && send.dtype() == recv.dtype(),
            "reduce_scatter: send " << send.describe() << " must hold " << comm.size() << " × recv "
                                    << recv.describe());
  const size_t count = static_cast<size_t>(recv.numel());
  const DType wire = sum_wire(comm, send);
  return staged(
      comm, backend, send, recv,
      [&](const void* s, void* r) { return comm.reduce_scatter_async(s, r, count, wire, ReduceOp::Sum); },
      /*in_place=*/false, wire);
}

void all_gather(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  all_gather_async(comm, backend, send, recv)->wait();
}

void reduce_scatter_sum(Communicator& comm, Backend& backend, const Tensor& send, Tensor& recv) {
  reduce_scatter_sum_async(comm, backend, send, recv)->wait();
}

}  // namespace ulysses
