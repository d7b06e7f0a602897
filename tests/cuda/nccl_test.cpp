// The NCCL communicator on one GPU (a group of one rank, bootstrapped from the
// self communicator): every collective's data movement, bf16 and in-place
// forms, split, and the event ordering against a compute stream.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cuda/elementwise.h"
#include "comm/communicator.h"
#include "comm/nccl_communicator.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

using bf16 = __nv_bfloat16;
using cuda_test::DeviceBuffer;
using cuda_test::download;
using cuda_test::upload;
using test::random_vector_f;

class CudaNccl : public cuda_test::CudaTest {};

void expect_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << " at " << i;
}

void exercise(Communicator& c) {
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.name(), "nccl");
  const size_t n = 1000;
  const auto v = random_vector_f(n, 1);
  DeviceBuffer<float> a(n), b(n);
  upload(a, v);

  b.poison();
  c.all_to_all(a.get(), b.get(), n, DType::F32);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(b), v, "all_to_all");

  b.poison();
  c.all_gather(a.get(), b.get(), n, DType::F32);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(b), v, "all_gather");

  b.poison();
  c.reduce_scatter(a.get(), b.get(), n, DType::F32, ReduceOp::Sum);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(b), v, "reduce_scatter");

  b.poison();
  c.all_reduce(a.get(), b.get(), n, DType::F32, ReduceOp::Sum);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(b), v, "all_reduce sum");

  c.all_reduce(a.get(), a.get(), n, DType::F32, ReduceOp::Max);  // in place
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(a), v, "all_reduce max in place");

  c.broadcast(a.get(), n, DType::F32, 0);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(a), v, "broadcast");
  EXPECT_THROW(c.broadcast(a.get(), n, DType::F32, 1), Error);

  // all_to_all_v: 300 elements from offset 100 land at offset 500; the rest of recv is untouched.
  b.poison();
  const size_t sc = 300, sd = 100, rc = 300, rd = 500;
  c.all_to_all_v(a.get(), &sc, &sd, b.get(), &rc, &rd, DType::F32);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download(b);
  for (size_t i = 0; i < n; ++i) {
    if (i >= rd && i < rd + rc) ASSERT_EQ(got[i], v[sd + i - rd]) << "all_to_all_v at " << i;
    else ASSERT_TRUE(std::isnan(got[i])) << "all_to_all_v wrote outside its block at " << i;
  }

  // bf16 sum.
  const auto vb = cuda_test::rounded<bf16>(v);
  DeviceBuffer<bf16> ab(n), bb(n);
  upload(ab, vb);
  bb.poison();
  c.all_reduce(ab.get(), bb.get(), n, DType::BF16, ReduceOp::Sum);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(bb), vb, "all_reduce bf16");

  c.barrier();

  auto sub = c.split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  b.poison();
  sub->all_reduce(a.get(), b.get(), n, DType::F32, ReduceOp::Sum);
  CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(download(b), v, "all_reduce on a split communicator");
  sub->barrier();
}

TEST_F(CudaNccl, BlockingModeWithoutComputeStream) {
  auto self = make_self_communicator();
  auto nccl = make_nccl_communicator(*self, 0);
  exercise(*nccl);
}

TEST_F(CudaNccl, StreamOrderedMode) {
  auto self = make_self_communicator();
  auto nccl = make_nccl_communicator(*self, 0, stream);
  exercise(*nccl);

  // Ordering: a kernel queued on the compute stream before the collective is seen by it, and a kernel
  // queued after it sees its result, with no host synchronisation in between.
  const size_t n = 1 << 22;  // large enough that a missing dependency would show
  const auto v = random_vector_f(n, 2);
  DeviceBuffer<float> a(n), b(n);
  upload(a, v);
  b.poison();
  cuda::scale(a.get(), 2.0, static_cast<int64_t>(n), stream);
  nccl->all_reduce(a.get(), b.get(), n, DType::F32, ReduceOp::Sum);
  cuda::scale(b.get(), 3.0, static_cast<int64_t>(n), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download(b);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], (v[i] * 2.0f) * 3.0f) << i;
}

TEST_F(CudaNccl, BadDeviceIndexIsAClearError) {
  auto self = make_self_communicator();
  EXPECT_THROW(make_nccl_communicator(*self, 1000), Error);
}

}  // namespace
}  // namespace ulysses
