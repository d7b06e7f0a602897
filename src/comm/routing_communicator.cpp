#include "comm/routing_communicator.h"

#include <cstdlib>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace ulysses {
namespace {

class RoutingCommunicator final : public Communicator {
 public:
  RoutingCommunicator(Communicator* host, std::unique_ptr<Communicator> owned_host,
                      std::unique_ptr<Communicator> device, DevicePointerTest on_device)
      : host_(host), owned_host_(std::move(owned_host)), device_(std::move(device)), on_device_(std::move(on_device)) {
    ULY_CHECK(host_ != nullptr && device_ != nullptr, "routing communicator: both communicators are needed");
    ULY_CHECK(host_->size() == device_->size() && host_->rank() == device_->rank(),
              "routing communicator: the " << host_->name() << " group (rank " << host_->rank() << " of "
                                           << host_->size() << ") and the " << device_->name() << " group (rank "
                                           << device_->rank() << " of " << device_->size()
                                           << ") are not the same processes in the same order");
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return host_->name() + "+" + device_->name(); }
  bool device_buffers() const override { return true; }
  bool reduces_bf16(const void* buffer) const override {
    return buffer != nullptr && on_device_(buffer) ? device_->reduces_bf16(buffer) : host_->reduces_bf16(buffer);
  }

  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    route("all_to_all", {send, recv}).all_to_all(send, recv, count, dtype);
  }
  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DType dtype) override {
    route("all_to_all_v", {send, recv})
        .all_to_all_v(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
  }
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    route("all_gather", {send, recv}).all_gather(send, recv, count, dtype);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    route("reduce_scatter", {send, recv}).reduce_scatter(send, recv, count, dtype, op);
  }
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    route("all_reduce", {send, recv}).all_reduce(send, recv, count, dtype, op);
  }
  void broadcast(void* buf, size_t count, DType dtype, int root) override {
    route("broadcast", {buf}).broadcast(buf, count, dtype, root);
  }
  void send(const void* buf, size_t count, DType dtype, int peer, int tag) override {
    route("send", {buf}).send(buf, count, dtype, peer, tag);
  }
  void recv(void* buf, size_t count, DType dtype, int peer, int tag) override {
    route("recv", {buf}).recv(buf, count, dtype, peer, tag);
  }
  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType dtype, int tag) override {
    route("sendrecv", {send, recv}).sendrecv(send, send_count, dest, recv, recv_count, source, dtype, tag);
  }
  CommHandle all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    return route("all_reduce", {send, recv}).all_reduce_async(send, recv, count, dtype, op);
  }
  CommHandle all_gather_async(const void* send, void* recv, size_t count, DType dtype) override {
    return route("all_gather", {send, recv}).all_gather_async(send, recv, count, dtype);
  }
  CommHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    return route("reduce_scatter", {send, recv}).reduce_scatter_async(send, recv, count, dtype, op);
  }
  CommHandle sendrecv_async(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                            DType dtype, int tag) override {
    return route("sendrecv", {send, recv})
        .sendrecv_async(send, send_count, dest, recv, recv_count, source, dtype, tag);
  }
  void progress() override {
    host_->progress();
    device_->progress();
  }
  void barrier() override { host_->barrier(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> host = host_->split(color, key);
    std::unique_ptr<Communicator> device = device_->split(color, key);
    Communicator* h = host.get();
    return std::make_unique<RoutingCommunicator>(h, std::move(host), std::move(device), on_device_);
  }

  [[noreturn]] void abort(int exit_code) override {
    device_->abort(exit_code);  // NCCL first (unblocks its kernels), then the host group ends the job
    std::_Exit(exit_code);
  }

 private:
  // Null buffers (empty calls) go with the others; all non-null ones must agree.
  Communicator& route(const char* call, std::initializer_list<const void*> buffers) {
    int device = 0, host = 0;
    for (const void* b : buffers) {
      if (b == nullptr) continue;
      (on_device_(b) ? device : host) += 1;
    }
    ULY_CHECK(device == 0 || host == 0, name() << " " << call << ": the buffers are partly in device and partly in "
                                               << "host memory; give all of one call's buffers the same place");
    return device > 0 ? *device_ : *host_;
  }

  Communicator* host_;
  std::unique_ptr<Communicator> owned_host_;
  std::unique_ptr<Communicator> device_;
  DevicePointerTest on_device_;
};

}  // namespace

std::unique_ptr<Communicator> make_routing_communicator(Communicator& host, std::unique_ptr<Communicator> device,
                                                        DevicePointerTest on_device) {
  return std::make_unique<RoutingCommunicator>(&host, nullptr, std::move(device), std::move(on_device));
}

}  // namespace ulysses
