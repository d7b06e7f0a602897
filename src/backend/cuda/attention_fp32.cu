// Float32 causal attention (forward and backward), one warp per row: the
// verification path of the fp32 compute mode (API and workspace layout in
// attention_fp32.h). Mirrors the CPU reference (backend/cpu/attention.cpp):
//
//   forward, warp per (query head h, query i): online softmax over the keys
//     j in [doc_start[i], i] of kv head h / (H / Hkv);
//   backward 1, warp per (h, i): D[h, i] = dout_i . out_i;
//   backward 2, one block: sufmin[i] = min over i' >= i of doc_start[i'];
//   backward 3, warp per (h, i): dq_i = scale * sum_j dS_ij k_j;
//   backward 4, warp per (kv head g, key j): over the query heads of g's group
//     and the queries i >= j that see j (the scan stops at the first i with
//     sufmin[i] > j): dv_j = sum P_ij dout_i, dk_j = scale * sum dS_ij q_i;
//
// with P_ij = exp(scale q_i.k_j - lse_i), dS_ij = P_ij (dout_i . v_j - D_i).
// The kernels run the block-offset form (attention_fp32.h): query row i is global
// token q0 + i, key row j global token k0 + j, doc_start is the whole row's, and
// the full form is the block q0 = k0 = 0, Sq = Sk = S.
// Each lane holds elements c = lane, lane + 32, ... of a row (NPL = ceil(d / 32)
// registers, zero beyond d); dot products are a per-lane fma chain then a
// butterfly shuffle sum, so every lane holds the same bitwise result and
// dout.out and dout.v agree bitwise when out == v. No atomics: deterministic.
#include <algorithm>
#include <climits>
#include <initializer_list>
#include <cmath>
#include <type_traits>

#include "backend/cuda/attention_fp32.h"
#include "backend/cuda_attention_workspace.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "core/error.h"

namespace ulysses::cuda {
namespace {

constexpr int kWarps = 4;  // warps (rows in flight) per block
constexpr int kBlockThreads = kWarps * 32;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond this many blocks
constexpr int kSufminThreads = 1024;
constexpr unsigned kFull = 0xffffffffu;

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

struct Workspace {
  size_t dsum = 0, sufmin = 0, total = 0;
};

Workspace workspace_layout(int64_t S, int64_t H) {
  Workspace w;
  w.dsum = 0;
  w.sufmin = w.dsum + align256(size_t(H) * size_t(S) * sizeof(float));
  w.total = w.sufmin + align256(size_t(S) * sizeof(int32_t));
  return w;
}

// ---- device helpers -----------------------------------------------------------------

template <int NPL>
__device__ __forceinline__ void load_row(float (&r)[NPL], const float* p, int d, int lane) {
#pragma unroll
  for (int t = 0; t < NPL; ++t) {
    const int c = lane + 32 * t;
    r[t] = c < d ? p[c] : 0.f;
  }
}

template <int NPL>
__device__ __forceinline__ void store_row(float* p, const float (&r)[NPL], float mul, int d, int lane) {
#pragma unroll
  for (int t = 0; t < NPL; ++t) {
    const int c = lane + 32 * t;
    if (c < d) p[c] = mul * r[t];
  }
}

// This lane's share of a . b (rows in registers, zero beyond d).
template <int NPL>
__device__ __forceinline__ float lane_dot(const float (&a)[NPL], const float (&b)[NPL]) {
  float s = 0.f;
#pragma unroll
  for (int t = 0; t < NPL; ++t) s = fmaf(a[t], b[t], s);
  return s;
}

// Two butterfly sums interleaved; each is bitwise what detail::warp_sum gives.
__device__ __forceinline__ void warp_sum2(float& a, float& b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float xa = __shfl_xor_sync(kFull, a, o);
    const float xb = __shfl_xor_sync(kFull, b, o);
    a += xa;
    b += xb;
  }
}

__device__ __forceinline__ int64_t first_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int64_t>(threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * kWarps; }

// ---- forward ---------------------------------------------------------------------------

// Rows r = h * S + (S - 1 - i): the latest (heaviest) queries of a head first.
template <int NPL>
__global__ void __launch_bounds__(kBlockThreads)
    attention_f32_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                                 int64_t Hkv, int d, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t group = H / Hkv, rows = H * Sq;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const int64_t h = r / Sq, i = Sq - 1 - (r - h * Sq), g = h / group;
    float qr[NPL], acc[NPL];
    load_row(qr, q + (i * H + h) * d, d, lane);
#pragma unroll
    for (int t = 0; t < NPL; ++t) acc[t] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int64_t j0 = max(static_cast<int64_t>(doc_start[q0 + i]) - k0, int64_t{0});
    const int64_t j1 = min(q0 + i - k0, Sk - 1);
    for (int64_t j = j0; j <= j1; ++j) {
      float kr[NPL], vr[NPL];
      load_row(kr, k + (j * Hkv + g) * d, d, lane);
      load_row(vr, v + (j * Hkv + g) * d, d, lane);
      const float s = scale * detail::warp_sum(lane_dot(qr, kr));
      if (s > m) {  // new running max: rescale what was summed so far (m = -inf: corr = 0)
        const float corr = expf(m - s);
        l = fmaf(l, corr, 1.f);
#pragma unroll
        for (int t = 0; t < NPL; ++t) acc[t] = fmaf(acc[t], corr, vr[t]);
        m = s;
      } else {
        const float p = expf(s - m);
        l += p;
#pragma unroll
        for (int t = 0; t < NPL; ++t) acc[t] = fmaf(p, vr[t], acc[t]);
      }
    }
    float* orow = out + (i * H + h) * d;
#pragma unroll
    for (int t = 0; t < NPL; ++t) {
      const int c = lane + 32 * t;
      if (c < d) orow[c] = l > 0.f ? acc[t] / l : 0.f;
    }
    if (lane == 0) lse[h * Sq + i] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}

