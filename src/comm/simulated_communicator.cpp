#include <cstdlib>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/step_work.h"

namespace ulysses {
namespace {

class SimulatedCommunicator final : public Communicator {
 public:
  SimulatedCommunicator(int size, int rank, WorkLedger* work) : size_(size), rank_(rank), work_(work) {
    ULY_CHECK(size >= 1 && rank >= 0 && rank < size, "simulated communicator: rank " << rank << " of " << size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "simulated"; }
  // Sizes as nccl-tests gives them (core/step_work.h): count is per peer for all-to-all and
  // all-gather, the output's for reduce-scatter.
  void all_to_all(const void*, void*, size_t count, DType dt) override { note("all-to-all", count * size_, dt); }
  void all_to_all_v(const void*, const size_t* counts, const size_t*, void*, const size_t*, const size_t*,
                    DType dt) override {
    size_t n = 0;
    for (int i = 0; i < size_; ++i) n += counts[i];
    note("all-to-all", n, dt);
  }
  void all_gather(const void*, void*, size_t count, DType dt) override { note("all-gather", count * size_, dt); }
  void reduce_scatter(const void*, void*, size_t count, DType dt, ReduceOp) override {
    note("reduce-scatter", count * size_, dt);
  }
  void all_reduce(const void*, void*, size_t count, DType dt, ReduceOp) override { note("all-reduce", count, dt); }
  void broadcast(void*, size_t count, DType dt, int) override { note("broadcast", count, dt); }
  void send(const void*, size_t count, DType dt, int, int) override { note("sendrecv", count, dt); }
  void recv(void*, size_t, DType, int, int) override {}
  void sendrecv(const void*, size_t count, int, void*, size_t, int, DType dt, int) override {
    note("sendrecv", count, dt);
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SimulatedCommunicator>(size_, rank_, work_);
  }
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }

 private:
  void note(const char* kind, size_t count, DType dt) {
    if (work_) work_->add_collective(kind, size_, static_cast<double>(count * dtype_size(dt)));
  }
  int size_, rank_;
  WorkLedger* work_;
};

}  // namespace

std::unique_ptr<Communicator> make_simulated_communicator(int size, int rank, WorkLedger* work) {
  return std::make_unique<SimulatedCommunicator>(size, rank, work);
}

}  // namespace ulysses
