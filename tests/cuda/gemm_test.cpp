// cuBLASLt GEMM (row-major semantics of Backend::matmul) against cpu::matmul:
// every transpose combination, fp32 and bf16 inputs, fp32 and bf16 outputs,
// alpha/beta, odd shapes, the K = 0 case, and the plan cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/gemm.h"
#include "cuda/cuda_test_util.h"

namespace ulysses {
namespace {

using bf16 = __nv_bfloat16;
using cuda_test::DeviceBuffer;
using cuda_test::download;
using cuda_test::Elem;
using cuda_test::rounded;
using cuda_test::upload;
using test::random_vector_f;

class CudaGemm : public cuda_test::CudaTest {};

// Runs one case with A/B of type TAB and C of type TC and compares with cpu::matmul in fp32.
template <class TAB, class TC>
void run_case(cuda::CublasLtGemm& gemm, cudaStream_t stream, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
              double alpha, double beta) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " N=" << N << " K=" << K << " trans_a=" << ta << " trans_b=" << tb
                                  << " alpha=" << alpha << " beta=" << beta << " A/B " << Elem<TAB>::name << " C "
                                  << Elem<TC>::name);
  const auto A = rounded<TAB>(random_vector_f(M * K, 1 + M + 3 * K));
  const auto B = rounded<TAB>(random_vector_f(K * N, 2 + N + 5 * K));
  const auto C0 = rounded<TC>(random_vector_f(M * N, 3 + M * N));
  DeviceBuffer<TAB> dA(M * K), dB(K * N);
  DeviceBuffer<TC> dC(M * N);
  upload(dA, A);
  upload(dB, B);
  if (beta == 0.0) dC.poison();  // beta = 0 must not read C (NaN * 0 would leak through)
  else upload(dC, C0);
  const DType ab = std::is_same_v<TAB, float> ? DType::F32 : DType::BF16;
  const DType c = std::is_same_v<TC, float> ? DType::F32 : DType::BF16;
  gemm.matmul(dC.get(), c, dA.get(), dB.get(), ab, M, N, K, ta, tb, alpha, beta, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> ref = C0;
  cpu::matmul(ref.data(), A.data(), B.data(), M, N, K, ta, tb, alpha, beta);
  const auto out = download(dC);
  EXPECT_CLOSE(out, ref, Elem<TC>::tol);
}

TEST_F(CudaGemm, AllTransposesAndTypes) {
  cuda::CublasLtGemm gemm(cuda::device_allocator(0));
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair<double, double>{1.0, 0.0}, {0.5, 0.25}}) {
        run_case<float, float>(gemm, stream, 64, 48, 128, ta, tb, alpha, beta);
        run_case<bf16, bf16>(gemm, stream, 64, 48, 128, ta, tb, alpha, beta);
        run_case<bf16, float>(gemm, stream, 64, 48, 128, ta, tb, alpha, beta);
      }
}

TEST_F(CudaGemm, LargerAlignedShape) {
  cuda::CublasLtGemm gemm(cuda::device_allocator(0));
  run_case<bf16, bf16>(gemm, stream, 512, 1024, 768, false, true, 1.0, 0.0);  // x · W^T, the Linear layout
  run_case<bf16, float>(gemm, stream, 768, 1024, 512, true, false, 1.0, 1.0);  // dW += dy^T · x
  run_case<float, float>(gemm, stream, 256, 320, 384, false, false, 1.0, 0.0);
}

// Odd sizes give 2- and 4-byte aligned leading dimensions and pointers: the plan must honour them.
TEST_F(CudaGemm, OddShapes) {
  cuda::CublasLtGemm gemm(cuda::device_allocator(0));
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      run_case<float, float>(gemm, stream, 67, 45, 129, ta, tb, 1.0, 0.0);
      run_case<bf16, bf16>(gemm, stream, 67, 45, 129, ta, tb, 1.0, 0.5);
      run_case<bf16, float>(gemm, stream, 1, 7, 3, ta, tb, 2.0, 0.0);
    }
}

TEST_F(CudaGemm, EmptyInnerDimensionScalesC) {
  cuda::CublasLtGemm gemm(cuda::device_allocator(0));
  const int64_t M = 5, N = 6;
  const auto C0 = random_vector_f(M * N, 7);
  DeviceBuffer<float> dC(M * N);
  upload(dC, C0);
  gemm.matmul(dC.get(), DType::F32, nullptr, nullptr, DType::F32, M, N, 0, false, false, 1.0, 0.5, stream);
  sync();
  std::vector<float> ref(M * N);
  for (int64_t i = 0; i < M * N; ++i) ref[i] = C0[i] * 0.5f;
  const auto out = download(dC);
  EXPECT_CLOSE(out, ref, 1e-7);
  gemm.matmul(dC.get(), DType::F32, nullptr, nullptr, DType::F32, M, N, 0, false, false, 1.0, 0.0, stream);
  sync();
  const auto zeros = download(dC);
  for (float z : zeros) EXPECT_EQ(z, 0.0f);
}

