// Hopper (sm_90a) causal attention backward, warp-specialised with wgmma, after the design of
// FlashAttention-3's backward (Shah et al., arXiv 2407.08608); our own code. Same semantics,
// arguments, workspace and outputs as attention_backward (attention.h). See docs/attention.md.
// Variants of one kernel body (backward_cta<D, NS, V, DET, ...>): 2 as described below; 3: 2 with
// its consumers coupled one pair late (three dS^T buffers, per-buffer named barriers) and an option
// (DET) for a deterministic order of the dQ reductions; 4 (KREG_STEPS): 2 with K and V as register A
// operands of the score products at d 64; 5 (EDV): 4 with the dV product issued as soon as P^T is
// known, before dS^T; 6 (PIPE): 5 with a pair's dQ reductions issued after the next pair's scores;
// 7 (DQW): 5 with the dQ reductions issued by a producer warp (produce_tma's dQ writer) instead of a
// consumer thread. All correct on an H100 (2026-12-06 and -07); the fastest: 6 at d 128, 7 at d 64
// (docs/attention.md). 9 (consume_split): the consumers split by product instead of by keys; correct
// on an H100, equal to 6 from 32K and 7% faster at 4K (d 128), slower at d 64 (2026-12-07). 11: 9
// with P^T handed to dw in bf16 (half the shared-memory bytes); correct on an H100, the fastest at
// d 128 (4% over 9 at 4K and 32K, 2026-12-08). Three stages at d 64 (every variant), two at d 128.
// Variant 1 (a cp.async producer, dQ added from registers by red.global.add), slower than 2 in every
// case measured, was removed on 2026-12-07.
//
// Preprocessing and the final dq conversion are attention_backward's own (attention_backward_parts.h):
// dq_acc zeroed, dsum = rowsum(dout * out), qbmin / sufmin over query blocks of BR = 64 rows (the
// workspace holds ceil(S / 32) entries for d = 128, so 64-row blocks fit), dq = bf16(scale * dq_acc).
//
// Variant 2: one CTA per (key block of BC = 128 keys, kv head), 3 warpgroups of 128 threads:
//   warpgroup 0, producer (produce_tma): for every (query head of the group, query block of BR = 64
//     rows) pair that can see the key block (from the block holding its first key up to the last one
//     whose suffix-min doc_start reaches its last key, skipping blocks whose qbmin is past it), waits
//     for a ring stage's `empty` mbarrier; one thread loads Q and dO (128-byte-swizzled tiles) into it
//     by TMA, the stage's `full` mbarrier completing on their bytes, and one warp the 64 rows' lse,
//     dsum and doc_start (32 arrivals).
//   warpgroups 1 and 2, consumers: warpgroup c owns keys 64c..64c+63 of the block, their K and V tiles
//     loaded once by the whole CTA, and keeps their dK, dV rows (64 x d fp32) in registers. Per pair:
//       S^T  = K_c Q^T           wgmma m64n64k16, A = K (smem, K-major), B = Q (smem, K-major)
//       dP^T = V_c dO^T          same with V, dO (its own commit group: it runs during P^T)
//       P^T  = exp2(S^T scale log2e - lse log2e), masked (causal, documents, rows / keys past S) unless
//              every row of the pair sees every key of the consumer
//       dS^T = P^T (dP^T - dsum)
//       dV  += P^T dO            A = P^T from registers (bf16), B = dO (smem, MN-major: transposed)
//       dK  += dS^T Q            A = dS^T from registers, B = Q (smem, MN-major)
//     dS^T (bf16) goes to a shared [128 keys x 64 rows] tile (double-buffered), both consumers meet
//     at a named barrier, and consumer c computes columns 64c..64c+63 of dQ = dS K over all 128 keys
//     (wgmma with A = dS read transposed from the tile, B = K MN-major), stores them to shared memory
//     (two buffers) and one thread adds them to dq_acc with TMA reductions (dq_out; d = 64: consumer
//     0 alone). Each warp then arrives on the stage's `empty` mbarrier (8 arrivals). At the end dK
//     (times scale) and dV are written in bf16.
// Shared-memory tiles use the 128-byte swizzle of the forward (hopper_attention_forward.cu): a tile
// of R rows x 64c columns is c halves of R x 128 bytes, row r's 16-byte chunk x at
// r * 128 + ((x ^ (r % 8)) * 16), every half 1024-byte aligned. K-major operands (K, V, Q, dO as A or
// B of the score products): stride byte offset 1024, a k16 step moves 32 bytes inside the atom, the
// next 64 columns of d are the next half. MN-major operands (dO, Q and K as B, dS as transposed A):
// a k16 step is 16 rows = 2048 bytes, one wgmma per 64-wide half of N (or M = 64), 1024 as both
// offsets, as the forward's V.
#include <cuda.h>  // CUtensorMap (types only: nothing links -lcuda)

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
#include "backend/cuda/hopper_tensor_map.h"

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

// Variant 7's named barriers between consumer c (128 threads) and the producer's dQ writer warp (32):
// its dQ tile stored (consumer arrives, writer syncs); its previous buffer read by the reductions
// (writer arrives, consumer syncs). Ids 2-5 (variants 2-6 use 2, 3 inside a consumer; 3 uses 4-9).
constexpr int kDqBarThreads = 128 + 32;
__device__ __forceinline__ int dq_stored_bar(int c) { return 2 + c; }
__device__ __forceinline__ int dq_free_bar(int c) { return 4 + c; }

// attn::BwdParams (attention_backward_kernel.cuh), full form: Sq = Sk = S, no offsets, qbmin / sufmin
// over query blocks of kBR rows.
using Params = attn::BwdParams;

template <int D, int NS, int V>
struct Tile {
  static constexpr int kHalves = D / 64;
  static constexpr int kv_wg_bytes = 64 * D * 2;         // one consumer's K (or V) rows
  static constexpr int k_off = 0;                        // K [2 consumers][halves][64][128 B]
  static constexpr int v_off = k_off + 2 * kv_wg_bytes;  // V, same
  static constexpr int q_tile_bytes = kBR * D * 2;       // Q (or dO) of one pair
  static constexpr int stage_off = v_off + 2 * kv_wg_bytes;
  static constexpr int stage_bytes = 2 * q_tile_bytes;   // Q, dO
  static constexpr int ds_off = stage_off + NS * stage_bytes;  // dS^T [ds_bufs][128 keys][128 B]
  static constexpr int ds_bytes = kBC * kBR * 2;
  // Variant 3 reads a pair's dS^T one pair late, while the next pair's is written: 3 buffers.
  // Variants 9, 11: one (its dS^T writer reads it for dQ before writing the next).
  static constexpr bool kSplit = V == 9 || V == 11;  // consume_split's layout
  static constexpr int ds_bufs = V == 3 ? 3 : kSplit ? 1 : 2;
  // dQ of a pair in fp32 for the TMA reduction, per buffer (2; variant 3: 1) and
  // dQ-writing consumer (D / 64) two boxes of 64 rows x 32 columns (128-byte swizzled, 8 KB each).
  static constexpr int dq_box_bytes = kBR * 128;
  static constexpr int dq_cons_bytes = 2 * dq_box_bytes;
  static constexpr int dq_off = ds_off + ds_bufs * ds_bytes;
  static constexpr int dq_bufs = V == 2 ? 2 : 1;
  static constexpr int dq_bytes = dq_bufs * kHalves * dq_cons_bytes;
  // Consumer c's dQ tile in buffer `buf` (shared address from the aligned base).
  static __device__ __forceinline__ uint32_t dq_tile(uint32_t base, int buf, int c) {
    return base + dq_off + (buf * kHalves + c) * dq_cons_bytes;
  }
  // Variant 9: P^T of a pair in fp32 from the warpgroup that computes it to the one that computes
  // dS^T, in the accumulators' thread order: [16 float4][128 threads]; 11: in bf16, as the packed
  // A operand of dV ([8 uint4][128 threads]).
  static constexpr int p_off = dq_off + dq_bytes;
  static constexpr int p_bytes = V == 9 ? 16 * 128 * 16 : V == 11 ? 8 * 128 * 16 : 0;
  static constexpr int row_off = p_off + p_bytes;  // per stage: lse, dsum (float), doc_start [kBR]
  static constexpr int row_bytes = 3 * kBR * 4;
  static constexpr int bar_off = row_off + NS * row_bytes;  // full[NS], empty[NS]
  static constexpr int misc_off = bar_off + 2 * NS * 8;  // the pair range; per stage its rows' largest doc_start
  static_assert(NS <= 3, "misc holds 1 + NS ints");
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

// x, opaque to the compiler here: addresses derived from it are computed where they are used, not
// hoisted out of the pair loop into registers (variant 9's consumers have none to spare).
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
  return x;
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
  const uint64_t da = desc_at(a, 16, 1024), db = desc_at(b, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t koff = (kk / 4) * (64 * 128) + (kk % 4) * 32;
    wgmma_ss_m64n64k16(acc, desc_plus(da, koff), desc_plus(db, koff), kk > 0 ? 1 : 0);
  }
}

