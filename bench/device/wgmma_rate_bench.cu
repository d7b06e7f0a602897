// How fast the tensor cores run the wgmma shapes our Hopper attention kernels issue, with nothing
// else in the loop: one CTA per SM, 1 or 2 warpgroups issuing back-to-back wgmmas on resident
// shared-memory tiles (contents irrelevant to the rate). Answers whether a tiling is bounded by its
// GEMMs' operand traffic (both operands from shared memory at N = 64 read 4 KB per 32 tensor-core
// cycles, the shared-memory bandwidth itself) or by what runs between them (issue 31).
//   wgmma_rate_bench [--iters N]
// Modes (per warpgroup and round; TFLOPS = 2 M N K per wgmma over the kernel's time):
//   ss64    8 x m64n64k16, A and B K-major from shared memory (the backward's S^T, dP^T)
//   rs64    8 x m64n64k16, A from registers, B MN-major (dV, dK)
//   ss64t   8 x m64n64k16, A and B MN-major (transposed) from shared memory (dQ)
//   ss128   8 x m64n128k16, both K-major from shared memory (the forward's S)
//   rs128   8 x m64n128k16, A from registers, B MN-major
//   bwd     the backward's per-pair products of one consumer: 8 ss64 (S^T), 8 ss64 (dP^T),
//           16 rs64 (dV, dK), 8 ss64t (dQ), in its commit groups and waits
//   bwd_rsk the same with S^T's A (K) from registers, as if K were held in registers
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/hopper_device.cuh"

namespace {

using namespace ulysses::cuda::hopper;

enum Mode { kSs64, kRs64, kSs64t, kSs128, kRs128, kBwd, kBwdRsk, kModes };
const char* kNames[kModes] = {"ss64", "rs64", "ss64t", "ss128", "rs128", "bwd", "bwd_rsk"};
constexpr int kSmem = 160 * 1024;

__device__ __forceinline__ uint64_t dsc(uint32_t a, uint32_t lbo, uint32_t sbo) {
  uint32_t x;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(x) : "r"(a));
  return make_desc_sw128(x, lbo, sbo);
}

template <int N>
__device__ __forceinline__ void keep(float (&r)[N]) {
  fence_regs(r);
}

