// Timing of cuBLASLt's candidate algorithms for the GEMMs of a Llama step (not a test):
// for each shape the heuristic's first choice (what CublasLtGemm runs) against the
// fastest of its top candidates, median of several runs with CUDA events. Says how
// much an algorithm search per shape could win before one is built into the backend.
//   gemm_bench [--tokens T] [--hidden D] [--ffn F] [--heads-dim Q] [--kv-dim KV] [--vocab V] [--candidates N]
//   default: the Llama-3.2-1B shape at 16,384 tokens.
// Shapes are ours, row-major: C[M, N] = op(A)[M, K] op(B)[K, N]; forward y = x W^T,
// backward dx = dy W and dW += dy^T x (float32 C, accumulated).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "core/error.h"
#include "bench_util.cuh"

namespace {

struct Shape {
  const char* what;
  int64_t M, N, K;
  bool trans_a, trans_b;
  bool f32_out;  // float32 C, accumulated (beta 1): the weight gradients
  double beta;
};

void run(const Shape& s, int candidates, void* a, void* b, void* c, void* ws, size_t ws_bytes, cublasLtHandle_t h,
         cudaStream_t stream) {
  cublasLtMatmulDesc_t op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T (see backend/cuda/gemm.cpp).
  const cublasOperation_t first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)));
  const uint64_t b_rows = s.trans_b ? s.K : s.N, b_cols = s.trans_b ? s.N : s.K;
  const uint64_t a_rows = s.trans_a ? s.M : s.K, a_cols = s.trans_a ? s.K : s.M;
  cublasLtMatrixLayout_t la, lb, lc;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, b_rows, b_cols, int64_t(b_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, a_rows, a_cols, int64_t(a_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, s.f32_out ? CUDA_R_32F : CUDA_R_16BF, s.N, s.M, s.N));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = ws_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
  cublasLtMatmulHeuristicResult_t res[64];
  candidates = std::min(candidates, 64);
  int returned = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, candidates, res, &returned));
  const float alpha = 1.0f, beta = static_cast<float>(s.beta);
  const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
  std::vector<double> ms(static_cast<size_t>(returned), 0.0);
  for (int i = 0; i < returned; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t* algo = &res[i].algo;
    auto once = [&]() -> cublasStatus_t {
      return cublasLtMatmul(h, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, algo, ws, ws_bytes, stream);
    };
    if (once() != CUBLAS_STATUS_SUCCESS) {
      ms[i] = -1;
      continue;
    }
    once();
    ms[i] = bench_util::median_ms(stream, 7, 3, once);
  }
  int best = 0;
  for (int i = 0; i < returned; ++i)
    if (ms[i] > 0 && (ms[best] <= 0 || ms[i] < ms[best])) best = i;
  std::printf("%-22s %6lld %6lld %6lld %c%c %s  first %8.4f ms %6.1f TF  best #%-2d %8.4f ms %6.1f TF  (%d candidates)  %+.1f%%\n",
              s.what, (long long)s.M, (long long)s.N, (long long)s.K, s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N',
              s.f32_out ? "f32+=" : "bf16 ", ms[0], flops / ms[0] / 1e9, best, ms[best], flops / ms[best] / 1e9,
              returned, 100.0 * (ms[0] - ms[best]) / ms[0]);
  std::printf("{\"bench\":\"gemm\",\"what\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"first_ms\":%.5f,\"best_ms\":%.5f,"
              "\"best\":%d,\"candidates\":%d,\"all_ms\":[",
              s.what, (long long)s.M, (long long)s.N, (long long)s.K, ms[0], ms[best], best, returned);
  for (int i = 0; i < returned; ++i) std::printf("%s%.5f", i ? "," : "", ms[i]);
  std::printf("]}\n");
  std::fflush(stdout);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t T = 16384, D = 2048, F = 8192, Q = 2048, KV = 512, V = 128256;
    int candidates = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i];
      const int64_t v = std::atoll(argv[i + 1]);
      if (k == "--tokens") T = v;
      else if (k == "--hidden") D = v;
      else if (k == "--ffn") F = v;
      else if (k == "--heads-dim") Q = v;
      else if (k == "--kv-dim") KV = v;
      else if (k == "--vocab") V = v;
      else if (k == "--candidates") candidates = static_cast<int>(v);
      else ULY_FAIL("gemm_bench: unknown option " << k);
    }
    const Shape shapes[] = {
        {"fwd q", T, Q, D, false, true, false, 0},          {"fwd k/v", T, KV, D, false, true, false, 0},
        {"fwd o", T, D, Q, false, true, false, 0},          {"fwd gate/up", T, F, D, false, true, false, 0},
        {"fwd down", T, D, F, false, true, false, 0},       {"fwd lm_head", T, V, D, false, true, false, 0},
        {"dx o (dattn)", T, Q, D, false, false, false, 0},  {"dx q", T, D, Q, false, false, false, 0},
        {"dx k/v (+=)", T, D, KV, false, false, false, 1},  {"dx down (dh)", T, F, D, false, false, false, 0},
        {"dx gate/up", T, D, F, false, false, false, 0},    {"dx up (+=)", T, D, F, false, false, false, 1},
        {"dx lm_head", T, D, V, false, false, false, 0},    {"dW q/o", Q, D, T, true, false, true, 1},
        {"dW k/v", KV, D, T, true, false, true, 1},         {"dW gate/up", F, D, T, true, false, true, 1},
        {"dW down", D, F, T, true, false, true, 1},         {"dW lm_head", V, D, T, true, false, true, 1},
    };
    int64_t max_a = 0, max_b = 0, max_c = 0;
    for (const Shape& s : shapes) {
      max_a = std::max(max_a, s.M * s.K);
      max_b = std::max(max_b, s.K * s.N);
      max_c = std::max(max_c, s.M * s.N * (s.f32_out ? 2 : 1));
    }
    void *a, *b, *c, *ws;
    const size_t ws_bytes = size_t{32} << 20;
    CUDA_CHECK(cudaMalloc(&a, size_t(max_a) * 2));
    CUDA_CHECK(cudaMalloc(&b, size_t(max_b) * 2));
    CUDA_CHECK(cudaMalloc(&c, size_t(max_c) * 2));
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    bench_util::fill_uniform<<<1024, 256>>>(static_cast<__nv_bfloat16*>(a), max_a, 1, 0.1f);
    bench_util::fill_uniform<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b), max_b, 2, 0.1f);
    bench_util::fill_uniform<<<1024, 256>>>(static_cast<__nv_bfloat16*>(c), max_c, 3, 0.1f);
    CUDA_CHECK_LAUNCH("fill_uniform");
    cublasLtHandle_t h;
    CUBLAS_CHECK(cublasLtCreate(&h));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("gemm_bench on %s: tokens %lld, hidden %lld, ffn %lld, q %lld, kv %lld, vocab %lld; cuBLASLt %zu; "
                "up to %d candidates each\n",
                prop.name, (long long)T, (long long)D, (long long)F, (long long)Q, (long long)KV, (long long)V,
                cublasLtGetVersion(), candidates);
    for (const Shape& s : shapes) run(s, candidates, a, b, c, ws, ws_bytes, h, stream);
    cublasLtDestroy(h);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
