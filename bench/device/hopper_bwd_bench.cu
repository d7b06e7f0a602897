// The attention backward alone: cuDNN's fused SDPA backward, our FA2 backward (attention_backward) and
// the Hopper (sm_90a, wgmma) backward (hopper_attention_backward, variants 2 to 7, 9 and 11; hopper3d: 3
// deterministic), causal, one document, H = 32, Hkv = 8, d = 128 (--head-dim 64), all on the same
// forward outputs (our FA2 forward's out and lse). Prints per implementation the median time of a backward call and its
// TFLOPS, and for the Hopper backward the largest |difference| of dq, dk, dv from the FA2 backward.
//   hopper_bwd_bench [--reps N] [--head-dim 64|128] [--impl cudnn|own|hopper2|hopper3|hopper3d|hopper4|hopper5|hopper6|hopper7|hopper9|hopper11|all] [S ...]
//   (default S: 4096 32768 131072)
// FLOPs: causal backward = 5 S^2 H d (the five matrix products of the backward, 2 S^2 d each per
// head, over the half of the square the causal mask keeps), the convention of attention_bench and
// DESIGN.md's MFU; the forward would be 2 S^2 H d.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/hopper_attention.h"
#include "core/error.h"
#include "bench_util.cuh"

namespace {

using bench_util::Buf;
using bench_util::max_diff;

void bench(int64_t S, int64_t d, int reps_set, const std::string& impl) {
  const int64_t H = 32, Hkv = 8;
  const double scale = 1.0 / std::sqrt(double(d));
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d);
  Buf<__nv_bfloat16> q(nq), k(nk), v(nk), out(nq), dout(nq), dq(nq), dk(nk), dv(nk), dq2(nq), dk2(nk), dv2(nk);
  Buf<float> lse{size_t(H * S)}, scratch(1);
  Buf<int32_t> doc{size_t(S)}, bounds(2);
  const size_t ws_bytes = ulysses::cuda::attention_backward_workspace_bytes(S, H, Hkv, d);
  Buf<unsigned char> ws(ws_bytes);
  bench_util::fill_uniform<<<1024, 256>>>(q.p, int64_t(nq), 1);
  bench_util::fill_uniform<<<1024, 256>>>(k.p, int64_t(nk), 2);
  bench_util::fill_uniform<<<1024, 256>>>(v.p, int64_t(nk), 3);
  bench_util::fill_uniform<<<1024, 256>>>(dout.p, int64_t(nq), 4);
  CUDA_CHECK_LAUNCH("fill_uniform");
  CUDA_CHECK(cudaMemset(doc.p, 0, size_t(S) * sizeof(int32_t)));
  const int32_t bh[2] = {0, int32_t(S)};
  CUDA_CHECK(cudaMemcpy(bounds.p, bh, sizeof bh, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  ulysses::cuda::attention_forward(out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d, scale, stream);
  // The FA2 backward's outputs, the reference of the differences.
  ulysses::cuda::attention_backward(dq2.p, dk2.p, dv2.p, dout.p, out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d,
                                    scale, ws.p, ws_bytes, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const int reps = reps_set > 0 ? reps_set : S >= 131072 ? 3 : 7;
  const double flops = 5.0 * double(S) * double(S) * double(H) * double(d);

  for (const char* name : {"cudnn", "own", "hopper2", "hopper3", "hopper3d", "hopper4", "hopper5", "hopper6", "hopper7", "hopper9", "hopper11"}) {
    if (impl != "all" && impl != name) continue;
    const std::string n = name;
    std::unique_ptr<ulysses::cuda::CudnnAttention> attn;
    ulysses::cuda::AttentionProblem p;
    p.S = S, p.H = H, p.Hkv = Hkv, p.d = d, p.documents = 1, p.longest = S, p.scale = scale;
    size_t cudnn_ws = 0;
    std::string why;
    if (n == "cudnn") {
      try {
        attn = std::make_unique<ulysses::cuda::CudnnAttention>(stream);
        if (!attn->supports(p, true, &why)) {
          std::printf("%9lld d=%lld cudnn : not supported: %s\n", (long long)S, (long long)d, why.c_str());
          continue;
        }
        cudnn_ws = attn->workspace_bytes(p, true);
      } catch (const std::exception& e) {
        std::printf("%9lld d=%lld cudnn : unavailable: %s\n", (long long)S, (long long)d, e.what());
        continue;
      }
    }
    if (n.rfind("hopper", 0) == 0 && !ulysses::cuda::hopper_attention_backward_supported(d, H, Hkv, &why)) {
      std::printf("%9lld d=%lld hopper: not supported: %s\n", (long long)S, (long long)d, why.c_str());
      continue;
    }
    Buf<unsigned char> cws(cudnn_ws);
    auto bwd = [&] {
      if (n == "cudnn") attn->backward(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, bounds.p, p, cws.p);
      else if (n == "own")
        ulysses::cuda::attention_backward(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d,
                                          scale, ws.p, ws_bytes, stream);
      else
        ulysses::cuda::hopper_attention_backward(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, doc.p, S, H,
                                                 Hkv, d, scale, ws.p, ws_bytes, stream, n.rfind("hopper3", 0) == 0 ? 3 : n == "hopper4" ? 4 : n == "hopper5" ? 5 : n == "hopper6" ? 6 : n == "hopper7" ? 7 : n == "hopper9" ? 9 : n == "hopper11" ? 11 : 2, n == "hopper3d");
    };
    CUDA_CHECK(cudaMemset(dq.p, 0xFF, nq * 2));  // NaN: an unwritten element shows in the differences
    CUDA_CHECK(cudaMemset(dk.p, 0xFF, nk * 2));
    CUDA_CHECK(cudaMemset(dv.p, 0xFF, nk * 2));
    bwd();  // warm-up (cuDNN builds its graph), then the differences from the FA2 backward
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const float eq = max_diff(dq.p, dq2.p, int64_t(nq), scratch.p), ek = max_diff(dk.p, dk2.p, int64_t(nk), scratch.p),
                ev = max_diff(dv.p, dv2.p, int64_t(nk), scratch.p);
    std::printf("%9lld d=%lld %-8s: checking: max|diff| vs own dq %.3g dk %.3g dv %.3g\n", (long long)S,
                (long long)d, name, eq, ek, ev);
    std::fflush(stdout);
    const double ms = bench_util::median_ms(stream, reps, 1, bwd);
    std::printf("%9lld d=%lld %-8s: backward %8.3f ms %7.1f TFLOPS (5 S^2 H d)\n", (long long)S, (long long)d, name,
                ms, flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int reps = 0;
    int64_t d = 128;
    std::string impl = "all";
    std::vector<int64_t> sizes;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
      else if (a == "--head-dim" && i + 1 < argc) d = std::atoll(argv[++i]);
      else if (a == "--impl" && i + 1 < argc) impl = argv[++i];
      else if (!a.empty() && a[0] != '-') sizes.push_back(std::atoll(a.c_str()));
      else {
        std::fprintf(stderr,
                     "usage: hopper_bwd_bench [--reps N] [--head-dim 64|128] [--impl cudnn|own|hopper2|hopper3|hopper3d|hopper4|hopper5|hopper6|hopper7|hopper9|hopper11|all] "
                     "[S ...]\n");
        return 2;
      }
    }
    if (sizes.empty()) sizes = {4096, 32768, 131072};
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("hopper_bwd_bench: %s, d %lld, H 32 / Hkv 8, causal, one document\n", prop.name, (long long)d);
    for (int64_t S : sizes) bench(S, d, reps, impl);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hopper_bwd_bench: %s\n", e.what());
    return 1;
  }
}