TEST_F(CudaGemm, PlanCacheReusesPlans) {
  cuda::CublasLtGemm gemm(cuda::device_allocator(0));
  EXPECT_EQ(gemm.cached_plans(), 0u);
  run_case<bf16, bf16>(gemm, stream, 64, 64, 64, false, false, 1.0, 0.0);
  EXPECT_EQ(gemm.cached_plans(), 1u);
  run_case<bf16, bf16>(gemm, stream, 64, 64, 64, false, false, 1.0, 0.0);
  EXPECT_EQ(gemm.cached_plans(), 1u);
  run_case<bf16, bf16>(gemm, stream, 64, 64, 64, true, false, 1.0, 0.0);
  EXPECT_EQ(gemm.cached_plans(), 2u);
}

// A plan's first call times its candidates; the outputs must be what one call gives: a C that is
// accumulated into (beta 1, timed into a temporary output) holds C0 + AB after one call and
// C0 + 2 AB after two, with tuning and without; a separate C_in is read, never written.
TEST_F(CudaGemm, TuningKeepsOutputsExact) {
  const int64_t M = 1024, N = 512, K = 2048;
  const auto A = rounded<bf16>(random_vector_f(K * M, 11)), B = rounded<bf16>(random_vector_f(K * N, 12));
  const auto C0 = random_vector_f(M * N, 13);
  DeviceBuffer<bf16> dA(K * M), dB(K * N);
  upload(dA, A);
  upload(dB, B);
  std::vector<float> ab(M * N, 0.0f);
  cpu::matmul(ab.data(), A.data(), B.data(), M, N, K, true, false, 1.0, 0.0);
  setenv("ULYSSES_GEMM_TUNING_CACHE", "0", 1);  // time the candidates here, whatever earlier runs chose
  for (bool tune : {false, true}) {
    SCOPED_TRACE(testing::Message() << "tune=" << tune);
    cuda::CublasLtGemm gemm(cuda::device_allocator(0), size_t{32} << 20, tune);
    DeviceBuffer<float> dC(M * N);
    upload(dC, C0);
    for (int calls = 1; calls <= 2; ++calls) {  // dW += dy^T x, twice
      gemm.matmul(dC.get(), DType::F32, dA.get(), dB.get(), DType::BF16, M, N, K, true, false, 1.0, 1.0, stream);
      sync();
      std::vector<float> ref(M * N);
      for (int64_t i = 0; i < M * N; ++i) ref[i] = C0[i] + static_cast<float>(calls) * ab[i];
      EXPECT_CLOSE(download(dC), ref, 1e-5);
    }
    DeviceBuffer<float> dIn(M * N), dOut(M * N);
    upload(dIn, C0);
    dOut.poison();
    gemm.matmul(dOut.get(), DType::F32, dA.get(), dB.get(), DType::BF16, M, N, K, true, false, 1.0, 1.0, stream,
                dIn.get());
    sync();
    std::vector<float> ref(M * N);
    for (int64_t i = 0; i < M * N; ++i) ref[i] = C0[i] + ab[i];
    EXPECT_CLOSE(download(dOut), ref, 1e-5);
    EXPECT_CLOSE(download(dIn), C0, 0.0);
    if (!tune) EXPECT_EQ(gemm.retuned_plans(), 0u);
  }
  unsetenv("ULYSSES_GEMM_TUNING_CACHE");
}

// A choice timed by one object (one run) is found by the next through the cache file, which
// skips the timing and gives the same results; a damaged file is ignored and rewritten.
TEST_F(CudaGemm, TuningCacheCarriesChoicesAcrossRuns) {
  const std::string path = testing::TempDir() + "gemm_tuning_" + std::to_string(getpid()) + ".json";
  std::remove(path.c_str());
  setenv("ULYSSES_GEMM_TUNING_CACHE", path.c_str(), 1);
  auto run = [&](size_t expect_cached) {
    cuda::CublasLtGemm gemm(cuda::device_allocator(0));
    run_case<bf16, bf16>(gemm, stream, 512, 768, 1024, false, true, 1.0, 0.0);
    run_case<bf16, float>(gemm, stream, 256, 512, 384, true, false, 1.0, 0.0);
    EXPECT_EQ(gemm.cached_plans(), 2u);
    EXPECT_EQ(gemm.cached_choices(), expect_cached);
  };
  run(0);
  std::ifstream written(path);
  ASSERT_TRUE(written.good()) << path << " was not written";
  run(2);
  std::ofstream(path, std::ios::trunc) << "{\"format\": 1, \"contexts\": [";  // damaged
  run(0);
  run(2);  // rewritten whole by the run that ignored it
  unsetenv("ULYSSES_GEMM_TUNING_CACHE");
  std::remove(path.c_str());
}

TEST_F(CudaGemm, RejectsUnsupportedTypes) {
  cuda::CublasLtGemm gemm(cuda::device_allocator(0));
  DeviceBuffer<float> a(16), b(16);
  DeviceBuffer<bf16> c(16);
  EXPECT_THROW(gemm.matmul(c.get(), DType::BF16, a.get(), b.get(), DType::F32, 4, 4, 4, false, false, 1.0, 0.0, stream),
               Error);
  EXPECT_THROW(gemm.matmul(c.get(), DType::F16, a.get(), b.get(), DType::F16, 4, 4, 4, false, false, 1.0, 0.0, stream),
               Error);
}

}  // namespace
}  // namespace ulysses