// mma_kmajor with A's first R k-steps from registers (`ar`, m16n8k16 A fragments of the warp's rows),
// the rest from the tile at `a`.
template <int D, int R>
__device__ __forceinline__ void mma_kmajor_rs(float (&acc)[32], const uint32_t (&ar)[R][4], uint32_t a, uint32_t b) {
  const uint64_t da = desc_at(a, 16, 1024), db = desc_at(b, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t koff = (kk / 4) * (64 * 128) + (kk % 4) * 32;
    if (kk < R) wgmma_rs_m64n64k16(acc, ar[kk], desc_plus(db, koff), kk > 0 ? 1 : 0);
    else wgmma_ss_m64n64k16(acc, desc_plus(da, koff), desc_plus(db, koff), 1);
  }
}

// dq = dS K[:, 64-column half] over a CTA's 128 keys (one commit group's wgmmas, not committed): A =
// the dS^T tile at `ds` ([128 keys][64 rows], read transposed), B = the column half of the K tile at
// `k_half` (MN-major; keys 64h.. in consumer h's rows, KV_WG_BYTES further).
template <int KV_WG_BYTES>
__device__ __forceinline__ void mma_dq(float (&dq)[32], uint32_t ds, uint32_t k_half) {
  const uint64_t d_ds = desc_at(ds, 1024, 1024), d_k = desc_at(k_half, 1024, 1024);
#pragma unroll
  for (int kk = 0; kk < kBC / 16; ++kk) {
    const uint32_t koff = (kk / 4) * KV_WG_BYTES + (kk % 4) * (16 * 128);
    wgmma_ss_m64n64k16_ta_tb(dq, desc_plus(d_ds, kk * (16 * 128)), desc_plus(d_k, koff), kk > 0 ? 1 : 0);
  }
}

// x <- P^T = exp2(S^T scale log2e - lse log2e) in place, for one row block of 64 keys from kb0 against a
// pair's 64 rows from q0 (c_lse, c_lo: the rows' lse and document starts; t: this thread's quad lane).
// Element 4n + e: key key0 + 8 (e / 2), row q0 + 8n + 2t + (e & 1). Masked (causal, documents, keys
// past S) unless every row sees every key: all keys before the first row, and the rows' largest
// document start (lo_max, from the producer's row warp) at or before the first key.
__device__ __forceinline__ void probabilities_t(float (&x)[32], const float* c_lse, const int* c_lo, int q0, int kb0,
                                                int key0, int lo_max, int S, float scale_log2, int t) {
  if (kb0 + 63 < q0 && lo_max <= kb0) {
#pragma unroll
    for (int nn = 0; nn < 8; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        x[4 * nn + e] = fast_exp2(x[4 * nn + e] * scale_log2 - c_lse[8 * nn + 2 * t + (e & 1)] * kLog2e);
  } else {
#pragma unroll
    for (int nn = 0; nn < 8; ++nn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = 8 * nn + 2 * t + (e & 1), i = q0 + qc, j = key0 + 8 * (e / 2);
        const bool ok = j >= c_lo[qc] && j <= i && j < S;
        x[4 * nn + e] = ok ? fast_exp2(x[4 * nn + e] * scale_log2 - c_lse[qc] * kLog2e) : 0.f;
      }
  }
}

// ldmatrix.x4 from a shared-memory address (this lane's row).
__device__ __forceinline__ void ldsm_x4_at(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr)
               : "memory");
}

// Pair `it` of the CTA's walk: query head and query block.
struct Pair {
  int h, qb;
};

