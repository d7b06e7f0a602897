// Launches of the backward attention kernels (bodies: attention_backward_kernel.cuh).
//
// Workspace layout (each part starts at a multiple of 256 bytes):
//   dq_acc  float [S, H, d]   dQ accumulated by atomics, zeroed here first
//   dsum    float [H, S]      D = rowsum(dout * out)
//   qbmin   int32 [nqb]       min doc_start of each query block of BR rows
//   sufmin  int32 [nqb]       suffix minimum of qbmin
//   dq_order int32 [H, ceil(S / 64), 2]  the deterministic Hopper backward's count of dQ
//                             contributions done per (query head, 64-row block, 64-column half); zeroed
// where BR is the backward query tile for d (bwd_query_tile) and nqb = ceil(S / BR).
// The block-offset form (attention_backward_block) lays it out for S = Sq, its query rows.
#include <algorithm>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_backward_kernel.cuh"
#include "backend/cuda/attention_backward_parts.h"
#include "backend/cuda/attention_launch.h"
#include "backend/cuda/check.h"
#include "backend/cuda_attention_workspace.h"

namespace ulysses::cuda {
namespace {

using attn::BwdConfig;

int bwd_query_tile(int64_t d) {
  switch (d) {
    case 16: return BwdConfig<16>::BR;
    case 32: return BwdConfig<32>::BR;
    case 64: return BwdConfig<64>::BR;
    default: return BwdConfig<128>::BR;
  }
}

// The planner counts this workspace from backend/cuda_attention_workspace.h.
static_assert(BwdConfig<16>::BR == cuda_attention_bwd_query_tile(16) &&
                  BwdConfig<32>::BR == cuda_attention_bwd_query_tile(32) &&
                  BwdConfig<64>::BR == cuda_attention_bwd_query_tile(64) &&
                  BwdConfig<128>::BR == cuda_attention_bwd_query_tile(128),
              "backend/cuda_attention_workspace.h is out of date");

constexpr int kSufminThreads = 512;

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

using Workspace = attn_bwd::WorkspaceParts;
using attn_bwd::workspace_layout;

template <int D>
__global__ void __launch_bounds__(256) attention_bwd_dsum_kernel(float* dsum, const __nv_bfloat16* dout,
                                                                 const __nv_bfloat16* out, int S, int H) {
  attn::attention_bwd_dsum_body<D>(dsum, dout, out, S, H);
}

template <int BR>
__global__ void __launch_bounds__(256) attention_bwd_qbmin_kernel(int32_t* qbmin, const int32_t* doc_start, int S,
                                                                  int nqb) {
  attn::attention_bwd_qbmin_body<BR>(qbmin, doc_start, S, nqb);
}

__global__ void __launch_bounds__(kSufminThreads) attention_bwd_sufmin_kernel(int32_t* sufmin, const int32_t* qbmin,
                                                                             int nqb) {
  __shared__ int scan[kSufminThreads];
  attn::attention_bwd_sufmin_body<kSufminThreads>(sufmin, qbmin, nqb, scan);
}

template <int D, int NW, int BR>
__global__ void __launch_bounds__(NW * 32, 1) attention_bwd_main_kernel(attn::BwdParams p) {
  extern __shared__ __align__(16) unsigned char attn_bwd_smem[];
  attn::attention_bwd_main_body<D, NW, BR>(p, attn_bwd_smem);
}

__global__ void __launch_bounds__(256) attention_bwd_dq_kernel(__nv_bfloat16* dq, const float* acc, int64_t n,
                                                               float scale) {
  attn::attention_bwd_dq_body(dq, acc, n, scale);
}

unsigned blocks_for(int64_t threads_needed, const char* what) {
  const int64_t b = (threads_needed + 255) / 256;
  ULY_CHECK(b <= 2147483647LL, "cuda::attention_backward: " << what << " needs " << b << " blocks, over the grid limit");
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

template <int D>
void run_backward(__nv_bfloat16* dq, attn::BwdParams p, const __nv_bfloat16* out, const Workspace& w,
                  char* ws, cudaStream_t stream) {
  using Cfg = BwdConfig<D>;
  using Tile = attn::BwdTile<D, Cfg::NW, Cfg::BR>;
  const int64_t Sq = p.Sq, Sk = p.Sk, H = p.H;

  attn_bwd::preprocess(ws, w, p.dout, out, p.doc_start + p.q_off, Sq, H, D, Cfg::BR, stream);

  auto kernel = attention_bwd_main_kernel<D, Cfg::NW, Cfg::BR>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Tile::smem_bytes)));
  if (Sk > 0) {
    const dim3 grid(static_cast<unsigned>((Sk + Tile::BC - 1) / Tile::BC), static_cast<unsigned>(p.Hkv));
    kernel<<<grid, Tile::NT, Tile::smem_bytes, stream>>>(p);
    CUDA_CHECK_LAUNCH("attention_bwd_main");
  }