// ---- backward --------------------------------------------------------------------------

template <int NPL>
__global__ void __launch_bounds__(kBlockThreads)
    attention_f32_dsum_kernel(float* dsum, const float* dout, const float* out, int64_t S, int64_t H, int d) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = H * S;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const int64_t h = r / S, i = r - h * S;
    float dor[NPL], outr[NPL];
    load_row(dor, dout + (i * H + h) * d, d, lane);
    load_row(outr, out + (i * H + h) * d, d, lane);
    const float D = detail::warp_sum(lane_dot(dor, outr));
    if (lane == 0) dsum[h * S + i] = D;
  }
}

// One block: each thread owns a contiguous chunk of rows.
__global__ void __launch_bounds__(kSufminThreads)
    attention_f32_sufmin_kernel(int32_t* sufmin, const int32_t* doc_start, int64_t S) {
  __shared__ int32_t after[kSufminThreads];  // min of the chunks after thread t's
  const int64_t chunk = (S + kSufminThreads - 1) / kSufminThreads;
  const int64_t b = static_cast<int64_t>(threadIdx.x) * chunk, e = min(S, b + chunk);
  int32_t mn = INT_MAX;
  for (int64_t i = b; i < e; ++i) mn = min(mn, doc_start[i]);
  after[threadIdx.x] = mn;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = INT_MAX;
    for (int t = kSufminThreads - 1; t >= 0; --t) {
      const int32_t c = after[t];
      after[t] = run;
      run = min(run, c);
    }
  }
  __syncthreads();
  int32_t run = after[threadIdx.x];
  for (int64_t i = e - 1; i >= b; --i) {
    run = min(run, doc_start[i]);
    sufmin[i] = run;
  }
}

// dq, warp per (h, i); rows ordered as in the forward.
template <int NPL>
__global__ void __launch_bounds__(kBlockThreads)
    attention_f32_dq_kernel(float* dq, const float* dout, const float* lse, const float* dsum, const float* q,
                            const float* k, const float* v, const int32_t* doc_start, int64_t Sq, int64_t Sk,
                            int64_t q0, int64_t k0, int64_t H, int64_t Hkv, int d, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t group = H / Hkv, rows = H * Sq;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const int64_t h = r / Sq, i = Sq - 1 - (r - h * Sq), g = h / group;
    float qr[NPL], dor[NPL], acc[NPL];
    load_row(qr, q + (i * H + h) * d, d, lane);
    load_row(dor, dout + (i * H + h) * d, d, lane);
#pragma unroll
    for (int t = 0; t < NPL; ++t) acc[t] = 0.f;
    const float li = lse[h * Sq + i], Di = dsum[h * Sq + i];
    const int64_t j0 = max(static_cast<int64_t>(doc_start[q0 + i]) - k0, int64_t{0});
    const int64_t j1 = min(q0 + i - k0, Sk - 1);
    for (int64_t j = j0; j <= j1; ++j) {
      float kr[NPL], vr[NPL];
      load_row(kr, k + (j * Hkv + g) * d, d, lane);
      load_row(vr, v + (j * Hkv + g) * d, d, lane);
      float s = lane_dot(qr, kr), dp = lane_dot(dor, vr);
      warp_sum2(s, dp);
      const float p = expf(scale * s - li);
      const float ds = p * (dp - Di);
#pragma unroll
      for (int t = 0; t < NPL; ++t) acc[t] = fmaf(ds, kr[t], acc[t]);
    }
    store_row(dq + (i * H + h) * d, acc, scale, d, lane);
  }
}

