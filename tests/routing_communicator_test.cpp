// The communicator that sends device buffers to one transport and host buffers
// to another (NCCL and MPI on a GPU run): each call reaches the right one, a
// call with buffers on both sides is refused, splits keep routing.
#include "comm/routing_communicator.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace ulysses {
namespace {

// A group of one that counts the calls it receives.
class Counting final : public Communicator {
 public:
  explicit Counting(std::string name, int* calls) : name_(std::move(name)), calls_(calls), self_(make_self_communicator()) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }
  bool reduces_bf16(const void*) const override { return name_ == "device"; }  // as NCCL and MPI
  void all_to_all(const void* s, void* r, size_t n, DType t) override { ++*calls_, self_->all_to_all(s, r, n, t); }
  void all_to_all_v(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc, const size_t* rd,
                    DType t) override {
    ++*calls_, self_->all_to_all_v(s, sc, sd, r, rc, rd, t);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) override { ++*calls_, self_->all_gather(s, r, n, t); }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    ++*calls_, self_->reduce_scatter(s, r, n, t, op);
  }
  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    ++*calls_, self_->all_reduce(s, r, n, t, op);
  }
  void broadcast(void* b, size_t n, DType t, int root) override { ++*calls_, self_->broadcast(b, n, t, root); }
  void send(const void*, size_t, DType, int, int) override { ++*calls_; }
  void recv(void*, size_t, DType, int, int) override { ++*calls_; }
  void sendrecv(const void*, size_t, int, void*, size_t, int, DType, int) override { ++*calls_; }
  void barrier() override { ++*calls_; }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<Counting>(name_, calls_); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  std::string name_;
  int* calls_;
  std::unique_ptr<Communicator> self_;
};

struct Routing : testing::Test {
  int host_calls = 0, device_calls = 0;
  std::vector<float> host_a = std::vector<float>(4, 1.f), host_b = std::vector<float>(4, 0.f);
  std::vector<float> dev_a = std::vector<float>(4, 2.f), dev_b = std::vector<float>(4, 0.f);
  std::set<const void*> device_buffers{dev_a.data(), dev_b.data()};
  Counting host{"host", &host_calls};
  std::unique_ptr<Communicator> comm = make_routing_communicator(
      host, std::make_unique<Counting>("device", &device_calls),
      [this](const void* p) { return device_buffers.count(p) > 0; });
};

TEST_F(Routing, Bf16SumsAreNativeWhereTheBufferLies) {
  EXPECT_TRUE(comm->reduces_bf16(dev_a.data())) << "device memory: the device transport's answer";
  EXPECT_FALSE(comm->reduces_bf16(host_a.data())) << "host memory: the host transport's answer";
  EXPECT_FALSE(comm->reduces_bf16(nullptr));
}

TEST_F(Routing, DeviceBuffersGoToTheDeviceTransportHostBuffersToTheHostOne) {
  EXPECT_EQ(comm->name(), "host+device");
  EXPECT_TRUE(comm->device_buffers());
  comm->all_reduce(dev_a.data(), dev_b.data(), 4, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(device_calls, 1);
  EXPECT_EQ(host_calls, 0);
  EXPECT_EQ(dev_b, dev_a) << "the call itself still happens";
  comm->all_reduce(host_a.data(), host_b.data(), 4, DType::F32, ReduceOp::Sum);
  comm->all_gather(host_a.data(), host_b.data(), 4, DType::F32);
  comm->broadcast(host_a.data(), 4, DType::F32, 0);
  EXPECT_EQ(host_calls, 3);
  comm->all_to_all(dev_a.data(), dev_b.data(), 4, DType::F32);
  comm->reduce_scatter(dev_a.data(), dev_b.data(), 4, DType::F32, ReduceOp::Sum);
  comm->send(dev_a.data(), 4, DType::F32, 0, 0);
  comm->recv(dev_b.data(), 4, DType::F32, 0, 0);
  EXPECT_EQ(device_calls, 5);
  comm->barrier();  // host-side by definition
  EXPECT_EQ(host_calls, 4);
}

TEST_F(Routing, BuffersOnBothSidesAreRefused) {
  try {
    comm->all_reduce(host_a.data(), dev_b.data(), 4, DType::F32, ReduceOp::Sum);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("partly in device and partly in host memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(host_calls + device_calls, 0);
}

TEST_F(Routing, SplitGroupsKeepRouting) {
  std::unique_ptr<Communicator> sub = comm->split(0, 0);
  sub->all_reduce(dev_a.data(), dev_b.data(), 4, DType::F32, ReduceOp::Sum);
  sub->all_reduce(host_a.data(), host_b.data(), 4, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(device_calls, 1);
  EXPECT_EQ(host_calls, 1);
}

}  // namespace
}  // namespace ulysses
