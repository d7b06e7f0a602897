// Hopper (sm_90a) causal attention backward, warp-specialised with wgmma, after the design of
// FlashAttention-3's backward (Shah et al., arXiv 2407.08608); our own code. Same semantics,
// arguments, workspace and outputs as attention_backward (attention.h). See docs/attention.md.
// UNTESTED on a GPU when written.
//
// Preprocessing and the final dq conversion are attention_backward's own (attention_backward_parts.h):
// dq_acc zeroed, dsum = rowsum(dout * out), qbmin / sufmin over query blocks of BR = 64 rows (the
// workspace holds ceil(S / 32) entries for d = 128, so 64-row blocks fit), dq = bf16(scale * dq_acc).
//
// Main kernel: one CTA per (key block of BC = 128 keys, kv head), 3 warpgroups of 128 threads:
//   warpgroup 0, producer: for every (query head of the group, query block of BR = 64 rows) pair that
//     can see the key block (from the block holding its first key up to the last one whose suffix-min
//     doc_start reaches its last key, skipping blocks whose qbmin is past it), waits for a ring
//     stage's `empty` mbarrier, copies Q, dO (128-byte-swizzled tiles) and lse, dsum, doc_start of the
//     64 rows into it with cp.async, and once they landed fences them to the async proxy and arrives
//     on the stage's `full` mbarrier (128 arrivals).
//   warpgroups 1 and 2, consumers: warpgroup c owns keys 64c..64c+63 of the block, their K and V tiles
//     loaded once by the whole CTA, and keeps their dK, dV rows (64 x d fp32) in registers. Per pair:
//       S^T  = K_c Q^T           wgmma m64n64k16, A = K (smem, K-major), B = Q (smem, K-major)
//       dP^T = V_c dO^T          same with V, dO (its own commit group: it runs during P^T)
//       P^T  = exp2(S^T scale log2e - lse log2e), masked (causal, documents, rows / keys past S)
//       dS^T = P^T (dP^T - dsum)
//       dV  += P^T dO            A = P^T from registers (bf16), B = dO (smem, MN-major: transposed)
//       dK  += dS^T Q            A = dS^T from registers, B = Q (smem, MN-major)
//     dS^T (bf16) goes to a shared [128 keys x 64 rows] tile (double-buffered), both consumers meet
//     at a named barrier, and consumer c computes columns 64c..64c+63 of dQ = dS K over all 128 keys
//     (wgmma with A = dS read transposed from the tile, B = K MN-major) and adds them to dq_acc with
//     red.global.add.v2.f32 (d = 64: consumer 0 alone). Each warp then arrives on the stage's `empty`
//     mbarrier (8 arrivals). At the end dK (times scale) and dV are written in bf16.
// Shared-memory tiles use the 128-byte swizzle of the forward (hopper_attention_forward.cu): a tile
// of R rows x 64c columns is c halves of R x 128 bytes, row r's 16-byte chunk x at
// r * 128 + ((x ^ (r % 8)) * 16), every half 1024-byte aligned. K-major operands (K, V, Q, dO as A or
// B of the score products): stride byte offset 1024, a k16 step moves 32 bytes inside the atom, the
// next 64 columns of d are the next half. MN-major operands (dO, Q and K as B, dS as transposed A):
// a k16 step is 16 rows = 2048 bytes, one wgmma per 64-wide half of N (or M = 64), 1024 as both
// offsets, as the forward's V.
#include <algorithm>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_backward_parts.h"
#include "backend/cuda/attention_backward_kernel.cuh"
#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/attention_launch.h"
#include "backend/cuda/check.h"
#include "backend/cuda/hopper_attention.h"
#include "backend/cuda/hopper_device.cuh"

