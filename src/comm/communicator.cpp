// The communicator's shared parts: the blocking defaults of the asynchronous calls.
#include "comm/communicator.h"

namespace ulysses {
namespace {

class CompletedRequest final : public CommRequest {
 public:
  void wait() override {}
};

}  // namespace

CommHandle completed_request() { return std::make_unique<CompletedRequest>(); }

void wait_all(std::vector<CommHandle>& handles) {
  for (CommHandle& h : handles)
    if (h) h->wait();
  handles.clear();
}

CommHandle Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  all_reduce(send, recv, count, dtype, op);
  return completed_request();
}

CommHandle Communicator::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  all_gather(send, recv, count, dtype);
  return completed_request();
}

CommHandle Communicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                              ReduceOp op) {
  reduce_scatter(send, recv, count, dtype, op);
  return completed_request();
}

CommHandle Communicator::sendrecv_async(const void* send, size_t send_count, int dest, void* recv,
                                        size_t recv_count, int source, DType dtype, int tag) {
  sendrecv(send, send_count, dest, recv, recv_count, source, dtype, tag);
  return completed_request();
}

}  // namespace ulysses