// dk and dv, warp per (kv head g, key j): rows r = g * Sk + j, earliest (heaviest) keys first.
// sufmin: [Sq], of the query rows' doc_start (global values); kg: the key's global index.
template <int NPL>
__global__ void __launch_bounds__(kBlockThreads)
    attention_f32_dkdv_kernel(float* dk, float* dv, const float* dout, const float* lse, const float* dsum,
                              const int32_t* sufmin, const float* q, const float* k, const float* v,
                              const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                              int64_t Hkv, int d, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t group = H / Hkv, rows = Hkv * Sk;
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const int64_t g = r / Sk, j = r - g * Sk, kg = k0 + j;
    float kr[NPL], vr[NPL], dka[NPL], dva[NPL];
    load_row(kr, k + (j * Hkv + g) * d, d, lane);
    load_row(vr, v + (j * Hkv + g) * d, d, lane);
#pragma unroll
    for (int t = 0; t < NPL; ++t) dka[t] = dva[t] = 0.f;
    // No query at or after the first i with sufmin[i] > kg can see key kg.
    for (int64_t i = max(kg - q0, int64_t{0}); i < Sq && sufmin[i] <= kg; ++i) {
      if (doc_start[q0 + i] > kg) continue;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        float qr[NPL], dor[NPL];
        load_row(qr, q + (i * H + h) * d, d, lane);
        load_row(dor, dout + (i * H + h) * d, d, lane);
        float s = lane_dot(qr, kr), dp = lane_dot(dor, vr);
        warp_sum2(s, dp);
        const float p = expf(scale * s - lse[h * Sq + i]);
        const float ds = p * (dp - dsum[h * Sq + i]);
#pragma unroll
        for (int t = 0; t < NPL; ++t) {
          dva[t] = fmaf(p, dor[t], dva[t]);
          dka[t] = fmaf(ds, qr[t], dka[t]);
        }
      }
    }
    store_row(dk + (j * Hkv + g) * d, dka, scale, d, lane);
    store_row(dv + (j * Hkv + g) * d, dva, 1.f, d, lane);
  }
}

// ---- host side -----------------------------------------------------------------------------

void check_args(const char* op, int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale) {
  ULY_CHECK(d >= 1 && d <= kAttentionF32MaxHeadDim,
            op << ": head_dim d = " << d << " is not supported by the fp32 CUDA attention kernels; supported: 1 to "
               << kAttentionF32MaxHeadDim);
  ULY_CHECK(S >= 0 && S <= 2147483647LL, op << ": sequence length S = " << S << " must be in [0, 2^31)");
  ULY_CHECK(H >= 1 && Hkv >= 1, op << ": head counts must be positive, got H = " << H << ", Hkv = " << Hkv);
  ULY_CHECK(H % Hkv == 0, op << ": H = " << H << " query heads is not a multiple of Hkv = " << Hkv
                             << " kv heads (grouped-query attention needs H % Hkv == 0)");
  ULY_CHECK(std::isfinite(scale), op << ": scale = " << scale << " is not finite");
}

// Scalar fp32 loads: 4-byte alignment is enough.
struct NamedPtr {
  const void* p;
  const char* name;
};

void check_ptrs(const char* op, std::initializer_list<NamedPtr> ptrs) {
  for (const NamedPtr& x : ptrs) {
    ULY_CHECK(x.p != nullptr, op << ": " << x.name << " is null");
    ULY_CHECK(reinterpret_cast<uintptr_t>(x.p) % 4 == 0,
              op << ": " << x.name << " = " << x.p << " is not 4-byte aligned");
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>((rows + kWarps - 1) / kWarps, 1, kMaxBlocks));
}

// Calls f(std::integral_constant<int, NPL>) with NPL = ceil(d / 32), d in [1, 256].
template <class F>
void with_npl(int64_t d, F&& f) {
  switch ((d + 31) / 32) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: ULY_FAIL("attention fp32: unreachable head_dim " << d);
  }
}

}  // namespace

void attention_forward_f32(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale,
                           cudaStream_t stream) {
  attention_forward_block_f32(out, lse, q, k, v, doc_start, S, S, 0, 0, H, Hkv, d, scale, stream);
}