namespace ulysses::cuda {
namespace hopper_bwd {
namespace {

using attn::bf16;
using attn::fast_exp2;
using attn::kIntMax;
using attn::kLog2e;
using attn::pack_bf16;
using namespace hopper;

constexpr int kBR = 64;            // query rows per pair
constexpr int kBC = 128;           // keys per CTA: 2 consumer warpgroups x 64
constexpr int kThreads = 384;      // 3 warpgroups
constexpr int kProducerRegs = 24;  // setmaxnreg: 128 x 24 + 256 x 240 = 64512 <= 65536
constexpr int kConsumerRegs = 240;

// attn::BwdParams (attention_backward_kernel.cuh), full form: Sq = Sk = S, no offsets, qbmin / sufmin
// over query blocks of kBR rows.
using Params = attn::BwdParams;

template <int D, int NS>
struct Tile {
  static constexpr int kHalves = D / 64;
  static constexpr int kv_wg_bytes = 64 * D * 2;         // one consumer's K (or V) rows
  static constexpr int k_off = 0;                        // K [2 consumers][halves][64][128 B]
  static constexpr int v_off = k_off + 2 * kv_wg_bytes;  // V, same
  static constexpr int q_tile_bytes = kBR * D * 2;       // Q (or dO) of one pair
  static constexpr int stage_off = v_off + 2 * kv_wg_bytes;
  static constexpr int stage_bytes = 2 * q_tile_bytes;   // Q, dO
  static constexpr int ds_off = stage_off + NS * stage_bytes;  // dS^T [2 buffers][128 keys][128 B]
  static constexpr int ds_bytes = kBC * kBR * 2;
  static constexpr int row_off = ds_off + 2 * ds_bytes;  // per stage: lse, dsum (float), doc_start [kBR]
  static constexpr int row_bytes = 3 * kBR * 4;
  static constexpr int bar_off = row_off + NS * row_bytes;  // full[NS], empty[NS]
  static constexpr int misc_off = bar_off + 2 * NS * 8;     // the pair range [1]
  static constexpr size_t smem_bytes = 1024 + misc_off + 16;  // + alignment slack
  static_assert(D == 64 || D == 128, "head_dim");
  static_assert(smem_bytes <= 227 * 1024, "shared memory");
};

// Byte offset of row r's 16-byte chunk c (c < 8) inside a 128-byte-swizzled half.
__device__ __forceinline__ uint32_t sw128(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

// make_desc_sw128 of an address made opaque to the compiler at each use, so that the descriptors of
// the unrolled k-steps are rebuilt where they are used rather than hoisted out of the pair loop
// and held in registers (64-bit each: the consumers' accumulators need the registers).
__device__ __forceinline__ uint64_t desc_at(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  uint32_t a;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(a) : "r"(saddr));
  return make_desc_sw128(a, lbo, sbo);
}

// Keeps register A operands live (unmoved, unreused) up to this point: an asynchronous wgmma reads
// them until its wait.
__device__ __forceinline__ void fence_a(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// rows x D of a [.., ld] bf16 matrix into a swizzled tile at `dst` (shared address), rows at or
// past `valid` zeroed; `tid` / `nt`: this thread among the copiers.
template <int D>
__device__ __forceinline__ void load_tile(uint32_t dst, int rows, const bf16* src, int64_t ld, int valid, int tid,
                                          int nt) {
  constexpr int CH = D / 8;
#pragma unroll 1
  for (int c = tid; c < rows * CH; c += nt) {
    const int r = c / CH, cc = c % CH;
    const uint32_t a = dst + uint32_t((cc / 8) * rows * 128) + sw128(r, cc % 8);
    if (r < valid) cp_async16(a, src + r * ld + cc * 8);
    else st_shared_zero16(a);
  }
}

// acc = A B^T over d (one commit group's wgmmas, not committed): A [64 x D] at `a`, B [64 x D] at
// `b`, both K-major swizzled tiles; a k16 step is 32 bytes inside the atom, 64 columns a half.
template <int D>
__device__ __forceinline__ void mma_kmajor(float (&acc)[32], uint32_t a, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t koff = (kk / 4) * (64 * 128) + (kk % 4) * 32;
    wgmma_ss_m64n64k16(acc, desc_at(a + koff, 16, 1024), desc_at(b + koff, 16, 1024), kk > 0 ? 1 : 0);
  }
}

// Pair `it` of the CTA's walk: query head and query block.
struct Pair {
  int h, qb;
};

template <int D, int NS>
__global__ void __launch_bounds__(kThreads, 1) hopper_attention_backward_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<D, NS>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  unsigned char* smem = smem_raw + (base - raw);
  int* s_misc = reinterpret_cast<int*>(smem + T::misc_off);
  const uint32_t full_bar = base + T::bar_off, empty_bar = full_bar + NS * 8;

  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid % 32;
  const int S = p.Sq;
  const int kb = blockIdx.x, hk = blockIdx.y;
  const int k0 = kb * kBC;
  const int k_last = min(k0 + kBC - 1, S - 1);
  const int64_t q_row = int64_t(p.H) * D, kv_row = int64_t(p.Hkv) * D;