// Variant 2's producers, over walk's pairs (f(pair, n)). Thread 0 of the producer warpgroup: per pair, once the stage is free, an
// arrival on its `full` expecting the stage's bytes (Q and dO, kBR rows x D each; rows past S are
// zero-filled and count all the same), then one TMA load per 64-column half of each. Warp 1: the
// rows' lse, dsum and doc_start (loaded before the wait, so their latency hides behind it) and their
// largest doc_start (the consumers' test for a wholly visible pair), stored with plain shared stores
// and an arrival per lane (released by it; the consumers read them after their acquiring wait).
// `full` completes with 33 arrivals and the bytes.
template <int D, int NS, int V, bool DQW, typename Walk>
__device__ __forceinline__ void produce_tma(const Params& p, const Walk& walk, uint32_t base, unsigned char* smem,
                                            uint32_t full_bar, uint32_t empty_bar, const CUtensorMap* tq,
                                            const CUtensorMap* tdo, const CUtensorMap* tdq, int wtid) {
  using T = Tile<D, NS, V>;
  const int S = p.Sq;
  if (wtid == 0) {
    walk([&](const Pair& pr, int n) {
      const int s = n % NS, round = n / NS;
      mbar_wait(empty_bar + 8 * s, (round & 1) ^ 1);
      const int q0 = pr.qb * kBR;
      const uint32_t sq = base + T::stage_off + s * T::stage_bytes, so = sq + T::q_tile_bytes, fb = full_bar + 8 * s;
      mbar_arrive_expect_tx(fb, T::stage_bytes);
      tma_load_tile<D>(sq, kBR, tq, pr.h, q0, fb);
      tma_load_tile<D>(so, kBR, tdo, pr.h, q0, fb);
    });
  } else if (wtid / 32 == 1) {
    const int lane = wtid % 32;
    walk([&](const Pair& pr, int n) {
      const int s = n % NS, round = n / NS;
      const int q0 = pr.qb * kBR;
      float l[2], ds[2];
      int lo[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int i = q0 + lane + 32 * x;
        const bool in = i < S;
        l[x] = in ? p.lse[int64_t(pr.h) * S + i] : 0.f;
        ds[x] = in ? p.dsum[int64_t(pr.h) * S + i] : 0.f;
        lo[x] = in ? p.doc_start[i] : kIntMax;  // masks rows past S
      }
      const int lo_max = __reduce_max_sync(0xffffffffu, max(lo[0], lo[1]));
      mbar_wait(empty_bar + 8 * s, (round & 1) ^ 1);
      if (lane == 0) reinterpret_cast<int*>(smem + T::misc_off)[1 + s] = lo_max;
      float* prow = reinterpret_cast<float*>(smem + T::row_off + s * T::row_bytes);
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        prow[lane + 32 * x] = l[x];
        prow[kBR + lane + 32 * x] = ds[x];
        reinterpret_cast<int*>(prow)[2 * kBR + lane + 32 * x] = lo[x];
      }
      mbar_arrive(full_bar + 8 * s);
    });
  } else if (DQW && wtid / 32 == 2) {
    // Variant 7's dQ writer: per pair, once consumer c has stored its dQ tile in buffer n & 1 (its
    // 128 threads arrive on dq_stored_bar(c), this warp syncs), lane 0 adds the tile to dq_acc with
    // TMA reductions; then, once the reductions before this pair's have read their buffers, the
    // warp arrives on dq_free_bar(c): the consumer syncs on it before it stores pair n + 1 into buffer
    // (n + 1) & 1, the one pair n - 1's reductions read. The consumers never wait for a reduction's issue.
    const bool one = wtid % 32 == 0;
    walk([&](const Pair& pr, int n) {
#pragma unroll
      for (int c = 0; c < T::kHalves; ++c) {
        named_barrier_sync(dq_stored_bar(c), kDqBarThreads);
        const uint32_t sdq = T::dq_tile(base, n & 1, c);
        if (one) {
          tma_reduce_add_3d(tdq, 64 * c, pr.h, pr.qb * kBR, sdq);
          tma_reduce_add_3d(tdq, 64 * c + 32, pr.h, pr.qb * kBR, sdq + T::dq_box_bytes);
        }
      }
      if (one) {
        bulk_commit_group();
        bulk_wait_group_read<1>();  // the previous pair's reductions have read their buffers
      }
      __syncwarp();
#pragma unroll
      for (int c = 0; c < T::kHalves; ++c) named_barrier_arrive(dq_free_bar(c), kDqBarThreads);
    });
    if (one) bulk_wait_group<0>();  // every reduction done before the CTA's shared memory goes
  }
}

// Variant 9's consumers: split by product rather than by keys. Both warpgroups see all 128 keys of the
// block (two row blocks of 64: two m64 wgmmas per product). Warpgroup 1 (`pw`) holds dV and computes
// S^T = K Q^T, P^T and dV += P^T dO; warpgroup 2 (`dw`) holds dK and computes dP^T = V dO^T,
// dS^T = P^T (dP^T - dsum) (P^T from pw through shared memory, fp32 in its accumulator order: the two
// warpgroups' accumulators map threads to elements alike; variant 11: bf16, packed as pw's dV
// operand), dK += dS^T Q and all of dQ = dS K (dS^T
// from its own shared tile). pw runs about a pair ahead: per pair it issues dV(n - 1), then S^T(n),
// computes P^T(n) (its exponentials) while dw's products of pair n - 1 run, and hands P^T(n) over; so
// the exponentials, which stall both consumers together in variants 2-7, run under GEMMs. Registers
// at their peaks: pw dV 128 + S^T 64 (P^T's A operand, 32, only while dV runs, before S^T); dw dK 128
// + dS^T as A operand 32 + one half of dQ 32. Named barriers: kPFull (pw arrives once P^T(n) is stored, dw
// syncs before reading it), kPEmpty (dw arrives once it has read it, pw syncs before storing the
// next), kDwBar (dw's 128 threads: its dS^T stored / its dQ tile stored). Each warp arrives on a
// stage's `empty` once its products reading it are done (4 + 4 = the 8 arrivals expected).
constexpr int kPFull = 6, kPEmpty = 7, kDwBar = 8;
template <int D, int NS, int V, typename Walk>
__device__ __forceinline__ void consume_split(const Params& p, const Walk& walk, uint32_t base, unsigned char* smem,
                                              uint32_t full_bar, uint32_t empty_bar, const CUtensorMap* tdq, int k0,
                                              int hk, int c, int wtid) {
  using T = Tile<D, NS, V>;
  constexpr int H = T::kHalves;
  constexpr bool kPb16 = V == 11;  // P^T handed over in bf16
  const int S = p.Sq, lane = wtid % 32, wi = wtid / 32, g = lane / 4, t = lane % 4;
  const int jl = 16 * wi + g;  // this thread's key rows within a row block of 64: jl, jl + 8
  const int* s_misc = reinterpret_cast<const int*>(smem + T::misc_off);
  auto stage_q = [&](int s) { return base + T::stage_off + s * T::stage_bytes; };
  auto rows = [&](int s) { return reinterpret_cast<const float*>(smem + T::row_off + s * T::row_bytes); };
  auto release = [&](int s) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar + 8 * s);
  };
  const uint32_t sp = base + T::p_off + 16 * wtid;  // this thread's float4 j at sp + j * 2048
  const uint32_t sds = base + T::ds_off;
  const int64_t kv_row = int64_t(p.Hkv) * D;
  // The block's 128 keys' gradient rows (dV in pw, dK times scale in dw) in bf16: element 4n + e of
  // row block h, half hh is key k0 + 64h + jl + 8 (e / 2), column 64hh + 8n + 2t + (e & 1).
  auto write_rows = [&](float (&acc)[2][H][32], __nv_bfloat16* out, float mul) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int j = k0 + 64 * h + jl + 8 * hf;
        if (j >= S) continue;
        const int64_t off = int64_t(j) * kv_row + int64_t(hk) * D + 2 * t;
#pragma unroll
        for (int hh = 0; hh < H; ++hh)
