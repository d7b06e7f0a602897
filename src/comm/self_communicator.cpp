// A group of one process. Every collective reduces to "my block is the whole
// result", i.e. a copy; memmove makes the in-place forms (send == recv) safe.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"

namespace ulysses {
namespace {

void copy(void* dst, const void* src, size_t count, DType dtype) {
  const size_t bytes = count * dtype_size(dtype);
  if (bytes == 0 || dst == src) return;
  ULY_CHECK(dst != nullptr && src != nullptr, "self communicator: null buffer for " << count << " elements");
  std::memmove(dst, src, bytes);
}

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }

  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    copy(recv, send, count, dtype);
  }
  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DType dtype) override {
    ULY_CHECK(send_counts[0] == recv_counts[0], "all_to_all_v on one rank: sends " << send_counts[0]
                                                                                   << " elements to itself but expects "
                                                                                   << recv_counts[0]);
    const size_t es = dtype_size(dtype);
    copy(static_cast<char*>(recv) + recv_displs[0] * es, static_cast<const char*>(send) + send_displs[0] * es,
         send_counts[0], dtype);
  }
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    copy(recv, send, count, dtype);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp) override {
    copy(recv, send, count, dtype);
  }
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp) override {
    copy(recv, send, count, dtype);
  }
  void broadcast(void*, size_t, DType, int root) override {
    ULY_CHECK(root == 0, "broadcast from root " << root << " on a group of 1 rank (the only rank is 0)");
  }
  void send(const void*, size_t, DType, int peer, int) override {
    ULY_FAIL("send to rank " << peer << " on the self communicator (one rank): point-to-point needs at least 2 "
                                        "ranks; launch with mpirun -np N");
  }
  void recv(void*, size_t, DType, int peer, int) override {
    ULY_FAIL("recv from rank " << peer << " on the self communicator (one rank): point-to-point needs at least 2 "
                                          "ranks; launch with mpirun -np N");
  }
  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType dtype, int) override {
    ULY_CHECK(dest == 0 && source == 0, "sendrecv to rank " << dest << " and from rank " << source
                                                            << " on the self communicator (one rank, rank 0)");
    ULY_CHECK(send_count == recv_count, "sendrecv on the self communicator: " << send_count << " elements sent, "
                                                                              << recv_count << " expected");
    copy(recv, send, send_count, dtype);
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int) override {
    ULY_CHECK(color >= 0, "split with negative color " << color);
    return std::make_unique<SelfCommunicator>();
  }
  [[noreturn]] void abort(int exit_code) override {
    // Only this process exists: end it without running destructors that might block.
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace ulysses