  // K and V of the block (each consumer's 64 keys as its own tile), by the whole CTA.
  for (int c = 0; c < 2; ++c) {
    const int kc = k0 + 64 * c;
    const int64_t off = (kc < S ? int64_t(kc) * kv_row : 0) + int64_t(hk) * D;
    load_tile<D>(base + T::k_off + c * T::kv_wg_bytes, 64, p.k + off, kv_row, S - kc, tid, kThreads);
    load_tile<D>(base + T::v_off + c * T::kv_wg_bytes, 64, p.v + off, kv_row, S - kc, tid, kThreads);
  }
  cp_async_commit();

  // Query blocks that can see a key of this block: from the one holding k0 to the last whose
  // suffix-min doc_start is <= k_last (sufmin is non-decreasing: binary search).
  const int qb_begin = k0 / kBR;
  if (tid == 0) {
    int lo = qb_begin, hi = p.nqb;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (p.sufmin[mid] > k_last) hi = mid;
      else lo = mid + 1;
    }
    s_misc[0] = lo;
    for (int s = 0; s < NS; ++s) {
      mbar_init(full_bar + 8 * s, 128);  // every producer thread, once its copies landed
      mbar_init(empty_bar + 8 * s, 8);   // every consumer warp, once done with the stage
    }
    mbar_init_fence();
  }
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();
  const int nq = max(s_misc[0] - qb_begin, 0);
  const int total = p.group * nq;  // pairs, before skipping blocks whose qbmin is past the keys
  auto pair = [&](int it) { return Pair{hk * p.group + it / nq, qb_begin + it % nq}; };