#pragma unroll
          for (int nn = 0; nn < 8; ++nn)
            *reinterpret_cast<uint32_t*>(out + off + 64 * hh + 8 * nn) =
                pack_bf16(acc[h][hh][4 * nn + 2 * hf] * mul, acc[h][hh][4 * nn + 2 * hf + 1] * mul);
      }
  };
  float acc[2][H][32];  // dV (pw) or dK (dw)
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int hh = 0; hh < H; ++hh)
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[h][hh][i] = 0.f;
  float sc[2][32];  // pw: S^T, then P^T; dw: dP^T, then dS^T
  uint32_t fa[2][4][4];  // the bf16 A operand of dV (P^T) or dK (dS^T)
  auto pack_a = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) fa[h][kk][x] = pack_bf16(sc[h][8 * kk + 2 * x], sc[h][8 * kk + 2 * x + 1]);
  };
  auto fence_acc = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int hh = 0; hh < H; ++hh) fence_regs(acc[h][hh]);
  };
  auto fence_fa = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h) fence_a(fa[h]);
  };
  // acc[h][hh] += fa[h] B, B the stage's tile at `b` read MN-major (dO for dV, Q for dK): one commit group.
  auto issue_grad = [&](uint32_t b) {
    fence_acc();
    wgmma_fence();
    const uint64_t db = desc_at(b, 1024, 1024);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int hh = 0; hh < H; ++hh)
          wgmma_rs_m64n64k16_tb(acc[h][hh], fa[h][kk], desc_plus(db, hh * (kBR * 128) + kk * (16 * 128)), 1);
    wgmma_commit();
  };
  // sc[h] = (K or V rows of row block h) (Q or dO)^T: one commit group.
  auto issue_scores = [&](uint32_t kv, uint32_t qo) {
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h) mma_kmajor<D>(sc[h], kv + h * T::kv_wg_bytes, qo);
    wgmma_commit();
  };

  if (c == 0) {
    // ---- pw: S^T, P^T, dV; a pair ahead of dw ----
    // P^T of the pair in stage s (query rows from q0) from S^T in sc, masked unless every row sees
    // every key of the row block; stored for dw once it has read the previous one (`wait_empty`).
    auto probabilities = [&](int s, int q0, bool wait_empty) {
      const float* c_lse = rows(s);
      const int* c_lo = reinterpret_cast<const int*>(c_lse + 2 * kBR);
      fence_regs(sc[0]);
      fence_regs(sc[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        probabilities_t(sc[h], c_lse, c_lo, q0, k0 + 64 * h, k0 + 64 * h + jl, s_misc[1 + s], S, p.scale_log2, t);
      if constexpr (kPb16) {
        pack_a();
        named_barrier_sync_if(wait_empty, kPEmpty, 256);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) st_shared_v4(sp + (h * 4 + kk) * 2048, fa[h][kk]);
      } else {
        named_barrier_sync_if(wait_empty, kPEmpty, 256);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 8; ++j)
            st_shared_v4(sp + (h * 8 + j) * 2048, sc[h][4 * j], sc[h][4 * j + 1], sc[h][4 * j + 2], sc[h][4 * j + 3]);
      }
      named_barrier_arrive(kPFull, 256);
    };
    const uint32_t sk = base + T::k_off;
    // Visiting pair n: dV(n - 1), then S^T(n) and P^T(n), handed over to dw and packed as the next
    // dV's A operand; after the walk, the last pair's dV.
    int n_pairs = 0;
    walk([&](const Pair& pr, int n) {
      const int s = n % NS, sp0 = (n + NS - 1) % NS;
      mbar_wait(full_bar + 8 * s, (n / NS) & 1);
      // dV(n - 1) before S^T(n), not under it: the A operand of one and the accumulators of the other
      // would not fit the registers together with dV. dw's products run meanwhile.
      if (n > 0) {
        issue_grad(stage_q(sp0) + T::q_tile_bytes);  // dV += P^T(n - 1) dO(n - 1)
        wgmma_wait<0>();
        fence_fa();
        fence_acc();
        release(sp0);
      }
      issue_scores(sk, stage_q(s));  // S^T(n)
      wgmma_wait<0>();
      probabilities(s, pr.qb * kBR, n > 0);
      if constexpr (!kPb16) pack_a();
      n_pairs = n + 1;
    });
    if (n_pairs > 0) {
      issue_grad(stage_q((n_pairs - 1) % NS) + T::q_tile_bytes);
      wgmma_wait<0>();
      fence_fa();
      fence_acc();
      release((n_pairs - 1) % NS);
      named_barrier_sync(kPEmpty, 256);  // dw's arrival for the last pair
    }
    write_rows(acc, p.dv, 1.f);
  } else {
    // ---- dw: dP^T, dS^T, dK, dQ ----
    const uint32_t sv = base + T::v_off;
    float dq[32];
    walk([&](const Pair& pr, int n) {
      const int s = n % NS, round = n / NS;
      const float* c_ds = rows(s) + kBR;
      mbar_wait(full_bar + 8 * s, round & 1);
      issue_scores(sv, stage_q(s) + T::q_tile_bytes);  // dP^T = V dO^T
      wgmma_wait<0>();
      fence_regs(sc[0]);
      fence_regs(sc[1]);
      named_barrier_sync(kPFull, 256);
      if constexpr (kPb16) {
        // dS^T from the bf16 P^T: word x of uint4 (h, kk) holds elements 8 kk + 2 x and + 1 (rows
        // 8 (2 kk + x / 2) + 2 t and + 1).
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            uint32_t w[4];
            ld_shared_v4(w, sp + (h * 4 + kk) * 2048);
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              const int i = 8 * kk + 2 * x, qc = 8 * (2 * kk + x / 2) + 2 * t;
              sc[h][i] = __uint_as_float(w[x] << 16) * (sc[h][i] - c_ds[qc]);
              sc[h][i + 1] = __uint_as_float(w[x] & 0xffff0000u) * (sc[h][i + 1] - c_ds[qc + 1]);
            }
          }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            float pv[4];
            ld_shared_v4(pv, sp + (h * 8 + j) * 2048);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = 4 * j + e;  // element 4 nn + e' with nn = j
              sc[h][i] = pv[e] * (sc[h][i] - c_ds[8 * j + 2 * t + (e & 1)]);
            }
          }
      }
      named_barrier_arrive(kPEmpty, 256);
      pack_a();
      // dS^T (bf16) to the shared tile [128 keys][64 rows] for dQ (as variants 2-7 store it); its rows
      // 64h + jl + 8 (x & 1) share jl's swizzle phase g.
      {
        const uint32_t row = opaque_u32(sds + jl * 128 + 4 * t), ph = opaque_u32(g);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              const uint32_t a = row + (64 * h + 8 * (x & 1)) * 128 + (((2 * kk + x / 2) ^ ph) << 4);
              asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(fa[h][kk][x]) : "memory");
            }
      }
      fence_proxy_async();
      if (wtid == 0) bulk_wait_group_read<0>();  // the previous pair's reduction has read the dQ tile
      named_barrier_sync(kDwBar, 128);           // and every thread's dS^T is in its tile
      // dQ[:, 64cc .. 64cc + 63] = dS K over the 128 keys (A = the dS^T tile read transposed), one
      // half at a time (32 registers), the first before dK and stored while dK runs.
      auto issue_dq_half = [&](int cc) {
        wgmma_fence();
        mma_dq<T::kv_wg_bytes>(dq, sds, base + T::k_off + cc * (64 * 128));
        wgmma_commit();
      };
      auto store_dq_half = [&](int cc) {
        fence_regs(dq);
        const uint32_t row = opaque_u32(T::dq_tile(base, 0, cc) + jl * 128 + 8 * (t & 1)), ph = opaque_u32(g);
#pragma unroll
        for (int nn = 0; nn < 8; ++nn)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
            st_shared_v2_f32(row + (nn / 4) * T::dq_box_bytes + 8 * hf * 128 + (((2 * (nn % 4) + t / 2) ^ ph) << 4),
                             dq[4 * nn + 2 * hf], dq[4 * nn + 2 * hf + 1]);
      };
      issue_dq_half(0);
      issue_grad(stage_q(s));  // dK += dS^T Q
      wgmma_wait<1>();         // dQ's first half done; dK may run
      store_dq_half(0);
      if constexpr (H == 2) {
        issue_dq_half(1);
        wgmma_wait<1>();  // dK done: the stage is free
        fence_fa();
        fence_acc();
        release(s);
        wgmma_wait<0>();
        store_dq_half(1);
      } else {
        wgmma_wait<0>();
        fence_fa();
        fence_acc();
        release(s);
      }
      // The dQ tile (one buffer: the previous reduction has read it, waited for before the barrier
      // after the dS^T stores) to dq_acc by one thread.
      fence_proxy_async();
      named_barrier_sync(kDwBar, 128);
      if (wtid == 0) {
#pragma unroll
        for (int cc = 0; cc < H; ++cc) {
          const uint32_t sdq = T::dq_tile(base, 0, cc);
          tma_reduce_add_3d(tdq, 64 * cc, pr.h, pr.qb * kBR, sdq);
          tma_reduce_add_3d(tdq, 64 * cc + 32, pr.h, pr.qb * kBR, sdq + T::dq_box_bytes);
        }
        bulk_commit_group();
      }
      __syncwarp();
    });
    if (wtid == 0) bulk_wait_group<0>();
    write_rows(acc, p.dk, p.scale);
  }
}

