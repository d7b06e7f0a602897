// Profiling on the CUDA backend: families are timed by events on the compute
// stream, read only at profile_flush(); nested families get exclusive time,
// and nothing is recorded while profiling is off.
#include <gtest/gtest.h>

#include <chrono>

#include "backend/cuda/cuda_backend.h"
#include "backend/profile_scope.h"
#include "core/step_profile.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

class CudaProfileTest : public cuda_test::CudaTest {};

double seconds_of(const StepProfile& p, const std::string& family) {
  for (const StepProfile::Row& r : p.rows())
    if (r.family == family) return r.seconds;
  ADD_FAILURE() << "no row '" << family << "'";
  return -1;
}

TEST_F(CudaProfileTest, EventsTimeNestedFamiliesOnTheComputeStream) {
  auto gpu = make_cuda_backend(0);
  const int64_t n = 2048;
  Tensor a = gpu->empty({n, n}, DType::BF16), b = gpu->empty({n, n}, DType::BF16), c = gpu->empty({n, n}, DType::BF16);
  gpu->zero(a);
  gpu->zero(b);
  // The first GEMM of a shape pays cuBLASLt's setup on the host (the stream waits idle, which the
  // open family would be charged with): warm it up before profiling.
  gpu->matmul(c, a, b, false, false);
  gpu->synchronize();
  StepProfile p;
  { ProfileScope off(*gpu, "matmul"); }  // before enable_profiling: not in the profile
  gpu->enable_profiling(&p);
  gpu->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < 2; ++s) {
    ProfileScope outer(*gpu, "outer");
    gpu->matmul(c, a, b, false, false);
    {
      ProfileScope inner(*gpu, "matmul");
      for (int i = 0; i < 10; ++i) gpu->matmul(c, a, b, false, false);
    }
  }
  gpu->synchronize();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  gpu->profile_flush();
  gpu->profile_flush();  // nothing new: no change
  p.add_step(wall);
  gpu->enable_profiling(nullptr);
  { ProfileScope off(*gpu, "matmul"); }

  const double inner = seconds_of(p, "matmul"), outer = seconds_of(p, "outer");
  EXPECT_GT(inner, 0.0);
  EXPECT_GT(outer, 0.0);
  // Ten GEMMs inside against one outside (exclusive time), with room for launch gaps.
  EXPECT_GT(inner, 3.0 * outer) << "inner " << inner << " s, outer " << outer << " s";
  EXPECT_LE(inner + outer, wall * 1.01);
  for (const StepProfile::Row& r : p.rows())
    if (r.family == "matmul") EXPECT_DOUBLE_EQ(r.calls, 2.0);
}

}  // namespace
}  // namespace ulysses