  if (wg == 0) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    int n = 0;  // pairs loaded
    for (int it = 0; it < total; ++it) {
      const Pair pr = pair(it);
      if (p.qbmin[pr.qb] > k_last) continue;  // (only for non-contiguous doc_start)
      const int s = n % NS, round = n / NS;
      mbar_wait(empty_bar + 8 * s, (round & 1) ^ 1);
      const int q0 = pr.qb * kBR;
      const int64_t off = int64_t(q0) * q_row + int64_t(pr.h) * D;
      const uint32_t sq = base + T::stage_off + s * T::stage_bytes, so = sq + T::q_tile_bytes;
      load_tile<D>(sq, kBR, p.q + off, q_row, S - q0, wtid, 128);
      load_tile<D>(so, kBR, p.dout + off, q_row, S - q0, wtid, 128);
      if (wtid < kBR) {
        const int i = q0 + wtid;
        const uint32_t srow = base + T::row_off + s * T::row_bytes + 4 * wtid;
        float* prow = reinterpret_cast<float*>(smem + T::row_off + s * T::row_bytes);
        if (i < S) {
          cp_async4(srow, p.lse + int64_t(pr.h) * S + i);
          cp_async4(srow + 4 * kBR, p.dsum + int64_t(pr.h) * S + i);
          cp_async4(srow + 8 * kBR, p.doc_start + i);
        } else {
          prow[wtid] = 0.f;
          prow[kBR + wtid] = 0.f;
          reinterpret_cast<int*>(prow)[2 * kBR + wtid] = kIntMax;  // masks rows past S
        }
      }
      cp_async_commit();
      if (n > 0) {
        cp_async_wait<1>();  // this thread's copies of pair n - 1 landed
        fence_proxy_async();
        mbar_arrive(full_bar + 8 * ((n - 1) % NS));
      }
      ++n;
    }
    if (n > 0) {
      cp_async_wait<0>();
      fence_proxy_async();
      mbar_arrive(full_bar + 8 * ((n - 1) % NS));
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1, wi = wtid / 32, g = lane / 4, t = lane % 4;
  const uint32_t sk = base + T::k_off + c * T::kv_wg_bytes, sv = base + T::v_off + c * T::kv_wg_bytes;
  const int jl = 16 * wi + g;        // this thread's key rows within the consumer's 64: jl, jl + 8
  const int key0 = k0 + 64 * c + jl;  // their global indices: key0, key0 + 8

  float dk[T::kHalves][32], dv[T::kHalves][32];
#pragma unroll
  for (int hh = 0; hh < T::kHalves; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) dk[hh][i] = dv[hh][i] = 0.f;

  int n = 0;  // pairs consumed
  for (int it = 0; it < total; ++it) {
    const Pair pr = pair(it);
    if (p.qbmin[pr.qb] > k_last) continue;
    const int s = n % NS, round = n / NS, buf = n & 1;
    ++n;
    const int q0 = pr.qb * kBR;
    const uint32_t sq = base + T::stage_off + s * T::stage_bytes, so = sq + T::q_tile_bytes;
    const float* c_lse = reinterpret_cast<const float*>(smem + T::row_off + s * T::row_bytes);
    const float* c_ds = c_lse + kBR;
    const int* c_lo = reinterpret_cast<const int*>(c_lse + 2 * kBR);
    mbar_wait(full_bar + 8 * s, round & 1);

    // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 rows each).
    float st[32], dpt[32];
    wgmma_fence();
    mma_kmajor<D>(st, sk, sq);
    wgmma_commit();
    mma_kmajor<D>(dpt, sv, so);
    wgmma_commit();
    wgmma_wait<1>();  // S^T (the older group) done: P^T is computed while dP^T runs
    fence_regs(st);

    // st <- P^T (masked). Element 4n + e: key key0 + 8 (e / 2), row q0 + 8n + 2t + (e & 1).
#pragma unroll
    for (int nn = 0; nn < 8; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = 8 * nn + 2 * t + (e & 1), i = q0 + qc, j = key0 + 8 * (e / 2);
        const bool ok = j >= c_lo[qc] && j <= i && j < S;
        st[4 * nn + e] = ok ? fast_exp2(st[4 * nn + e] * p.scale_log2 - c_lse[qc] * kLog2e) : 0.f;
      }
    wgmma_wait<0>();
    fence_regs(dpt);
    // dpt <- dS^T = P^T (dP^T - dsum).
#pragma unroll
    for (int nn = 0; nn < 8; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[4 * nn + e] = st[4 * nn + e] * (dpt[4 * nn + e] - c_ds[8 * nn + 2 * t + (e & 1)]);
    uint32_t pa[4][4], sa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        pa[kk][x] = pack_bf16(st[8 * kk + 2 * x], st[8 * kk + 2 * x + 1]);
        sa[kk][x] = pack_bf16(dpt[8 * kk + 2 * x], dpt[8 * kk + 2 * x + 1]);
      }

    // dV += P^T dO, dK += dS^T Q (B operands MN-major: rows of the tile are the k dimension).
#pragma unroll
    for (int hh = 0; hh < T::kHalves; ++hh) {
      fence_regs(dv[hh]);
      fence_regs(dk[hh]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) {
        const uint32_t boff = hh * (kBR * 128) + kk * (16 * 128);
        wgmma_rs_m64n64k16_tb(dv[hh], pa[kk], desc_at(so + boff, 1024, 1024), 1);
        wgmma_rs_m64n64k16_tb(dk[hh], sa[kk], desc_at(sq + boff, 1024, 1024), 1);
      }
    wgmma_commit();

    // dS^T (bf16) to the shared tile [128 keys][64 rows]: sa[kk][x] holds key row jl + 8 (x & 1),
    // rows 16kk + 8 (x / 2) + 2t, +1 (chunk 2kk + x / 2, bytes 4t..4t+3).
    const uint32_t sds = base + T::ds_off + buf * T::ds_bytes;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const uint32_t a = sds + sw128(64 * c + jl + 8 * (x & 1), 2 * kk + x / 2) + 4 * t;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(sa[kk][x]) : "memory");
      }
    fence_proxy_async();
    named_barrier_sync(1, 256);  // both consumers' dS^T written (and, two pairs back, read)

    // Waits for this warpgroup's wgmmas, then this warp is done with the stage.
    auto release_stage = [&] {
      wgmma_wait<0>();
      fence_a(pa);  // the dK / dV wgmmas read them until the wait
      fence_a(sa);
#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) {
        fence_regs(dv[hh]);
        fence_regs(dk[hh]);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar + 8 * s);
    };
    // dQ[:, 64c .. 64c + 63] = dS K over the 128 keys (A = dS: the tile read transposed); d = 64:
    // consumer 0 only.
    if (c < T::kHalves) {
      float dq[32];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBC / 16; ++kk) {
        const uint32_t koff = base + T::k_off + (kk / 4) * T::kv_wg_bytes + c * (64 * 128) + (kk % 4) * (16 * 128);
        wgmma_ss_m64n64k16_ta_tb(dq, desc_at(sds + kk * (16 * 128), 1024, 1024), desc_at(koff, 1024, 1024),
                                 kk > 0 ? 1 : 0);
      }
      wgmma_commit();
      release_stage();
      fence_regs(dq);
      // Element 4n + e of dq: row q0 + jl + 8 (e / 2), column 64c + 8n + 2t + (e & 1).
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int i = q0 + jl + 8 * hf;
        if (i >= S) continue;
        float* dst = p.dq_acc + int64_t(i) * q_row + int64_t(pr.h) * D + 64 * c + 2 * t;
#pragma unroll
        for (int nn = 0; nn < 8; ++nn) red_add_v2(dst + 8 * nn, dq[4 * nn + 2 * hf], dq[4 * nn + 2 * hf + 1]);
      }
    } else {
      release_stage();
    }
  }

  // dK (times scale) and dV in bf16: element 4n + e of half hh is key key0 + 8 (e / 2), column
  // 64hh + 8n + 2t + (e & 1).
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int j = key0 + 8 * hf;
    if (j >= S) continue;
    const int64_t off = int64_t(j) * kv_row + int64_t(hk) * D + 2 * t;