// One CTA of the backward. Variant 2 (tq, tdo, tdq: tensor maps of Q, dO and dq_acc): TMA producer
// (produce_tma) and dQ through shared memory by TMA reductions; 3: 2 with the consumers coupled one
// pair late. DET (variant 3 only): the dQ reductions into each (query head, 64-row block, column
// half) in the order of the key blocks.
template <int D, int NS, int V, bool DET = false, int KREG_STEPS = 0, bool EDV = false, bool PIPE = false,
          bool DQW = false>
__device__ __forceinline__ void backward_cta(const Params& p, const CUtensorMap* tq, const CUtensorMap* tdo,
                                             const CUtensorMap* tdq) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<D, NS, V>;
  static_assert(V == 2 || V == 3 || T::kSplit, "variants 2 and 3 (and 4-7, built on 2), 9, 11");
  static_assert(!EDV || V == 2, "the early dV (variant 5) is built on variant 2's loop");
  static_assert(!PIPE || (V == 2 && !DET), "the pipelined dQ output (variant 6) is built on variant 2's loop");
  static_assert(!DQW || (V == 2 && !DET && !PIPE), "the dQ writer warp (variant 7) is built on variant 2's loop");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  unsigned char* smem = smem_raw + (base - raw);
  int* s_misc = reinterpret_cast<int*>(smem + T::misc_off);
  const uint32_t full_bar = base + T::bar_off, empty_bar = full_bar + NS * 8;

  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid % 32;
  const int S = p.Sq;
  // Key blocks in order across the kv heads (blocks are dispatched x fastest): the causal work of a
  // key block falls with its index, so the heaviest go first and the lightest fill the tail. (With
  // the key blocks of one head after another, a list-scheduling model puts the 4K makespan at 1.59x
  // the mean load, 1.00x so.)
  const int hk = p.heads_inside ? blockIdx.x : blockIdx.y, kb = p.heads_inside ? blockIdx.y : blockIdx.x;
  const int k0 = kb * kBC;
  const int k_last = min(k0 + kBC - 1, S - 1);
  const int64_t kv_row = int64_t(p.Hkv) * D;

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
      // The TMA thread's expect_tx and the 32 lanes of the row warp.
      mbar_init(full_bar + 8 * s, 33);
      mbar_init(empty_bar + 8 * s, 8);   // every consumer warp, once done with the stage
    }
    mbar_init_fence();
  }
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();
  const int nq = max(s_misc[0] - qb_begin, 0);
  const int total = p.group * nq;  // pairs, before skipping blocks whose qbmin is past the keys
  // DET walks query blocks from the last down, the group's heads inside: the CTA of key block kb then
  // meets each (head, query block) after kb - 1's CTA, which started earlier on the same walk (its
  // own only has more blocks at the end), so its wait for kb - 1's reduction is short.
  auto pair = [&](int it) {
    if constexpr (DET) return Pair{hk * p.group + it % p.group, qb_begin + nq - 1 - it / p.group};
    else return Pair{hk * p.group + it / nq, qb_begin + it % nq};
  };
  // Calls f(pair, n) for the pairs that see the keys, n counting them (the producers and the
  // consumers). qbmin is loaded one pair ahead: its global-load latency hides behind the pair before.
  auto walk = [&](auto&& f) {
    int n = 0;
    int qm_next = total > 0 ? p.qbmin[pair(0).qb] : 0;
    for (int it = 0; it < total; ++it) {
      const Pair pr = pair(it);
      const int qm = qm_next;
      if (it + 1 < total) qm_next = p.qbmin[pair(it + 1).qb];
      if (qm > k_last) continue;  // (only for non-contiguous doc_start)
      f(pr, n++);
    }
  };

  if (wg == 0) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    produce_tma<D, NS, V, DQW>(p, walk, base, smem, full_bar, empty_bar, tq, tdo, tdq, wtid);
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<kConsumerRegs>();
  if constexpr (T::kSplit) {
    consume_split<D, NS, V>(p, walk, base, smem, full_bar, empty_bar, tdq, k0, hk, wg - 1, wtid);
    return;
  } else {
    const int c = wg - 1, wi = wtid / 32, g = lane / 4, t = lane % 4;
    const uint32_t sk = base + T::k_off + c * T::kv_wg_bytes, sv = base + T::v_off + c * T::kv_wg_bytes;
    const int jl = 16 * wi + g;        // this thread's key rows within the consumer's 64: jl, jl + 8
    const int key0 = k0 + 64 * c + jl;  // their global indices: key0, key0 + 8

    float dk[T::kHalves][32], dv[T::kHalves][32];
#pragma unroll
    for (int hh = 0; hh < T::kHalves; ++hh)
#pragma unroll
      for (int i = 0; i < 32; ++i) dk[hh][i] = dv[hh][i] = 0.f;
    float st[32], dpt[32];  // S^T, then P^T; dP^T, then dS^T
    uint32_t pa[4][4], sa[4][4];
    // KREG_STEPS > 0 (variant 4): this consumer's K and V rows held as the register A operands of S^T = K Q^T and
    // dP^T = V dO^T for the first KREG_STEPS k-steps, loaded once (ldmatrix from the swizzled tile: lane l
    // gives row 16 wi + l % 16, 16-byte chunk 2 (kk % 4) + l / 16 of half kk / 4, which is the m16n8k16
    // A fragment of the warp's 16 rows); those steps then read only Q, dO from shared memory, half the
    // operand bytes of the SS form. d 64: all 4 steps (32 registers). d 128: none (even two steps of K
    // alone made ptxas spill, its consumers have no registers to spare), so variant 4 is variant 2 there.
    constexpr int kKreg = KREG_STEPS;
    uint32_t kreg[kKreg > 0 ? kKreg : 1][4], vreg[kKreg > 0 ? kKreg : 1][4];
#pragma unroll
    for (int kk = 0; kk < kKreg; ++kk) {
      const uint32_t off = (kk / 4) * (64 * 128) + sw128(16 * wi + (lane & 15), 2 * (kk % 4) + (lane >> 4));
      ldsm_x4_at(kreg[kk], sk + off);
      ldsm_x4_at(vreg[kk], sv + off);
    }

    auto stage_q = [&](int s) { return base + T::stage_off + s * T::stage_bytes; };
    // S^T = K Q^T and dP^T = V dO^T of the pair in stage s (64 keys x 64 rows each), two commit groups.
    auto issue_scores = [&](int s) {
      wgmma_fence();
      if constexpr (kKreg > 0) {
        mma_kmajor_rs<D, kKreg>(st, kreg, sk, stage_q(s));
        wgmma_commit();
        mma_kmajor_rs<D, kKreg>(dpt, vreg, sv, stage_q(s) + T::q_tile_bytes);
      } else {
        mma_kmajor<D>(st, sk, stage_q(s));
        wgmma_commit();
        mma_kmajor<D>(dpt, sv, stage_q(s) + T::q_tile_bytes);
      }
      wgmma_commit();
    };
    // From the scores in flight (exactly their two groups outstanding) to dV, dK issued (one commit
    // group; EDV: two, dV's first) and this consumer's dS^T in the shared tile `buf`, both consumers met
    // at the barrier.
    auto gradients = [&](int s, int q0, int buf) {
      const float* c_lse = reinterpret_cast<const float*>(smem + T::row_off + s * T::row_bytes);
      const float* c_ds = c_lse + kBR;
      const int* c_lo = reinterpret_cast<const int*>(c_lse + 2 * kBR);
      wgmma_wait<1>();  // S^T (the older group) done: P^T is computed while dP^T runs
      fence_regs(st);
      // st <- P^T (masked). Element 4n + e: key key0 + 8 (e / 2), row q0 + 8n + 2t + (e & 1). No mask
      // where every row of the pair sees every key of this consumer (all keys before the first row, the
      // rows' largest document start, from the row warp, at or before the first key). (probabilities_t
      // is this code; calling it here changed the instruction schedule of variants 2-7, whose
      // measurements stand for the SASS they have.)
      const bool visible = k0 + 64 * c + 63 < q0 && s_misc[1 + s] <= k0 + 64 * c;
      if (visible) {
#pragma unroll
        for (int nn = 0; nn < 8; ++nn)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            st[4 * nn + e] = fast_exp2(st[4 * nn + e] * p.scale_log2 - c_lse[8 * nn + 2 * t + (e & 1)] * kLog2e);
      } else {
#pragma unroll
        for (int nn = 0; nn < 8; ++nn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qc = 8 * nn + 2 * t + (e & 1), i = q0 + qc, j = key0 + 8 * (e / 2);
            const bool ok = j >= c_lo[qc] && j <= i && j < S;
            st[4 * nn + e] = ok ? fast_exp2(st[4 * nn + e] * p.scale_log2 - c_lse[qc] * kLog2e) : 0.f;
          }
      }
      // dV += P^T dO, dK += dS^T Q (B operands MN-major: rows of the tile are the k dimension).
      const uint32_t sq = stage_q(s), so = sq + T::q_tile_bytes;
      auto pack_p = [&] {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int x = 0; x < 4; ++x) pa[kk][x] = pack_bf16(st[8 * kk + 2 * x], st[8 * kk + 2 * x + 1]);
      };
      if constexpr (EDV) {
        // Variant 5: dV needs only P^T, so its wgmmas (own commit group) go now and run while this
        // thread waits for dP^T and computes dS^T, which otherwise leaves the tensor cores idle.
        pack_p();
#pragma unroll
        for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(dv[hh]);
        wgmma_fence();
        const uint64_t d_do = desc_at(so, 1024, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int hh = 0; hh < T::kHalves; ++hh)
            wgmma_rs_m64n64k16_tb(dv[hh], pa[kk], desc_plus(d_do, hh * (kBR * 128) + kk * (16 * 128)), 1);
        wgmma_commit();
        wgmma_wait<1>();  // dP^T (the older group) done; dV may still run
      } else {
        wgmma_wait<0>();
      }
      fence_regs(dpt);
      // dpt <- dS^T = P^T (dP^T - dsum).
#pragma unroll
      for (int nn = 0; nn < 8; ++nn)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dpt[4 * nn + e] = st[4 * nn + e] * (dpt[4 * nn + e] - c_ds[8 * nn + 2 * t + (e & 1)]);
      if constexpr (!EDV) pack_p();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) sa[kk][x] = pack_bf16(dpt[8 * kk + 2 * x], dpt[8 * kk + 2 * x + 1]);