  attn_bwd::convert_dq(dq, p.dq_acc, Sq * H * D, p.scale, stream);
}

}  // namespace

namespace attn_bwd {

WorkspaceParts workspace_layout(int64_t S, int64_t H, int64_t d) {
  const int64_t nqb = (S + bwd_query_tile(d) - 1) / bwd_query_tile(d);
  WorkspaceParts w;
  w.dq_acc = 0;
  w.dsum = w.dq_acc + align256(size_t(S) * size_t(H) * size_t(d) * sizeof(float));
  w.qbmin = w.dsum + align256(size_t(H) * size_t(S) * sizeof(float));
  w.sufmin = w.qbmin + align256(size_t(nqb) * sizeof(int32_t));
  w.dq_order = w.sufmin + align256(size_t(nqb) * sizeof(int32_t));
  w.total = w.dq_order + align256(size_t(H) * size_t((S + 63) / 64) * 2 * sizeof(int32_t));
  return w;
}

void preprocess(char* ws, const WorkspaceParts& w, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                const int32_t* doc_start, int64_t Sq, int64_t H, int64_t d, int br, cudaStream_t stream) {
  ULY_CHECK(br == 32 || br == 64, "attention backward: query tile " << br << " (32 or 64)");
  ULY_CHECK(br >= bwd_query_tile(d), "attention backward: query tile " << br << " below the workspace's");
  const int nqb = static_cast<int>((Sq + br - 1) / br);
  CUDA_CHECK(cudaMemsetAsync(ws + w.dq_acc, 0, size_t(Sq * H * d) * sizeof(float), stream));
  CUDA_CHECK(cudaMemsetAsync(ws + w.dq_order, 0, w.total - w.dq_order, stream));
  float* dsum = reinterpret_cast<float*>(ws + w.dsum);
  const unsigned dsum_blocks = blocks_for(Sq * H * (d / 8), "dsum");
  const int S32 = static_cast<int>(Sq), H32 = static_cast<int>(H);
  switch (d) {
    case 16: attention_bwd_dsum_kernel<16><<<dsum_blocks, 256, 0, stream>>>(dsum, dout, out, S32, H32); break;
    case 32: attention_bwd_dsum_kernel<32><<<dsum_blocks, 256, 0, stream>>>(dsum, dout, out, S32, H32); break;
    case 64: attention_bwd_dsum_kernel<64><<<dsum_blocks, 256, 0, stream>>>(dsum, dout, out, S32, H32); break;
    case 128: attention_bwd_dsum_kernel<128><<<dsum_blocks, 256, 0, stream>>>(dsum, dout, out, S32, H32); break;
    default: ULY_FAIL("attention backward: unreachable head_dim " << d);
  }
  CUDA_CHECK_LAUNCH("attention_bwd_dsum");
  int32_t* qbmin = reinterpret_cast<int32_t*>(ws + w.qbmin);
  if (br == 32)
    attention_bwd_qbmin_kernel<32><<<blocks_for(nqb, "qbmin"), 256, 0, stream>>>(qbmin, doc_start, S32, nqb);
  else
    attention_bwd_qbmin_kernel<64><<<blocks_for(nqb, "qbmin"), 256, 0, stream>>>(qbmin, doc_start, S32, nqb);
  CUDA_CHECK_LAUNCH("attention_bwd_qbmin");
  attention_bwd_sufmin_kernel<<<1, kSufminThreads, 0, stream>>>(reinterpret_cast<int32_t*>(ws + w.sufmin), qbmin,
                                                                nqb);
  CUDA_CHECK_LAUNCH("attention_bwd_sufmin");
}

attn::BwdParams checked_params(const char* op, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                               const __nv_bfloat16* dout, const __nv_bfloat16* out, const float* lse,
                               const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                               const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                               int64_t Hkv, int64_t d, double scale, void* workspace, size_t workspace_bytes, int br,
                               WorkspaceParts* w_out) {
  const WorkspaceParts w = workspace_layout(Sq, H, d);
  if (w_out) *w_out = w;
  ULY_CHECK(workspace != nullptr && workspace_bytes >= w.total,
            op << ": workspace of " << workspace_bytes << " bytes at " << workspace << " is too small; need "
               << w.total << " bytes (attention_backward_workspace_bytes(S=" << Sq << ", H=" << H
               << ", Hkv=" << Hkv << ", d=" << d << "))");
  attn_host::check_ptr(workspace, "workspace", op);
  if (Sq > 0) {
    attn_host::check_ptr(dq, "dq", op);
    attn_host::check_ptr(dout, "dout", op);
    attn_host::check_ptr(out, "out", op);
    attn_host::check_ptr(q, "q", op);
  }
  if (Sk > 0) {
    attn_host::check_ptr(dk, "dk", op);
    attn_host::check_ptr(dv, "dv", op);
    attn_host::check_ptr(k, "k", op);
    attn_host::check_ptr(v, "v", op);
  }
  ULY_CHECK(lse != nullptr && doc_start != nullptr, op << ": lse or doc_start is null");

  char* ws = static_cast<char*>(workspace);
  attn::BwdParams p{};
  p.dk = dk;
  p.dv = dv;
  p.dq_acc = reinterpret_cast<float*>(ws + w.dq_acc);
  p.dout = dout;
  p.q = q;
  p.k = k;
  p.v = v;
  p.lse = lse;
  p.dsum = reinterpret_cast<const float*>(ws + w.dsum);
  p.doc_start = doc_start;
  p.qbmin = reinterpret_cast<const int32_t*>(ws + w.qbmin);
  p.sufmin = reinterpret_cast<const int32_t*>(ws + w.sufmin);
  p.dq_order = reinterpret_cast<int32_t*>(ws + w.dq_order);
  p.Sq = static_cast<int>(Sq);
  p.Sk = static_cast<int>(Sk);
  p.q_off = static_cast<int>(q0);
  p.k_off = static_cast<int>(k0);
  p.H = static_cast<int>(H);
  p.Hkv = static_cast<int>(Hkv);
  p.group = static_cast<int>(H / Hkv);
  p.nqb = static_cast<int>((Sq + br - 1) / br);
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.scale = static_cast<float>(scale);
  return p;
}

void convert_dq(__nv_bfloat16* dq, const float* dq_acc, int64_t n, float scale, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t dq_blocks = std::min<int64_t>((n / 4 + 255) / 256, 132 * 16);
  attention_bwd_dq_kernel<<<static_cast<unsigned>(dq_blocks), 256, 0, stream>>>(dq, dq_acc, n, scale);
  CUDA_CHECK_LAUNCH("attention_bwd_dq");
}

}  // namespace attn_bwd

