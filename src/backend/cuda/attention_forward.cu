// Launches of the forward attention kernel (body: attention_forward_kernel.cuh).
#include <algorithm>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_forward_kernel.cuh"
#include "backend/cuda/attention_launch.h"
#include "backend/cuda/check.h"

namespace ulysses::cuda {
namespace {

template <int D, int NW, int MT, int BC>
__global__ void __launch_bounds__(NW * 32, 1) attention_forward_kernel(attn::FwdParams p) {
  extern __shared__ __align__(16) unsigned char attn_fwd_smem[];
  attn::attention_forward_body<D, NW, MT, BC>(p, attn_fwd_smem);
}

template <int D>
void launch_forward(const attn::FwdParams& p, cudaStream_t stream) {
  using Cfg = attn::FwdConfig<D>;
  using Tile = attn::FwdTile<D, Cfg::NW, Cfg::MT, Cfg::BC>;
  auto kernel = attention_forward_kernel<D, Cfg::NW, Cfg::MT, Cfg::BC>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Tile::smem_bytes)));
  const dim3 grid(static_cast<unsigned>((p.Sq + Tile::BR - 1) / Tile::BR), static_cast<unsigned>(p.H));
  kernel<<<grid, Tile::NT, Tile::smem_bytes, stream>>>(p);
  CUDA_CHECK_LAUNCH("attention_forward");
}

}  // namespace

void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       const __nv_bfloat16* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv,
                       int64_t d, double scale, cudaStream_t stream) {
  attention_forward_block(out, lse, q, k, v, doc_start, S, S, 0, 0, H, Hkv, d, scale, stream);
}

void attention_forward_block(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0,
                             int64_t k0, int64_t H, int64_t Hkv, int64_t d, double scale, cudaStream_t stream) {
  const char* op = "cuda::attention_forward";
  attn_host::check_shapes(op, std::max(Sq, Sk), H, Hkv, d, scale);
  attn_host::check_offsets(op, Sq, Sk, q0, k0);
  if (Sq == 0) return;
  attn_host::check_ptr(out, "out", op);
  attn_host::check_ptr(q, "q", op);
  if (Sk > 0) {
    attn_host::check_ptr(k, "k", op);
    attn_host::check_ptr(v, "v", op);
  }
  ULY_CHECK(lse != nullptr && doc_start != nullptr, op << ": lse or doc_start is null");

  attn::FwdParams p{};
  p.out = out;
  p.lse = lse;
  p.q = q;
  p.k = k;
  p.v = v;
  p.doc_start = doc_start;
  p.Sq = static_cast<int>(Sq);
  p.Sk = static_cast<int>(Sk);
  p.q_off = static_cast<int>(q0);
  p.k_off = static_cast<int>(k0);
  p.H = static_cast<int>(H);
  p.Hkv = static_cast<int>(Hkv);
  p.group = static_cast<int>(H / Hkv);
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  switch (d) {
    case 16: launch_forward<16>(p, stream); break;
    case 32: launch_forward<32>(p, stream); break;
    case 64: launch_forward<64>(p, stream); break;
    case 128: launch_forward<128>(p, stream); break;
    default: ULY_FAIL(op << ": unreachable head_dim " << d);
  }
}

}  // namespace ulysses::cuda