#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) {
        if constexpr (!EDV) fence_regs(dv[hh]);
        fence_regs(dk[hh]);
      }
      wgmma_fence();
      const uint64_t d_q = desc_at(sq, 1024, 1024), d_o = desc_at(so, 1024, 1024);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int hh = 0; hh < T::kHalves; ++hh) {
          const uint32_t boff = hh * (kBR * 128) + kk * (16 * 128);
          if constexpr (!EDV) wgmma_rs_m64n64k16_tb(dv[hh], pa[kk], desc_plus(d_o, boff), 1);
          wgmma_rs_m64n64k16_tb(dk[hh], sa[kk], desc_plus(d_q, boff), 1);
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
      // Variants 1, 2: both consumers' dS^T written (and, two pairs back, read). Variant 3 signals its
      // half on ready_bar later and reads the pair's dS^T one pair late.
      if constexpr (V < 3) named_barrier_sync(1, 256);
    };
    // dQ[:, 64c .. 64c + 63] = dS K over the 128 keys (A = dS: the tile `buf` read transposed), one commit
    // group; d = 64: consumer 0 only.
    auto issue_dq = [&](float (&dq)[32], int buf) {
      wgmma_fence();
      mma_dq<T::kv_wg_bytes>(dq, base + T::ds_off + buf * T::ds_bytes, base + T::k_off + c * (64 * 128));
      wgmma_commit();
    };
    // After the wait for the dV / dK group: this warp is done with stage s.
    auto release_stage = [&](int s) {
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
    // dQ of the pair in stage s from the dS^T tile `buf` into dq (done on return), the stage released once
    // the dV / dK group is done (dQ reads only dS and K).
    auto dq_product = [&](float (&dq)[32], int s, int buf) {
      issue_dq(dq, buf);
      wgmma_wait<1>();  // dV, dK done: the stage is free while dQ runs
      release_stage(s);
      wgmma_wait<0>();
    };
    // This thread's dQ (done) into the shared tile at `sdq` as two 128-byte-swizzled boxes of 32 columns
    // (column 8n + 2t is box n / 4, 16-byte chunk 2 (n % 4) + t / 2, byte 8 (t & 1) in it), fenced to the
    // async proxy for the TMA reduction that reads it.
    // Consumer c's dQ tile in buffer `buf` (variant 2 and its descendants: 2 buffers; 3: 1).
    auto dq_tile = [&](int buf) { return T::dq_tile(base, buf, c); };
    auto store_dq_tile = [&](const float (&dq)[32], uint32_t sdq) {
#pragma unroll
      for (int nn = 0; nn < 8; ++nn)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
          st_shared_v2_f32(sdq + (nn / 4) * T::dq_box_bytes + sw128(jl + 8 * hf, 2 * (nn % 4) + t / 2) + 8 * (t & 1),
                           dq[4 * nn + 2 * hf], dq[4 * nn + 2 * hf + 1]);
      fence_proxy_async();
    };
    // dQ (done) added to dq_acc. Element 4n + e of dq: row q0 + jl + 8 (e / 2), column 64c + 8n + 2t + (e & 1).
    auto dq_out = [&](float (&dq)[32], const Pair& pr, int buf) {
      fence_regs(dq);
      const int q0 = pr.qb * kBR;
      // Into this consumer's buffer `buf` as two 128-byte-swizzled boxes of 32 columns (column
      // 8n + 2t is box n / 4, 16-byte chunk 2 (n % 4) + t / 2, byte 8 (t & 1) in it), then one
      // thread adds both boxes to dq_acc with TMA reductions (rows past S are not written). Variant
      // 2: the buffer is rewritten two pairs later, after that thread's wait for the reads of this
      // reduction (the bulk_wait_group_read<1> of the next pair) and the dS^T barrier after it;
      // variant 3 has one buffer and waits for the reads before rewriting it.
      const uint32_t sdq = dq_tile(V == 2 ? buf : 0);
      if constexpr (V == 3) {
        // One buffer: the previous pair's reduction must have read it before anyone rewrites it.
        if (wtid == 0) bulk_wait_group_read<0>();
        named_barrier_sync(2 + c, 128);
      }
      store_dq_tile(dq, sdq);
      named_barrier_sync(2 + c, 128);  // this consumer's dQ tile written
      if (wtid == 0) {
        int* order = nullptr;
        if constexpr (DET) {
          // Key blocks floor(qbmin / kBC) .. kb add to these rows (a contiguous range: walk's
          // conditions); wait until the ones before this block have, in order.
          order = p.dq_order + (int64_t(pr.h) * p.nqb + pr.qb) * 2 + c;
          const int before = kb - p.qbmin[pr.qb] / kBC;
          while (ld_acquire_gpu(order) < before) {
          }
          fence_proxy_async_global();  // the reduction below after the acquire
        }
        tma_reduce_add_3d(tdq, 64 * c, pr.h, q0, sdq);
        tma_reduce_add_3d(tdq, 64 * c + 32, pr.h, q0, sdq + T::dq_box_bytes);
        bulk_commit_group();
        if constexpr (V == 2) bulk_wait_group_read<1>();  // the previous pair's reduction has read its buffer
        if constexpr (DET) {
          bulk_wait_group<0>();        // its sums written to global memory
          fence_proxy_async_global();  // and ordered before the release
          red_release_gpu_add(order, 1);
        }
      }
      __syncwarp();  // the warp whole again before its next aligned (wgmma, barrier) instruction
    };

    if constexpr (V == 3) {
      // Consumers coupled one pair late instead of in lockstep. Pair n: scores and gradients of n (dS^T
      // into buffer n % 3), then, while dV / dK of n run, dQ of pair n - 1 once the other consumer
      // signalled its half of that dS^T. A consumer arrives on ready_bar(c, n % 3) when its dS^T of n is
      // written and its dQ of n - 1 has finished reading buffer (n - 1) % 3; so whoever writes buffer
      // n % 3 (pair n, = n - 3) has waited (at pair n - 1) for the other's arrival of n - 2, after the
      // other's dQ of n - 3. Distinct barriers per buffer: one consumer cannot arrive twice on one
      // before the other's matching sync (it syncs the other's arrival of n - 1 before arriving for n + 2).
      // The dQ of pair 0's predecessor is computed on a stale buffer and discarded (no branch between a
      // wgmma's issue and its wait: ptxas serializes those).
      auto ready_bar = [](int cc, int b) { return 4 + 3 * cc + b; };
      Pair prev{0, 0};
      int n_pairs = 0;
      walk([&](const Pair& pr, int n) {
        const int s = n % NS, round = n / NS, buf = n % 3, pbuf = (n + 2) % 3;
        mbar_wait(full_bar + 8 * s, round & 1);
        issue_scores(s);
        gradients(s, pr.qb * kBR, buf);
        named_barrier_sync_if(n > 0, ready_bar(1 - c, pbuf), 256);
        if (c < T::kHalves) {
          float dq[32];
          issue_dq(dq, pbuf);
          wgmma_wait<1>();  // dV, dK of pair n done: the stage is free
          release_stage(s);
          wgmma_wait<0>();
          named_barrier_arrive(ready_bar(c, buf), 256);
          if (n > 0) dq_out(dq, prev, 0);
        } else {
          wgmma_wait<0>();
          release_stage(s);
          named_barrier_arrive(ready_bar(c, buf), 256);
        }
        prev = pr;
        n_pairs = n + 1;
      });
      if (n_pairs > 0) {  // the last pair's dQ
        const int pbuf = (n_pairs - 1) % 3;
        named_barrier_sync(ready_bar(1 - c, pbuf), 256);
        if (c < T::kHalves) {
          float dq[32];
          issue_dq(dq, pbuf);
          wgmma_wait<0>();
          dq_out(dq, prev, 0);
        }
      }
    } else if constexpr (DQW) {
      // Variant 7: the dQ reductions are the producer's dQ writer warp's (produce_tma). Pair n: its
      // scores, gradients and dQ product; once that is done, the wait for buffer n & 1 to be free (the
      // writer's arrival after pair n - 2's reductions read it; at n = 0 the one of no pair before, so
      // the arrivals and syncs pair up, the last sync after the loop), the dQ stores and their fence,
      // and an arrival for the writer. Nothing is issued between a wgmma and its wait.
      const bool writes_dq = T::kHalves == 2 || c < T::kHalves;
      int n_pairs = 0;
      walk([&](const Pair& pr, int n) {
        const int s = n % NS, round = n / NS, buf = n & 1;
        mbar_wait(full_bar + 8 * s, round & 1);
        issue_scores(s);
        gradients(s, pr.qb * kBR, buf);
        if (writes_dq) {
          float dq[32];
          dq_product(dq, s, buf);
          fence_regs(dq);
          named_barrier_sync_if(n > 0, dq_free_bar(c), kDqBarThreads);
          store_dq_tile(dq, dq_tile(buf));
          named_barrier_arrive(dq_stored_bar(c), kDqBarThreads);
        } else {
          wgmma_wait<0>();
          release_stage(s);
        }
        n_pairs = n + 1;
      });
      if (n_pairs > 0 && writes_dq) named_barrier_sync(dq_free_bar(c), kDqBarThreads);
    } else if constexpr (PIPE) {
      // Variant 6: a pair's dQ leaves in two parts: its stores to shared memory (and their fence) at the
      // end of the pair, the barrier and the TMA reductions at the start of the next, after the next
      // pair's scores were issued, so the tensor cores run those meanwhile. Pair n: the wait for its
      // stage, its scores, the reductions of pair n - 1's dQ (by one thread picked by predicate, and none
      // for n = 0: no branch lies between a wgmma's issue and its wait, which would make ptxas serialize
      // them), then its gradients, dQ product and dQ stores. Nothing is in flight across pairs.
      // Whether this consumer computes dQ columns (d 64: consumer 0 only); a constant at d 128.
      const bool writes_dq = T::kHalves == 2 || c < T::kHalves;
      auto dq_store = [&](float (&dq)[32], int buf) {  // this thread's dQ into buffer `buf`, fenced
        fence_regs(dq);
        store_dq_tile(dq, dq_tile(buf));
      };
      // Buffer `buf` (every thread of this consumer stored and fenced) added to dq_acc if `go`. Variant
      // 2's buffer protocol: the wait for the reads of the reduction before this one, then the next
      // pair's dS^T barrier, order it before that buffer is rewritten.
      auto dq_issue = [&](bool go, const Pair& pr, int buf) {
        const uint32_t sdq = dq_tile(buf);
        named_barrier_sync(2 + c, 128);
        const bool one = go && wtid == 0;
        tma_reduce_add_3d_if(one, tdq, 64 * c, pr.h, pr.qb * kBR, sdq);
        tma_reduce_add_3d_if(one, tdq, 64 * c + 32, pr.h, pr.qb * kBR, sdq + T::dq_box_bytes);
        bulk_commit_group_if(one);
        bulk_wait_group_read_if<1>(one);
      };
      Pair prev{0, 0};
      int n_pairs = 0;
      walk([&](const Pair& pr, int n) {
        const int s = n % NS, round = n / NS, buf = n & 1;
        mbar_wait(full_bar + 8 * s, round & 1);
        issue_scores(s);
        if (writes_dq) dq_issue(n > 0, prev, buf ^ 1);
        gradients(s, pr.qb * kBR, buf);
        if (writes_dq) {
          float dq[32];
          dq_product(dq, s, buf);
          dq_store(dq, buf);
        } else {
          wgmma_wait<0>();
          release_stage(s);
        }
        prev = pr;
        n_pairs = n + 1;
      });
      if (n_pairs > 0 && writes_dq) dq_issue(true, prev, (n_pairs - 1) & 1);
    } else {
      // Per pair: scores, gradients, dQ, then the dQ output. (Issuing the next pair's scores before this
      // pair's dQ output was tried, 2026-12-06: ptxas serialized the wgmmas (C7518) and spilled ~600 bytes.)
      walk([&](const Pair& pr, int n) {
        const int s = n % NS, round = n / NS, buf = n & 1;
        mbar_wait(full_bar + 8 * s, round & 1);
        issue_scores(s);
        gradients(s, pr.qb * kBR, buf);
        if (c < T::kHalves) {
          float dq[32];
          dq_product(dq, s, buf);
          dq_out(dq, pr, buf);
        } else {
          wgmma_wait<0>();
          release_stage(s);
        }
      });
    }

    // The last reductions complete (their shared source lives until the CTA exits; the dq conversion
    // kernel reads dq_acc next).
    if (c < T::kHalves && wtid == 0) bulk_wait_group<0>();

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
  }
