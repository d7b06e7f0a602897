// Timing of the memory-bound CUDA kernels of a Llama step (not a test): each op at one layer's
// shape, median of several runs with CUDA events, with the bytes it must move and the rate
// that gives, to compare against the card's copy rate (also measured here).
//   ops_bench [--tokens N] [--hidden D] [--ffn F] [--heads H] [--kv-heads Hkv] [--head-dim d] [--vocab V]
//   default: the Llama-3.2-1B shape at 16,384 tokens.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/cross_entropy.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/gated_activation.h"
#include "core/error.h"
#include "bench_util.cuh"

namespace {

using bf16 = __nv_bfloat16;

template <class T>
T* dev(int64_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(T)));
  return static_cast<T*>(p);
}

template <class F>
void time_op(const char* what, double bytes, cudaStream_t s, F&& f) {
  f();
  f();
  const double m = bench_util::median_ms(s, 15, 4, f);
  std::printf("%-28s %9.4f ms %9.1f MB %7.2f TB/s\n", what, m, bytes / 1e6, bytes / (m * 1e-3) / 1e12);
  std::printf("{\"bench\":\"ops\",\"op\":\"%s\",\"ms\":%.5f,\"bytes\":%.0f,\"tb_per_s\":%.3f}\n", what, m, bytes,
              bytes / (m * 1e-3) / 1e12);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ulysses::cuda;
  try {
    int64_t N = 16384, D = 2048, F = 8192, H = 32, Hkv = 8, d = 64, V = 128256;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i];
      const int64_t v = std::atoll(argv[i + 1]);
      if (k == "--tokens") N = v;
      else if (k == "--hidden") D = v;
      else if (k == "--ffn") F = v;
      else if (k == "--heads") H = v;
      else if (k == "--kv-heads") Hkv = v;
      else if (k == "--head-dim") d = v;
      else if (k == "--vocab") V = v;
      else ULY_FAIL("ops_bench: unknown option " << k);
    }
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("ops_bench on %s: tokens %lld, hidden %lld, ffn %lld, heads %lld/%lld x %lld, vocab %lld (bf16)\n",
                prop.name, (long long)N, (long long)D, (long long)F, (long long)H, (long long)Hkv, (long long)d,
                (long long)V);
    const int64_t ND = N * D, NF = N * F;
    bf16 *x = dev<bf16>(ND), *y = dev<bf16>(ND), *dy = dev<bf16>(ND), *dx = dev<bf16>(ND), *w = dev<bf16>(D);
    float *rstd = dev<float>(N), *dw = dev<float>(D);
    bf16 *gate = dev<bf16>(NF), *up = dev<bf16>(NF), *h = dev<bf16>(NF);
    bench_util::fill_uniform<<<1024, 256>>>(x, ND, 1, 1.f);
    bench_util::fill_uniform<<<1024, 256>>>(dy, ND, 2, 1.f);
    bench_util::fill_uniform<<<1024, 256>>>(dx, ND, 3, 1.f);
    bench_util::fill_uniform<<<1024, 256>>>(w, D, 4, 1.f);
    bench_util::fill_uniform<<<1024, 256>>>(gate, NF, 5, 2.f);
    bench_util::fill_uniform<<<1024, 256>>>(up, NF, 6, 2.f);
    bench_util::fill_uniform<<<1024, 256>>>(h, NF, 7, 1.f);
    CUDA_CHECK_LAUNCH("fill_uniform");
    const double b2 = 2.0;
    time_op("copy (d2d, reference)", 2 * NF * b2, s,
            [&] { CUDA_CHECK(cudaMemcpyAsync(h, gate, size_t(NF) * 2, cudaMemcpyDeviceToDevice, s)); });
    time_op("rmsnorm forward", 2 * ND * b2, s, [&] { rmsnorm_forward(y, rstd, x, w, N, D, 1e-5, s); });
    time_op("rmsnorm backward (+= dx)", 4 * ND * b2, s,
            [&] { rmsnorm_backward(dx, dw, dy, x, w, rstd, N, D, s, true); });
    time_op("rmsnorm backward", 3 * ND * b2, s, [&] { rmsnorm_backward(y, dw, dy, x, w, rstd, N, D, s, false); });
    time_op("add", 3 * ND * b2, s, [&] { add(y, x, dy, ND, s); });
    time_op("swiglu forward", 3 * NF * b2, s, [&] { gated_activation_forward(h, gate, up, NF, ulysses::Activation::SiLU, s); });
    bf16 *dgate = dev<bf16>(NF), *dup = dev<bf16>(NF);
    time_op("swiglu backward", 5 * NF * b2, s,
            [&] { gated_activation_backward(dgate, dup, h, gate, up, NF, ulysses::Activation::SiLU, s); });
    cudaFree(dgate);
    cudaFree(dup);
    int32_t* pos = dev<int32_t>(N);
    std::vector<int32_t> pos_h(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) pos_h[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    CUDA_CHECK(cudaMemcpy(pos, pos_h.data(), size_t(N) * 4, cudaMemcpyHostToDevice));
    std::vector<float> inv_h(static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i) inv_h[static_cast<size_t>(i)] = 1.0f / std::pow(500000.0f, 2.0f * i / d);
    float* inv = dev<float>(d / 2);
    CUDA_CHECK(cudaMemcpy(inv, inv_h.data(), size_t(d / 2) * 4, cudaMemcpyHostToDevice));
    time_op("rope q (in place)", 2 * N * H * d * b2, s, [&] { rope_forward(gate, gate, pos, inv, N, H, d, s); });
    time_op("rope k (in place)", 2 * N * Hkv * d * b2, s, [&] { rope_forward(up, up, pos, inv, N, Hkv, d, s); });
    cudaFree(gate);
    cudaFree(up);
    cudaFree(h);
    // Cross-entropy over [N, V] logits, in place (as the step runs it): read twice, written once.
    bf16* logits = dev<bf16>(N * V);
    bench_util::fill_uniform<<<1024, 256>>>(logits, N * V, 8, 4.f);
    int32_t* targets = dev<int32_t>(N);
    for (int64_t i = 0; i < N; ++i) pos_h[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % V);
    CUDA_CHECK(cudaMemcpy(targets, pos_h.data(), size_t(N) * 4, cudaMemcpyHostToDevice));
    float* losses = dev<float>(N);
    time_op("cross-entropy (2 reads, 1 write)", 3 * N * V * b2, s,
            [&] { cross_entropy_forward_backward(logits, losses, logits, targets, N, V, 1.0, s); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
