// Timing of the CUDA attention kernels (not a test): causal attention at
// H = 32, Hkv = 8, d = 128 (the Llama-8B shape; --head-dim 64 for Llama-3.2-1B), forward and forward+backward,
// median of several runs after a warm-up, timed with CUDA events; cuDNN's fused
// attention (the engine's default for bf16), our own kernels (FA2 style) and our Hopper
// forward (hopper_attention.h, sm_90a wgmma; forward only; hopper3, hopper4: variants 3 and 4),
// one after the other; ours: the Hopper forward (variant 3) with the Hopper backward (variant 2, or
// --hopper-bwd V), the pair to hold against cuDNN's forward + backward.
//   attention_bench [--doc-len N] [--window W] [--head-dim D] [--ragged] [--autotune] [--reps N] [--hopper-bwd 2..7|9]
//                   [--impl cudnn|own|hopper3|hopper4|ours|both|all] [S ...]
//   both: cudnn and own; all: every one. default S: 8192 32768 131072; --ragged: cuDNN
//   runs equal documents in the ragged form (the general one) instead of as a dense batch.
// FLOPs counted as useful causal work: forward 2 S^2 H d (4 S^2 H d for the two matmuls of the full
// square, halved by the causal mask), backward 5 S^2 H d (2.5x forward), forward+backward 7 S^2 H d.
// With --doc-len N the sequence is packed with documents of N tokens and the same formulas use
// sum(len^2) for S^2. With --window W (Mistral's sliding window, folded into doc_start as the engine's
// make_documents does) S^2 becomes sum over rows of (2 * visible keys - 1), which is len^2 without a
// window; cuDNN is left out there (the engine does not give it windowed rows), so the comparison is
// our FA2 kernels (own) against the Hopper ones. Forward, backward (alone, on the forward's outputs)
// and forward+backward are timed separately. hopper3, hopper4: forward only (its backward is
// attention_backward's, timed under own),
// and its out / lse compared with own's forward on the same inputs (max |difference|), a check at
// sizes the unit tests do not reach. Prints a table and one JSON line per size.
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

struct Settings {
  int64_t doc_len = 0, d = 128;
  int64_t window = 0;  // > 0: a sliding window of that many keys (query i sees keys j > i - window)
  bool ragged = false;
  int reps = 0;           // timed runs (0: 7, or 3 from 128K tokens)
  bool autotune = false;  // cuDNN: time every plan of the heuristics on the first call, keep the fastest
  int hopper_bwd = 2;     // ours: the Hopper backward's variant
};