#else
  __trap();  // built only for sm_90a; the host side refuses other devices
#endif
}

// The tensor maps as kernel parameters (TMA reads them from parameter space).
template <int D, int NS, int V, bool DET, int KREG_STEPS = 0, bool EDV = false, bool PIPE = false,
          bool DQW = false>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_attention_backward_tma_kernel(const Params p, const __grid_constant__ CUtensorMap tq,
                                         const __grid_constant__ CUtensorMap tdo,
                                         const __grid_constant__ CUtensorMap tdq) {
  backward_cta<D, NS, V, DET, KREG_STEPS, EDV, PIPE, DQW>(p, &tq, &tdo, &tdq);
}

// Variant 4: the k-steps of K and V held in registers (all at d 64; none at d 128, see kKreg).
template <int D>
constexpr int kKregSteps = D == 64 ? 4 : 0;

// 2 stages at d = 128 (variant 2 fills 226.5 KB of the 227 KB with its dQ buffers; variant 11 with a
// third lost its gain, docs/attention.md), 3 at d = 64 (a stage is 16 KB there).
template <int D>
constexpr int kStages = D == 64 ? 3 : 2;

template <int D>
void launch(const Params& p, int variant, bool deterministic, cudaStream_t stream) {
  const char* op = "cuda::hopper_attention_backward";
  const unsigned nkb = static_cast<unsigned>((p.Sq + kBC - 1) / kBC), nh = static_cast<unsigned>(p.Hkv);
  const dim3 grid = p.heads_inside ? dim3(nh, nkb) : dim3(nkb, nh);  // see backward_cta
  // The variants share the launch; only the kernel and its shared memory differ (4 is 2 with K and V
  // in registers at d 64, 5 is 4 with dV issued early, 6 is 5 with the dQ output pipelined, 7 is 5
  // with the dQ reductions issued by a producer warp).
  auto kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 2, false>;
  if (variant == 3)
    kernel = deterministic ? hopper_attention_backward_tma_kernel<D, kStages<D>, 3, true>
                           : hopper_attention_backward_tma_kernel<D, kStages<D>, 3, false>;
  if (variant == 4) kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 2, false, kKregSteps<D>>;
  if (variant == 5) kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 2, false, kKregSteps<D>, true>;
  if (variant == 6) kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 2, false, kKregSteps<D>, true, true>;
  if (variant == 7)
    kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 2, false, kKregSteps<D>, true, false, true>;
  if (variant == 9) kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 9, false>;
  if (variant == 11) kernel = hopper_attention_backward_tma_kernel<D, kStages<D>, 11, false>;
  const size_t smem = variant == 3    ? Tile<D, kStages<D>, 3>::smem_bytes
                      : variant == 9  ? Tile<D, kStages<D>, 9>::smem_bytes
                      : variant == 11 ? Tile<D, kStages<D>, 11>::smem_bytes
                                      : Tile<D, kStages<D>, 2>::smem_bytes;
  const CUtensorMap tq = hopper_tensor_map(p.q, 2, p.Sq, p.H, D, 64, kBR, op);
  const CUtensorMap tdo = hopper_tensor_map(p.dout, 2, p.Sq, p.H, D, 64, kBR, op);
  const CUtensorMap tdq = hopper_tensor_map(p.dq_acc, 4, p.Sq, p.H, D, 32, kBR, op);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(p, tq, tdo, tdq);
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
                               size_t workspace_bytes, cudaStream_t stream, int variant, bool deterministic,
                               int64_t longest) {
  const char* op = "cuda::hopper_attention_backward";
  attn_host::check_shapes(op, S, H, Hkv, d, scale);
  std::string why;
  ULY_CHECK(hopper_attention_backward_supported(d, H, Hkv, &why),
            op << ": not supported here: " << why << " (use cuda::attention_backward)");
  ULY_CHECK(variant != 1, op << ": variant 1 was removed (2026-12-07; variant 2, with TMA loads, was faster in "
                                  "every case measured); ask for 2 to 7, 9 or 11");
  ULY_CHECK((variant >= 2 && variant <= 7) || variant == 9 || variant == 11,
            op << ": variant " << variant << " (there are 2 to 7, 9 and 11)");
  ULY_CHECK(!deterministic || variant == 3, op << ": the deterministic dQ order is variant 3's (asked with variant "
                                               << variant << ")");
  if (S == 0) return;
  attn_bwd::WorkspaceParts w;
  attn::BwdParams p = attn_bwd::checked_params(op, dq, dk, dv, dout, out, lse, q, k, v, doc_start, S, S, 0, 0, H,
                                                     Hkv, d, scale, workspace, workspace_bytes, hopper_bwd::kBR, &w);
  // The key blocks go in the grid's y (at most 65535: 8.4M tokens); past that, the heads-outer order.
  const HopperCtaOrder order = hopper_cta_order();
  const bool inside = order == HopperCtaOrder::kAuto ? hopper_cta_heads_inside_default(true, longest > 0 ? longest : S)
                                                     : order == HopperCtaOrder::kHeadsInside;
  p.heads_inside = inside && (S + hopper_bwd::kBC - 1) / hopper_bwd::kBC <= 65535 ? 1 : 0;
  char* ws = static_cast<char*>(workspace);
  attn_bwd::preprocess(ws, w, dout, out, doc_start, S, H, d, hopper_bwd::kBR, stream);
  if (d == 128) hopper_bwd::launch<128>(p, variant, deterministic, stream);
  else hopper_bwd::launch<64>(p, variant, deterministic, stream);
  attn_bwd::convert_dq(dq, p.dq_acc, S * H * d, p.scale, stream);
}

}  // namespace ulysses::cuda