size_t attention_backward_workspace_bytes(int64_t S, int64_t H, int64_t Hkv, int64_t d) {
  attn_host::check_shapes("cuda::attention_backward_workspace_bytes", S, H, Hkv, d, 1.0);
  const size_t total = workspace_layout(S, H, d).total;
  ULY_CHECK(total == cuda_attention_backward_workspace_bytes(S, H, d),
            "backend/cuda_attention_workspace.h disagrees with the workspace layout");
  return total;
}

void attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                        const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                        const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start, int64_t S,
                        int64_t H, int64_t Hkv, int64_t d, double scale, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  attention_backward_block(dq, dk, dv, dout, out, lse, q, k, v, doc_start, S, S, 0, 0, H, Hkv, d, scale, workspace,
                           workspace_bytes, stream);
}

void attention_backward_block(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start, int64_t Sq,
                              int64_t Sk, int64_t q0, int64_t k0, int64_t H, int64_t Hkv, int64_t d, double scale,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "cuda::attention_backward";
  attn_host::check_shapes(op, std::max(Sq, Sk), H, Hkv, d, scale);
  attn_host::check_offsets(op, Sq, Sk, q0, k0);
  if (Sq == 0 && Sk == 0) return;
  Workspace w;
  const attn::BwdParams p = attn_bwd::checked_params(op, dq, dk, dv, dout, out, lse, q, k, v, doc_start, Sq, Sk, q0, k0,
                                                     H, Hkv, d, scale, workspace, workspace_bytes,
                                                     bwd_query_tile(d), &w);
  char* ws = static_cast<char*>(workspace);
  switch (d) {
    case 16: run_backward<16>(dq, p, out, w, ws, stream); break;
    case 32: run_backward<32>(dq, p, out, w, ws, stream); break;
    case 64: run_backward<64>(dq, p, out, w, ws, stream); break;
    case 128: run_backward<128>(dq, p, out, w, ws, stream); break;
    default: ULY_FAIL(op << ": unreachable head_dim " << d);
  }
}

}  // namespace ulysses::cuda