template <int MODE>
__global__ void __launch_bounds__(256, 1) rate_kernel(int iters, float* sink) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  // Some non-zero bf16 data (the rate of zeros could differ).
  for (int i = threadIdx.x; i < (kSmem - 1024) / 4; i += blockDim.x)
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + 4 * i), "r"(0x3c003c00u ^ (i * 2654435761u & 0x00ff00ffu)));
  __syncthreads();
  const int wg = threadIdx.x / 128;
  // Each warpgroup its own 64 KB window: A-like tile at +0 (16 KB), B-like tile at +16 KB (32 KB).
  const uint32_t a_t = base + wg * 65536, b_t = a_t + 16384;
  uint32_t ra[4] = {0x3c003c00u, 0x3c003c01u, 0x3c013c00u, 0x3c003c02u};
  float acc0[64], acc1[64];
  for (int i = 0; i < 64; ++i) acc0[i] = acc1[i] = 0.f;
  float live = 0.f;  // the per-round products (S^T, dP^T, dQ) die each round, as in the kernel
  auto& dv0 = *reinterpret_cast<float(*)[32]>(&acc1[0]);
  auto& dk0 = *reinterpret_cast<float(*)[32]>(&acc1[32]);  // (ptxas serializes with the kernel's 4 accumulators here)
  for (int it = 0; it < iters; ++it) {
    if constexpr (MODE == kBwd || MODE == kBwdRsk) {
      float st[32], dp[32], dq[32];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const uint32_t koff = (kk / 4) * 8192 + (kk % 4) * 32;
        if constexpr (MODE == kBwdRsk) wgmma_rs_m64n64k16_tb(st, ra, dsc(b_t + kk * 2048, 1024, 1024), kk > 0);
        else wgmma_ss_m64n64k16(st, dsc(a_t + koff, 16, 1024), dsc(b_t + koff, 16, 1024), kk > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const uint32_t koff = (kk / 4) * 8192 + (kk % 4) * 32;
        wgmma_ss_m64n64k16(dp, dsc(a_t + koff, 16, 1024), dsc(b_t + 16384 + koff, 16, 1024), kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      keep(st);
      keep(dp);
      live += st[0] + dp[31];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wgmma_rs_m64n64k16_tb(dv0, ra, dsc(b_t + kk * 2048, 1024, 1024), 1);
        wgmma_rs_m64n64k16_tb(dk0, ra, dsc(b_t + 8192 + kk * 2048, 1024, 1024), 1);
        wgmma_rs_m64n64k16_tb(dv0, ra, dsc(b_t + 16384 + kk * 2048, 1024, 1024), 1);
        wgmma_rs_m64n64k16_tb(dk0, ra, dsc(b_t + 24576 + kk * 2048, 1024, 1024), 1);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
        wgmma_ss_m64n64k16_ta_tb(dq, dsc(a_t + kk * 2048, 1024, 1024), dsc(b_t + kk * 2048, 1024, 1024), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      keep(acc1);
      keep(dq);
      live += dq[5];
    } else {
      // Two accumulators alternate (rounds in pairs), one group in flight while the next is issued.
      auto round = [&](float(&acc)[64]) {
        auto& a32 = *reinterpret_cast<float(*)[32]>(&acc[0]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          const uint32_t koff = (kk / 4) * 8192 + (kk % 4) * 32;
          if constexpr (MODE == kSs64) wgmma_ss_m64n64k16(a32, dsc(a_t + koff, 16, 1024), dsc(b_t + koff, 16, 1024), 1);
          if constexpr (MODE == kRs64) wgmma_rs_m64n64k16_tb(a32, ra, dsc(b_t + kk * 2048, 1024, 1024), 1);
          if constexpr (MODE == kSs64t)
            wgmma_ss_m64n64k16_ta_tb(a32, dsc(a_t + kk * 2048, 1024, 1024), dsc(b_t + kk * 2048, 1024, 1024), 1);
          if constexpr (MODE == kSs128)
            wgmma_ss_m64n128k16(acc, dsc(a_t + koff, 16, 1024), dsc(b_t + (kk / 4) * 16384 + (kk % 4) * 32, 16, 1024), 1);
          if constexpr (MODE == kRs128) wgmma_rs_m64n128k16_tb(acc, ra, dsc(b_t + kk * 2048, 8192, 1024), 1);
        }
        wgmma_commit();
        wgmma_wait<1>();
        keep(acc0);
        keep(acc1);
      };
      round(acc0);
      round(acc1);
      ++it;
    }
  }
  wgmma_wait<0>();
  float s = 0.f;
  for (int i = 0; i < 64; ++i) s += acc0[i] + acc1[i];
  s += live;
  if (s == 12345.f) sink[threadIdx.x] = s;  // keeps the products; never true in practice
#else
  __trap();
#endif
}

// wgmmas per warpgroup and round, and FLOPs of each.
double flops_per_round(int mode) {
  const double n64 = 2.0 * 64 * 64 * 16, n128 = 2.0 * 64 * 128 * 16;
  switch (mode) {
    case kSs128:
    case kRs128: return 8 * n128;
    case kBwd:
    case kBwdRsk: return 40 * n64;
    default: return 8 * n64;
  }
}

template <int MODE>
float time_mode(int sms, int wgs, int iters, float* sink) {
  const auto kernel = rate_kernel<MODE>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<sms, 128 * wgs, kSmem>>>(iters / 10, sink);  // warm-up
  CUDA_CHECK_LAUNCH("rate_kernel");
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0));
  kernel<<<sms, 128 * wgs, kSmem>>>(iters, sink);
  CUDA_CHECK(cudaEventRecord(e1));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

template <int MODE>
void run(int sms, int iters, float* sink) {
  for (int wgs = 1; wgs <= 2; ++wgs) {
    const float ms = time_mode<MODE>(sms, wgs, iters, sink);
    const double tflops = flops_per_round(MODE) * iters * wgs * sms / (ms * 1e-3) / 1e12;
    std::printf("wgmma_rate %-8s warpgroups %d: %8.3f ms, %7.1f TFLOPS\n", kNames[MODE], wgs, ms, tflops);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: wgmma_rate_bench [--iters N]\n");
      return 2;
    }
  }
  int dev = 0, sms = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) {
    std::fprintf(stderr, "wgmma_rate_bench: needs an sm_90 device (this one is sm_%d x)\n", major);
    return 1;
  }
  float* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&sink, 256 * sizeof(float)));
  std::printf("wgmma_rate: %d SMs, %d rounds per warpgroup\n", sms, iters);
  run<kSs64>(sms, iters, sink);
  run<kRs64>(sms, iters, sink);
  run<kSs64t>(sms, iters, sink);
  run<kSs128>(sms, iters, sink);
  run<kRs128>(sms, iters, sink);
  run<kBwd>(sms, iters / 5, sink);
  run<kBwdRsk>(sms, iters / 5, sink);
  cudaFree(sink);
  return 0;
}