void bench(int64_t S, const Settings& set, const std::string& impl) {
  const int64_t H = 32, Hkv = 8, d = set.d, doc_len = set.doc_len;
  const double scale = 1.0 / std::sqrt(double(d));
  const size_t nq = size_t(S * H * d), nk = size_t(S * Hkv * d);
  Buf<__nv_bfloat16> q(nq), k(nk), v(nk), out(nq), dout(nq), dq(nq), dk(nk), dv(nk);
  Buf<float> lse{size_t(H * S)};
  Buf<int32_t> doc{size_t(S)};
  const size_t ws_bytes = ulysses::cuda::attention_backward_workspace_bytes(S, H, Hkv, d);
  Buf<unsigned char> ws(ws_bytes);

  bench_util::fill_uniform<<<1024, 256>>>(q.p, int64_t(nq), 1);
  bench_util::fill_uniform<<<1024, 256>>>(k.p, int64_t(nk), 2);
  bench_util::fill_uniform<<<1024, 256>>>(v.p, int64_t(nk), 3);
  bench_util::fill_uniform<<<1024, 256>>>(dout.p, int64_t(nq), 4);
  CUDA_CHECK_LAUNCH("fill_uniform");
  std::vector<int32_t> doc_h(S);
  double pairs = 0;  // sum over rows of 2 * visible keys - 1: sum(len^2) without a window (S^2 for one document)
  for (int64_t i = 0; i < S; ++i) doc_h[i] = doc_len > 0 ? int32_t(i / doc_len * doc_len) : 0;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t bound = std::max<int64_t>(doc_h[i], set.window > 0 ? i - set.window + 1 : 0);
    pairs += 2.0 * double(i - bound + 1) - 1.0;
  }
  CUDA_CHECK(cudaMemcpy(doc.p, doc_h.data(), size_t(S) * sizeof(int32_t), cudaMemcpyHostToDevice));
  std::vector<int32_t> bounds_h;
  for (int64_t i = 0; i < S; ++i)
    if (doc_h[i] == i) bounds_h.push_back(int32_t(i));
  const int64_t documents = int64_t(bounds_h.size());
  bounds_h.push_back(int32_t(S));
  int64_t longest = 0;
  for (int64_t j = 0; j < documents; ++j) longest = std::max<int64_t>(longest, bounds_h[j + 1] - bounds_h[j]);
  Buf<int32_t> bounds{bounds_h.size()};
  CUDA_CHECK(cudaMemcpy(bounds.p, bounds_h.data(), bounds_h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  if (set.window > 0) {  // fold the window into the per-token bound, as make_documents does
    for (int64_t i = 0; i < S; ++i) doc_h[i] = int32_t(std::max<int64_t>(doc_h[i], i - set.window + 1));
    CUDA_CHECK(cudaMemcpy(doc.p, doc_h.data(), size_t(S) * sizeof(int32_t), cudaMemcpyHostToDevice));
  }

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const bool cudnn = impl == "cudnn",
             hopper = impl == "hopper3" || impl == "hopper4";
  const bool ours = impl == "ours";  // Hopper forward variant 3 + Hopper backward variant set.hopper_bwd
  const int hopper_variant = impl == "hopper4" ? 4 : 3;
  if (hopper || ours) {
    std::string why;
    if (!ulysses::cuda::hopper_attention_supported(d, H, Hkv, &why)) {
      std::printf("%9lld %s: not supported: %s\n", (long long)S, impl.c_str(), why.c_str());
      return;
    }
  }
  std::unique_ptr<ulysses::cuda::CudnnAttention> attn;
  ulysses::cuda::AttentionProblem p;
  p.S = S, p.H = H, p.Hkv = Hkv, p.d = d, p.documents = documents, p.longest = longest, p.scale = scale;
  size_t cudnn_ws = 0;
  if (cudnn && set.window > 0) {
    std::printf("%9lld cudnn: not run: a sliding window (the engine runs windowed rows on its own kernels)\n",
                (long long)S);
    return;
  }
  if (cudnn) {
    ulysses::cuda::CudnnAttention::Options options;
    options.dense_batch = !set.ragged;
    options.autotune = set.autotune;
    attn = std::make_unique<ulysses::cuda::CudnnAttention>(stream, options);
    std::string why;
    if (!attn->supports(p, false, &why) || !attn->supports(p, true, &why)) {
      std::printf("%9lld cudnn: not supported: %s\n", (long long)S, why.c_str());
      return;
    }
    cudnn_ws = std::max(attn->workspace_bytes(p, false), attn->workspace_bytes(p, true));
  }
  Buf<unsigned char> cws(cudnn_ws);
  auto fwd = [&] {
    if (cudnn) attn->forward(out.p, lse.p, q.p, k.p, v.p, bounds.p, p, cws.p);
    else if (hopper || ours)
      ulysses::cuda::hopper_attention_forward_variant(out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d, scale, stream,
                                                      hopper_variant);
    else ulysses::cuda::attention_forward(out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d, scale, stream);
  };
  auto bwd = [&] {
    if (cudnn) attn->backward(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, bounds.p, p, cws.p);
    else if (ours)
      ulysses::cuda::hopper_attention_backward(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv,
                                               d, scale, ws.p, ws_bytes, stream, set.hopper_bwd, false, longest);
    else
      ulysses::cuda::attention_backward(dq.p, dk.p, dv.p, dout.p, out.p, lse.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d,
                                        scale, ws.p, ws_bytes, stream);
  };
  fwd();  // warm-up (also gives bwd valid out/lse)
  if (!hopper) bwd();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::string check;
  if (hopper || ours) {  // the same forward by our FA2 kernel, element by element
    Buf<__nv_bfloat16> out2(nq);
    Buf<float> lse2{size_t(H * S)}, scratch(1);
    ulysses::cuda::attention_forward(out2.p, lse2.p, q.p, k.p, v.p, doc.p, S, H, Hkv, d, scale, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    char line[160];
    std::snprintf(line, sizeof line, ", vs own: out max|diff| %.3g, lse max|diff| %.3g",
                  max_diff(out.p, out2.p, int64_t(nq), scratch.p), max_diff(lse.p, lse2.p, H * S, scratch.p));
    check = line;
  }
  const int reps = set.reps > 0 ? set.reps : S >= 131072 ? 3 : 7;
  const double nan = std::nan("");
  const double f_ms = bench_util::median_ms(stream, reps, 1, fwd);
  const double b_ms = hopper ? nan : bench_util::median_ms(stream, reps, 1, bwd);
  const double fb_ms = hopper ? nan : bench_util::median_ms(stream, reps, 1, [&] {
    fwd();
    bwd();
  });
  const double f_flops = 2.0 * pairs * H * d, b_flops = 5.0 * pairs * H * d, fb_flops = 7.0 * pairs * H * d;
  const double f_tf = f_flops / (f_ms * 1e-3) / 1e12, b_tf = b_flops / (b_ms * 1e-3) / 1e12,
               fb_tf = fb_flops / (fb_ms * 1e-3) / 1e12;
  std::string form = cudnn    ? attn->form(p, true)
                     : hopper ? "hopper wgmma forward, variant " + std::to_string(hopper_variant) + check
                     : ours   ? "hopper wgmma forward 3 + backward " + std::to_string(set.hopper_bwd) + check
                              : "own kernels";
  if (cudnn && set.autotune)
    form += ", plans fwd " + std::to_string(attn->chosen_plan(p, false)) + "/" +
            std::to_string(attn->candidate_plans(p, false)) + " bwd " + std::to_string(attn->chosen_plan(p, true)) +
            "/" + std::to_string(attn->candidate_plans(p, true));
  std::printf("%-7s %9lld %9lld %10.3f %10.1f %10.3f %10.1f %12.3f %10.1f  %s\n", impl.c_str(), (long long)S,
              (long long)(doc_len > 0 ? doc_len : S), f_ms, f_tf, b_ms, b_tf, fb_ms, fb_tf, form.c_str());
  // JSON has no NaN: a time not measured is null.
  auto js = [](double x, const char* fmt) {
    char b[32];
    if (std::isnan(x)) return std::string("null");
    std::snprintf(b, sizeof b, fmt, x);
    return std::string(b);
  };
  std::printf("{\"bench\":\"attention\",\"impl\":\"%s\",\"S\":%lld,\"H\":%lld,\"Hkv\":%lld,\"d\":%lld,"
              "\"doc_len\":%lld,\"window\":%lld,\"fwd_ms\":%s,\"fwd_tflops\":%s,\"bwd_ms\":%s,\"bwd_tflops\":%s,"
              "\"fwd_bwd_ms\":%s,\"fwd_bwd_tflops\":%s,\"reps\":%d,\"form\":\"%s\"}\n",
              impl.c_str(), (long long)S, (long long)H, (long long)Hkv, (long long)d,
              (long long)(doc_len > 0 ? doc_len : S), (long long)set.window, js(f_ms, "%.4f").c_str(), js(f_tf, "%.2f").c_str(),
              js(b_ms, "%.4f").c_str(), js(b_tf, "%.2f").c_str(), js(fb_ms, "%.4f").c_str(),
              js(fb_tf, "%.2f").c_str(), reps, form.c_str());
  std::fflush(stdout);
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Settings set;
    std::string impl = "both";
    std::vector<int64_t> sizes;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--doc-len") == 0 && i + 1 < argc) set.doc_len = std::atoll(argv[++i]);
      else if (std::strcmp(argv[i], "--window") == 0 && i + 1 < argc) set.window = std::atoll(argv[++i]);
      else if (std::strcmp(argv[i], "--head-dim") == 0 && i + 1 < argc) set.d = std::atoll(argv[++i]);
      else if (std::strcmp(argv[i], "--ragged") == 0) set.ragged = true;
      else if (std::strcmp(argv[i], "--autotune") == 0) set.autotune = true;
      else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) set.reps = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--impl") == 0 && i + 1 < argc) impl = argv[++i];
      else if (std::strcmp(argv[i], "--hopper-bwd") == 0 && i + 1 < argc) set.hopper_bwd = std::atoi(argv[++i]);
      else sizes.push_back(std::atoll(argv[i]));
    }
    if (impl != "cudnn" && impl != "own" && impl != "hopper3" &&
        impl != "hopper4" && impl != "ours" && impl != "both" && impl != "all") {
      std::fprintf(stderr, "attention_bench: --impl takes cudnn, own, hopper3, hopper4, ours, both "
                           "(cudnn, own) or all\n");
      return 2;
    }
    if (sizes.empty()) sizes = {8192, 32768, 131072};
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("attention_bench on %s, cuDNN %s: causal, H=32, Hkv=8, d=%lld, window %lld, bf16; TFLOPS = "
                "2*sum(len^2)*H*d (fwd), 5*sum(len^2)*H*d (bwd), 7*sum(len^2)*H*d (fwd+bwd)\n",
                prop.name, ulysses::cuda::CudnnAttention::runtime_version().c_str(), (long long)set.d,
                (long long)set.window);
    std::printf("%-7s %9s %9s %10s %10s %10s %10s %12s %10s\n", "impl", "S", "doc_len", "fwd_ms", "fwd_TFLOPS",
                "bwd_ms", "bwd_TFLOPS", "fwdbwd_ms", "fb_TFLOPS");
    for (int64_t S : sizes)
      for (const char* i : {"cudnn", "own", "hopper3", "hopper4", "ours"})
        if (impl == i || impl == "all" || (impl == "both" && (std::strcmp(i, "cudnn") == 0 || std::strcmp(i, "own") == 0)))
          bench(S, set, i);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