#pragma unroll
    for (int hh = 0; hh < T::kHalves; ++hh)
#pragma unroll
      for (int nn = 0; nn < 8; ++nn) {
        *reinterpret_cast<uint32_t*>(p.dk + off + 64 * hh + 8 * nn) =
            pack_bf16(dk[hh][4 * nn + 2 * hf] * p.scale, dk[hh][4 * nn + 2 * hf + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(p.dv + off + 64 * hh + 8 * nn) =
            pack_bf16(dv[hh][4 * nn + 2 * hf], dv[hh][4 * nn + 2 * hf + 1]);
      }
  }
#else
  __trap();  // built only for sm_90a; the host side refuses other devices
#endif
}

template <int D>
void launch(const Params& p, cudaStream_t stream) {
  constexpr int NS = 2;
  using T = Tile<D, NS>;
  auto kernel = hopper_attention_backward_kernel<D, NS>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(T::smem_bytes)));
  const dim3 grid(static_cast<unsigned>((p.Sq + kBC - 1) / kBC), static_cast<unsigned>(p.Hkv));
  kernel<<<grid, kThreads, T::smem_bytes, stream>>>(p);
  CUDA_CHECK_LAUNCH("hopper_attention_backward");
}

}  // namespace
}  // namespace hopper_bwd

bool hopper_attention_backward_supported(int64_t d, int64_t H, int64_t Hkv, std::string* why) {
  return hopper_attention_supported(d, H, Hkv, why);
}

void hopper_attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                               const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                               const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start, int64_t S,
                               int64_t H, int64_t Hkv, int64_t d, double scale, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "cuda::hopper_attention_backward";
  attn_host::check_shapes(op, S, H, Hkv, d, scale);
  std::string why;
  ULY_CHECK(hopper_attention_backward_supported(d, H, Hkv, &why),
            op << ": not supported here: " << why << " (use cuda::attention_backward)");
  if (S == 0) return;
  attn_bwd::WorkspaceParts w;
  const attn::BwdParams p = attn_bwd::checked_params(op, dq, dk, dv, dout, out, lse, q, k, v, doc_start, S, S, 0, 0, H,
                                                     Hkv, d, scale, workspace, workspace_bytes, hopper_bwd::kBR, &w);
  char* ws = static_cast<char*>(workspace);
  attn_bwd::preprocess(ws, w, dout, out, doc_start, S, H, d, hopper_bwd::kBR, stream);
  if (d == 128) hopper_bwd::launch<128>(p, stream);
  else hopper_bwd::launch<64>(p, stream);
  attn_bwd::convert_dq(dq, p.dq_acc, S * H * d, p.scale, stream);
}

}  // namespace ulysses::cuda
