#include <cstdlib>

#include "comm/communicator.h"
#include "core/error.h"

namespace ulysses {
namespace {

class SimulatedCommunicator final : public Communicator {
 public:
  SimulatedCommunicator(int size, int rank) : size_(size), rank_(rank) {
    ULY_CHECK(size >= 1 && rank >= 0 && rank < size, "simulated communicator: rank " << rank << " of " << size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "simulated"; }
  void all_to_all(const void*, void*, size_t, DType) override {}
  void all_to_all_v(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*, DType) override {}
  void all_gather(const void*, void*, size_t, DType) override {}
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override {}
  void all_reduce(const void*, void*, size_t, DType, ReduceOp) override {}
  void broadcast(void*, size_t, DType, int) override {}
  void send(const void*, size_t, DType, int, int) override {}
  void recv(void*, size_t, DType, int, int) override {}
  void sendrecv(const void*, size_t, int, void*, size_t, int, DType, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SimulatedCommunicator>(size_, rank_);
  }
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }

 private:
  int size_, rank_;
};

}  // namespace

std::unique_ptr<Communicator> make_simulated_communicator(int size, int rank) {
  return std::make_unique<SimulatedCommunicator>(size, rank);
}

}  // namespace ulysses