void attention_forward_block_f32(float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                                 int64_t Hkv, int64_t d, double scale, cudaStream_t stream) {
  const char* op = "cuda::attention_forward_f32";
  check_args(op, std::max(Sq, Sk), H, Hkv, d, scale);
  ULY_CHECK(q0 >= 0 && k0 >= 0, op << ": block offsets q0 = " << q0 << ", k0 = " << k0 << " must be >= 0");
  if (Sq == 0) return;
  check_ptrs(op, {{out, "out"}, {lse, "lse"}, {q, "q"}, {doc_start, "doc_start"}});
  if (Sk > 0) check_ptrs(op, {{k, "k"}, {v, "v"}});
  const float scale_f = static_cast<float>(scale);
  const int di = static_cast<int>(d);
  with_npl(d, [&](auto npl) {
    constexpr int NPL = decltype(npl)::value;
    attention_f32_forward_kernel<NPL><<<row_blocks(H * Sq), kBlockThreads, 0, stream>>>(
        out, lse, q, k, v, doc_start, Sq, Sk, q0, k0, H, Hkv, di, scale_f);
    CUDA_CHECK_LAUNCH("attention_f32_forward");
  });
}

size_t attention_backward_f32_workspace_bytes(int64_t S, int64_t H, int64_t Hkv, int64_t d) {
  check_args("cuda::attention_backward_f32_workspace_bytes", S, H, Hkv, d, 1.0);
  if (S == 0) return 0;
  const size_t total = workspace_layout(S, H).total;
  // The planner counts this workspace through the plain-C++ twin of the formula.
  ULY_CHECK(total == cuda_attention_f32_backward_workspace_bytes(S, H),
            "attention_fp32.cu and backend/cuda_attention_workspace.h disagree on the workspace size");
  return total;
}

void attention_backward_f32(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int32_t* doc_start, int64_t S,
                            int64_t H, int64_t Hkv, int64_t d, double scale, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  attention_backward_block_f32(dq, dk, dv, dout, out, lse, q, k, v, doc_start, S, S, 0, 0, H, Hkv, d, scale,
                               workspace, workspace_bytes, stream);
}

void attention_backward_block_f32(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                                  int64_t Hkv, int64_t d, double scale, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream) {
  const char* op = "cuda::attention_backward_f32";
  check_args(op, std::max(Sq, Sk), H, Hkv, d, scale);
  ULY_CHECK(q0 >= 0 && k0 >= 0, op << ": block offsets q0 = " << q0 << ", k0 = " << k0 << " must be >= 0");
  if (Sq == 0 && Sk == 0) return;
  const Workspace w = workspace_layout(Sq, H);
  ULY_CHECK(Sq == 0 || (workspace != nullptr && workspace_bytes >= w.total),
            op << ": workspace of " << workspace_bytes << " bytes at " << workspace << " is too small; need "
               << w.total << " bytes (attention_backward_f32_workspace_bytes(S=" << Sq << ", H=" << H
               << ", Hkv=" << Hkv << ", d=" << d << "))");
  if (Sq > 0)
    check_ptrs(op, {{workspace, "workspace"}, {dq, "dq"}, {dout, "dout"}, {out, "out"}, {lse, "lse"}, {q, "q"},
                    {doc_start, "doc_start"}});
  if (Sk > 0) check_ptrs(op, {{dk, "dk"}, {dv, "dv"}, {k, "k"}, {v, "v"}});
  char* ws = static_cast<char*>(workspace);
  float* dsum = Sq > 0 ? reinterpret_cast<float*>(ws + w.dsum) : nullptr;
  int32_t* sufmin = Sq > 0 ? reinterpret_cast<int32_t*>(ws + w.sufmin) : nullptr;
  const float scale_f = static_cast<float>(scale);
  const int di = static_cast<int>(d);
  with_npl(d, [&](auto npl) {
    constexpr int NPL = decltype(npl)::value;
    if (Sq > 0) {
      attention_f32_dsum_kernel<NPL><<<row_blocks(H * Sq), kBlockThreads, 0, stream>>>(dsum, dout, out, Sq, H, di);
      CUDA_CHECK_LAUNCH("attention_f32_dsum");
      attention_f32_sufmin_kernel<<<1, kSufminThreads, 0, stream>>>(sufmin, doc_start + q0, Sq);
      CUDA_CHECK_LAUNCH("attention_f32_sufmin");
      attention_f32_dq_kernel<NPL><<<row_blocks(H * Sq), kBlockThreads, 0, stream>>>(
          dq, dout, lse, dsum, q, k, v, doc_start, Sq, Sk, q0, k0, H, Hkv, di, scale_f);
      CUDA_CHECK_LAUNCH("attention_f32_dq");
    }
    if (Sk > 0) {
      attention_f32_dkdv_kernel<NPL><<<row_blocks(Hkv * Sk), kBlockThreads, 0, stream>>>(
          dk, dv, dout, lse, dsum, sufmin, q, k, v, doc_start, Sq, Sk, q0, k0, H, Hkv, di, scale_f);
      CUDA_CHECK_LAUNCH("attention_f32_dkdv");
    }
  });
}

}  // namespace ulysses::cuda
