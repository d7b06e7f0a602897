// The dtype in which parallel/collectives sums a bfloat16 tensor: natively where the
// communicator reduces bfloat16 (NCCL on device memory: no float32 copy, half the bytes),
// else as a float32 copy rounded back once (MPI, TCP). A stand-in group of two whose peer holds
// the same values records the dtype each reduction is called with.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/dtype.h"
#include "parallel/collectives.h"

namespace ulysses {
namespace {

class Mirror final : public Communicator {
 public:
  explicit Mirror(bool native_bf16) : native_(native_bf16) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "mirror"; }
  bool reduces_bf16(const void*) const override { return native_; }
  // Rank 0 of two whose peer sent the same blocks: a sum doubles block 0.
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp) override { twice(s, r, n, t); }
  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp) override { twice(s, r, n, t); }
  void all_to_all(const void*, void*, size_t, DType) override { FAIL() << "not used"; }
  void all_to_all_v(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*, DType) override {
    FAIL() << "not used";
  }
  void all_gather(const void*, void*, size_t, DType) override { FAIL() << "not used"; }
  void broadcast(void*, size_t, DType, int) override { FAIL() << "not used"; }
  void send(const void*, size_t, DType, int, int) override { FAIL() << "not used"; }
  void recv(void*, size_t, DType, int, int) override { FAIL() << "not used"; }
  void sendrecv(const void*, size_t, int, void*, size_t, int, DType, int) override { FAIL() << "not used"; }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<Mirror>(native_); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

  std::vector<DType> wires;

 private:
  void twice(const void* s, void* r, size_t n, DType t) {
    wires.push_back(t);
    if (t == DType::BF16) {
      for (size_t i = 0; i < n; ++i) {
        const float x = bf16_to_float(static_cast<const uint16_t*>(s)[i]);
        static_cast<uint16_t*>(r)[i] = float_to_bf16(x + x);
      }
    } else {
      ASSERT_EQ(t, DType::F32);
      for (size_t i = 0; i < n; ++i) static_cast<float*>(r)[i] = 2 * static_cast<const float*>(s)[i];
    }
  }
  bool native_;
};

Tensor bf16_ramp(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::BF16);
  for (int64_t i = 0; i < n; ++i) t.data<uint16_t>()[i] = float_to_bf16(0.37f * static_cast<float>(i) - 1.5f);
  return t;
}

void expect_doubled(const Tensor& got, const Tensor& from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = bf16_to_float(from.data<uint16_t>()[i]);
    EXPECT_EQ(got.data<uint16_t>()[i], float_to_bf16(x + x)) << "element " << i;
  }
}

TEST(SumWire, Bf16IsSummedNativelyWhereTheCommunicatorCan) {
  auto backend = make_cpu_backend();
  for (const bool native : {true, false}) {
    Mirror comm(native);
    const DType expected = native ? DType::BF16 : DType::F32;

    Tensor t = bf16_ramp(10);
    const Tensor before = bf16_ramp(10);
    all_reduce_sum(comm, *backend, t);
    expect_doubled(t, before, 10);

    const Tensor send = bf16_ramp(12);
    Tensor recv = Tensor::empty({6}, DType::BF16);
    reduce_scatter_sum(comm, *backend, send, recv);
    expect_doubled(recv, send, 6);

    ASSERT_EQ(comm.wires.size(), 2u) << "native " << native;
    EXPECT_EQ(comm.wires[0], expected) << "all_reduce, native " << native;
    EXPECT_EQ(comm.wires[1], expected) << "reduce_scatter, native " << native;
  }
}

TEST(SumWire, Float32TensorsKeepTheirDtype) {
  auto backend = make_cpu_backend();
  Mirror comm(/*native_bf16=*/true);
  Tensor t = Tensor::empty({4}, DType::F32);
  for (int i = 0; i < 4; ++i) t.data<float>()[i] = static_cast<float>(i);
  all_reduce_sum(comm, *backend, t);
  ASSERT_EQ(comm.wires.size(), 1u);
  EXPECT_EQ(comm.wires[0], DType::F32);
  EXPECT_EQ(t.data<float>()[3], 6.f);
}

}  // namespace
}  // namespace ulysses
