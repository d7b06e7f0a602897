// Hopper (sm_90a) causal attention forward, warp-specialised with wgmma, after the design of
// FlashAttention-3 (Shah et al., arXiv 2407.08608); our own code. See docs/attention.md.
//
// One CTA per (query block of BR = 128 rows, query head), heaviest (latest) query blocks first,
// 3 warpgroups of 128 threads:
//   warpgroup 0, producer: one thread streams the K and V tiles of BC keys that the block's rows
//     can see into a ring of NS shared-memory stages (produce_tma: cp.async.bulk.tensor from tensor
//     maps the host encodes, keys past S zero-filled, the stage's `full` mbarrier completing on the
//     bytes landed); it waits on the stage's `empty` mbarrier before refilling it.
//   warpgroups 1 and 2, consumers: each owns 64 query rows (its Q tile loaded once with cp.async),
//     and per key block: S = Q K^T with wgmma m64n{BC}k16 (A = Q, B = K, both shared-memory
//     descriptors, K-major), masking only where a block is not wholly visible (causal diagonal,
//     document starts, keys past S), online softmax in fp32 registers on log2e-prescaled scores,
//     P to bf16 in registers and O += P V with wgmma m64n64k16 (A = P from registers, B = V from
//     shared memory, transposed: V is stored key-major with d contiguous); then each warp
//     arrives on the stage's `empty` mbarrier.
// The consumers' loop (consume_v2, after the variant that introduced it) is FA3's intra-warpgroup
// overlap (the softmax of block t while P V of block t - 1 runs) and ping-pong between the two
// consumers (named barriers order their GEMM issues), over 3 stages. Two variants, chosen at run time
// (hopper_attention_variant, ULYSSES_HOPPER_VARIANT): 3, as above (the default); 4, variant 3
// persistent (one CTA per SM walks the blocks, its producer loading the next block's Q and K / V while
// the consumers finish the current one: forward_persistent_cta). They share every other piece
// (setup_block, produce_tma, consumer_rows, issue_qk, softmax_block, pack_p, issue_pv, epilogue;
// variant 4 its own setup). Variants 1 (each key block's GEMMs and softmax one after the other) and
// 2 (consume_v2 with a cp.async producer), both with cp.async loads and slower than 3, were removed
// on 2026-12-07.
// Shared-memory tiles use the 128-byte swizzle of wgmma's canonical layouts: a tile of R rows and D
// columns is stored as D / 64 column halves of R rows x 128 bytes each, row r's 16-byte chunk c at
// r * 128 + ((c ^ (r % 8)) * 16), every half 1024-byte aligned (a swizzle atom is 8 rows, 1024 bytes).
// Descriptors (see hopper_device.cuh): K-major (Q, K): stride byte offset 1024 (the next 8 rows),
// the leading byte offset unused by swizzled K-major layouts; a k16 step moves the start address
// by 32 bytes inside the atom, the next 64 columns are the next half. V (MN-major, transposed):
// one wgmma per 64-column half of d, so only one swizzle atom spans N and the only stride used is
// the one between groups of 8 keys, 1024 bytes, given as both offsets.
#include <cuda.h>  // CUtensorMap (types only: nothing links -lcuda)

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/attention_launch.h"
#include "backend/cuda/check.h"
#include "backend/cuda/hopper_attention.h"
#include "backend/cuda/hopper_device.cuh"
#include "backend/cuda/hopper_tensor_map.h"

namespace ulysses::cuda {
namespace hopper {
namespace {

using attn::bf16;
using attn::fast_exp2;
using attn::kIntMax;
using attn::kLn2;
using attn::kNegInf;
using attn::pack_bf16;

constexpr int kBR = 128;              // query rows per CTA: 2 consumer warpgroups x 64
constexpr int kThreads = 384;         // 3 warpgroups
// setmaxnreg: __launch_bounds__(384, 1) caps the kernel at 168 registers a thread (65536 / 384,
// rounded down to a multiple of 8), so 168 x 384 = 64512 are allocated and the two budgets must sum
// to that: 128 x 24 + 256 x 240 (one producer thread issues the TMA loads).
constexpr int kProducerRegsTma = 24;
constexpr int kConsumerRegsTma = 240;
static_assert(128 * kProducerRegsTma + 256 * kConsumerRegsTma == 168 * 384, "register budget");

struct Params {
  bf16* out;                 // [S, H, D]
  float* lse;                // [H, S]
  const bf16* q;             // [S, H, D]
  const bf16* k;             // [S, Hkv, D]
  const bf16* v;             // [S, Hkv, D]
  const int32_t* doc_start;  // [S]
  int S, H, Hkv, group;
  float scale_log2;          // scale * log2(e)
  int heads_inside;          // CTA order: 1: blockIdx.x = head (heaviest blocks of all heads first); 0: x = block
};

template <int D, int BC, int NS>
struct Tile {
  static constexpr int kHalves = D / 64;                        // 128-byte column halves of a row
  static constexpr int q_wg_bytes = 64 * D * 2;                 // one consumer's Q rows
  static constexpr int q_bytes = 2 * q_wg_bytes;
  static constexpr int kv_bytes = BC * D * 2;                   // K (or V) of one stage
  static constexpr int stage_bytes = 2 * kv_bytes;
  static constexpr int bar_off = q_bytes + NS * stage_bytes;    // full[NS], empty[NS] mbarriers
  static constexpr int doc_off = bar_off + 2 * NS * 8;          // row document starts [BR]
  static constexpr int red_off = doc_off + kBR * 4;             // per-warp min / max [8]
  static constexpr size_t smem_bytes = 1024 + red_off + 8 * 4;  // + alignment slack
  static_assert(D == 64 || D == 128, "head_dim");
  static_assert(BC % 64 == 0 && BC <= 128, "key block");
  static_assert(smem_bytes <= 227 * 1024, "shared memory");
};

// Byte offset of row r's 16-byte chunk c (c < 8) inside a 128-byte-swizzled half.
__device__ __forceinline__ uint32_t sw128(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

// rows x D of a [.., ld] bf16 matrix (row i at src + i * ld) into a swizzled tile at `dst`
// (shared address), rows at or past `valid` zeroed; `tid` / `nt`: this thread among the copiers.
template <int D>
__device__ __forceinline__ void load_tile(uint32_t dst, int rows, const bf16* src, int64_t ld, int valid, int tid,
                                          int nt) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  for (int c = tid; c < rows * CH; c += nt) {
    const int r = c / CH, cc = c % CH;
    const uint32_t a = dst + uint32_t((cc / 8) * rows * 128) + sw128(r, cc % 8);
    if (r < valid) cp_async16(a, src + r * ld + cc * 8);
    else st_shared_zero16(a);
  }
}

template <int BC>
__device__ __forceinline__ void wgmma_s(float (&s)[BC / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (BC == 128) wgmma_ss_m64n128k16(s, da, db, scale_d);
  else wgmma_ss_m64n64k16(s, da, db, scale_d);
}

// ---- Pieces shared by both variants (3 and 4) ----

// The CTA's query block and head and the key blocks its rows can see.
struct Block {
  int q0, h, hk;
  int kb_lo, n_blocks;  // key blocks kb_lo .. kb_lo + n_blocks - 1
};

// Every thread: the block's row document starts (kIntMax for rows past S: they see nothing) into
// s_doc, their per-warp min / max into s_red, the NS full / empty mbarriers initialised, then
// __syncthreads and the key-block range.
// full_count: the arrivals a `full` phase takes (1: the TMA thread's, plus its bytes).
template <int BC, int NS>
__device__ __forceinline__ Block setup_block(const Params& p, int* s_doc, int* s_red, uint32_t full_bar,
                                             uint32_t empty_bar, uint32_t full_count) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int S = p.S;
  Block b;
  // Heaviest query blocks first, across all heads: blocks are dispatched in blockIdx order, x fastest,
  // so x walks the heads of one query block. (Head-major order left the heaviest blocks of the last
  // heads for the end: a list-scheduling model puts the 4K makespan at 1.14x the mean load, 1.01x so.)
  const int qb = p.heads_inside ? int(gridDim.y) - 1 - int(blockIdx.y) : int(gridDim.x) - 1 - int(blockIdx.x);
  b.h = p.heads_inside ? blockIdx.x : blockIdx.y;
  b.hk = b.h / p.group;
  b.q0 = qb * kBR;
  if (tid < kBR) {
    const int i = b.q0 + tid;
    int lo = i < S ? p.doc_start[i] : kIntMax, hi = lo;
    s_doc[tid] = lo;
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, m));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, m));
    }
    if (lane == 0) {
      s_red[warp] = lo;
      s_red[4 + warp] = hi;
    }
  }
  if (tid == 0) {
    for (int s = 0; s < NS; ++s) {
      mbar_init(full_bar + 8 * s, full_count);  // the TMA thread's arrival (and the bytes)
      mbar_init(empty_bar + 8 * s, 8);   // every consumer warp, once done with the stage
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int cta_lo = max(min(min(s_red[0], s_red[1]), min(s_red[2], s_red[3])), 0);
  const int q_last = min(b.q0 + kBR - 1, S - 1);  // the block's last visible key
  b.kb_lo = cta_lo / BC;
  b.n_blocks = q_last / BC - b.kb_lo + 1;  // >= 1: every row sees at least itself (doc_start[i] <= i)
  return b;
}

// The producer, one thread: per key block, once the stage is free, an arrival on its `full`
// that expects the stage's bytes (K and V, BC rows x D columns each), then per tensor one TMA load
// per 64-column half (a box of 64 columns x 1 head x BC rows, 128-byte swizzled: the layout
// load_tile writes). Keys past S come back as zeros, and their bytes count all the same, so every
// stage completes on stage_bytes. `full` completes when the bytes landed, whatever the producer
// does next: no signal one block late, as a cp.async producer's would be.
// g0: the ring position of the block's first key block (variant 4 runs one ring through its blocks).
template <int D, int BC, int NS>
__device__ __forceinline__ void produce_tma(const Block& b, uint32_t base, uint32_t full_bar, uint32_t empty_bar,
                                            const CUtensorMap* tk, const CUtensorMap* tv, int g0 = 0) {
  using T = Tile<D, BC, NS>;
  for (int it = 0; it < b.n_blocks; ++it) {
    const int s = (g0 + it) % NS, round = (g0 + it) / NS;
    mbar_wait(empty_bar + 8 * s, (round & 1) ^ 1);
    const int k0 = (b.kb_lo + it) * BC;
    const uint32_t sk = base + T::q_bytes + s * T::stage_bytes, sv = sk + T::kv_bytes, fb = full_bar + 8 * s;
    mbar_arrive_expect_tx(fb, T::stage_bytes);
    tma_load_tile<D>(sk, BC, tk, b.hk, k0, fb);
    tma_load_tile<D>(sv, BC, tv, b.hk, k0, fb);
  }
}

// What a consumer thread knows of its rows.
struct Rows {
  int c, r0;                  // consumer 0 or 1, the warpgroup's first row
  bool active;                // r0 < S
  int wlo_min, wlo_max;       // the smallest and largest document start of the warpgroup's rows
  int wrow_max;               // the warpgroup's last visible key
  int rowA;                   // this thread's rows: rowA and rowA + 8
  int lo[2];                  // their document starts
  uint32_t sq;                // the warpgroup's Q tile (shared address)
};

// The rest of r (r.c and r.r0 set) from the block's row document starts s_doc [128] and their per-warp
// minimum and maximum s_red [8] (4 warps' minima, then maxima).
__device__ __forceinline__ void fill_rows(Rows& r, int S, const int* s_doc, const int* s_red, int wtid) {
  const int wi = wtid / 32, g = (wtid % 32) / 4;
  r.active = r.r0 < S;
  r.wlo_min = min(s_red[2 * r.c], s_red[2 * r.c + 1]);
  r.wlo_max = max(s_red[4 + 2 * r.c], s_red[5 + 2 * r.c]);
  r.wrow_max = min(r.r0 + 63, S - 1);
  r.rowA = r.r0 + 16 * wi + g;
  r.lo[0] = s_doc[64 * r.c + 16 * wi + g];
  r.lo[1] = s_doc[64 * r.c + 16 * wi + g + 8];
}

// A consumer warpgroup loads its Q tile (then a barrier of its 128 threads) and learns its rows.
template <int D, int BC, int NS>
__device__ __forceinline__ Rows consumer_rows(const Params& p, const Block& b, uint32_t base, const int* s_doc,
                                              const int* s_red, int wg, int wtid) {
  using T = Tile<D, BC, NS>;
  const int S = p.S;
  const int64_t q_row = int64_t(p.H) * D;
  Rows r;
  r.c = wg - 1;
  r.r0 = b.q0 + 64 * r.c;
  r.sq = base + r.c * T::q_wg_bytes;
  load_tile<D>(r.sq, 64, p.q + (r.r0 < S ? int64_t(r.r0) * q_row : 0) + int64_t(b.h) * D, q_row, S - r.r0, wtid,
               128);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  named_barrier_sync(1 + r.c, 128);
  fill_rows(r, S, s_doc, s_red, wtid);
  return r;
}

// Issues S = Q K^T (64 x BC) of the stage's K tile at sk; the caller fences and commits.
template <int D, int BC>
__device__ __forceinline__ void issue_qk(float (&sc)[BC / 2], uint32_t sq, uint32_t sk) {
  const uint64_t da = make_desc_sw128(sq, 16, 1024), db = make_desc_sw128(sk, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    wgmma_s<BC>(sc, desc_plus(da, (kk / 4) * (64 * 128) + (kk % 4) * 32),
                desc_plus(db, (kk / 4) * (BC * 128) + (kk % 4) * 32), kk > 0 ? 1 : 0);
}

// Online softmax (log2 domain) of the scores of key block [ks, ke]: masks, updates m_run and l_run
// and turns sc into the unnormalised probabilities; alpha gets the factor O must be rescaled by.
// No element masked when every row's document starts at or before ks, every row is at or after ke
// and ke < S. The maximum is taken over the raw scores (scale_log2 > 0), so each probability is one
// FFMA and an ex2. The running maximum m_run moves only when a block's exceeds it by more than
// kMaxSlack (then probabilities reach at most 2^kMaxSlack, harmless in bf16 and fp32): otherwise alpha
// is exactly 1 and the caller skips the rescale of O (rescale_o_if), for long rows nearly always.
constexpr float kMaxSlack = 8.f;
template <int BC>
__device__ __forceinline__ void softmax_block(float (&sc)[BC / 2], int ks, int ke, int S, const Rows& r,
                                              float scale_log2, float (&m_run)[2], float (&l_run)[2],
                                              float (&alpha)[2]) {
  const int t = threadIdx.x % 4;
  const bool full = ks >= r.wlo_max && ke <= r.r0 && ke < S;
  float mx[2] = {kNegInf, kNegInf};
  // Two loops rather than one with the mask under `if (!full)`: ptxas turned that into predicated
  // compares and selects executed (as no-ops) for every element of every block, 57.8% of the ALU
  // pipe at 32K (Nsight Compute, 2026-12-06); as two loops it branches.
  if (full) {
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e / 2] = fmaxf(mx[e / 2], sc[4 * n + e]);
  } else {
#pragma unroll
    for (int n = 0; n < BC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = ks + 8 * n + 2 * t + (e & 1), row = r.rowA + 8 * (e / 2);
        if (col < r.lo[e / 2] || col > row || col >= S) sc[4 * n + e] = kNegInf;
        mx[e / 2] = fmaxf(mx[e / 2], sc[4 * n + e]);
      }
  }
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
    mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
    const float m_blk = mx[hf] * scale_log2;
    const bool grow = m_blk > m_run[hf] + kMaxSlack;  // m_run = -inf: any finite m_blk
    const float m_new = grow ? m_blk : m_run[hf];
    const float b = m_new == kNegInf ? 0.f : m_new;  // -inf - (-inf) would be NaN
    alpha[hf] = grow ? fast_exp2(m_run[hf] - b) : 1.f;
    m_run[hf] = m_new;
    float rs = 0.f;
#pragma unroll
    for (int n = 0; n < BC / 8; ++n) {
      sc[4 * n + 2 * hf] = fast_exp2(fmaf(sc[4 * n + 2 * hf], scale_log2, -b));
      sc[4 * n + 2 * hf + 1] = fast_exp2(fmaf(sc[4 * n + 2 * hf + 1], scale_log2, -b));
      rs += sc[4 * n + 2 * hf] + sc[4 * n + 2 * hf + 1];
    }
    l_run[hf] = l_run[hf] * alpha[hf] + rs;  // this thread's columns; summed over the quad at the end
  }
}

template <int H>
__device__ __forceinline__ void rescale_o(float (&o)[H][32], const float (&alpha)[2]) {
#pragma unroll
  for (int hh = 0; hh < H; ++hh)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        o[hh][4 * n + 2 * hf] *= alpha[hf];
        o[hh][4 * n + 2 * hf + 1] *= alpha[hf];
      }
}

// rescale_o unless alpha is 1 for every row of the warp (softmax_block's slack makes that the rule).
// A warp-uniform branch: call it with no wgmma in flight.
template <int H>
__device__ __forceinline__ void rescale_o_if(float (&o)[H][32], const float (&alpha)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_o(o, alpha);
}

// P to bf16 in the register-A layout: k16 step kk covers keys 16kk..16kk+15, the S chunks 2kk, 2kk + 1.
template <int BC>
__device__ __forceinline__ void pack_p(const float (&sc)[BC / 2], uint32_t (&pa)[BC / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk) {
    pa[kk][0] = pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
    pa[kk][1] = pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

// Issues O += P V of the stage's V tile at sv; the caller fences and commits.
template <int D, int BC>
__device__ __forceinline__ void issue_pv(float (&o)[D / 64][32], const uint32_t (&pa)[BC / 16][4], uint32_t sv) {
  const uint64_t dv = make_desc_sw128(sv, 1024, 1024);
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
    for (int hh = 0; hh < D / 64; ++hh)
      wgmma_rs_m64n64k16_tb(o[hh], pa[kk], desc_plus(dv, hh * (BC * 128) + kk * (16 * 128)), 1);
}

// Keeps the P registers alive and unmoved until here (a wgmma in flight reads them).
template <int N>
__device__ __forceinline__ void fence_regs_u32(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// A block's running state before its first key block: O zero, no maximum, no sum.
template <int H>
__device__ __forceinline__ void start_rows(float (&o)[H][32], float (&m_run)[2], float (&l_run)[2]) {
#pragma unroll
  for (int hh = 0; hh < H; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
  m_run[0] = m_run[1] = kNegInf;
  l_run[0] = l_run[1] = 0.f;
}

// Normalise, write out (bf16) and lse (natural log).
template <int D>
__device__ __forceinline__ void epilogue(const Params& p, const Block& b, const Rows& r, float (&o)[D / 64][32],
                                         const float (&m_run)[2], const float (&l_run)[2]) {
  const int t = threadIdx.x % 4, S = p.S;
  const int64_t q_row = int64_t(p.H) * D;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = l_run[hf];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int i = r.rowA + 8 * hf;
    if (i >= S) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    bf16* dst = p.out + int64_t(i) * q_row + int64_t(b.h) * D + 2 * t;
#pragma unroll
    for (int hh = 0; hh < D / 64; ++hh)
#pragma unroll
      for (int n = 0; n < 8; ++n)
        *reinterpret_cast<uint32_t*>(dst + 64 * hh + 8 * n) =
            pack_bf16(o[hh][4 * n + 2 * hf] * inv, o[hh][4 * n + 2 * hf + 1] * inv);
    if (t == 0) p.lse[int64_t(b.h) * S + i] = l > 0.f ? (m_run[hf] + __log2f(l)) * kLn2 : kNegInf;
  }
}

// ---- The consumers' loop (variant 2's, kept by 3 and 4): intra-warpgroup overlap and ping-pong (FA3 3.1, 3.2) ----
//
// A consumer walks "turns" t = 0 .. n_blocks. At turn t it waits for stage t's `full`, waits for its
// scheduling barrier (its turn at the tensor cores), issues S_t = Q K_t^T (if it sees block t) and
// O += P_{t-1} V_{t-1} (if it saw block t - 1; P_{t-1} in registers from the previous turn), lets the
// other consumer's barrier go, then waits only for S_t (wait_group 1) and runs the softmax of S_t
// while P_{t-1} V_{t-1} still runs on the tensor cores; then waits for that (wait_group 0), releases
// stage t - 1, rescales O by the softmax's alpha and packs P_t. The two consumers' scheduling
// barriers (named barriers 3 and 4, 256 threads: one warpgroup syncs, the other arrives) alternate
// the GEMM issues: consumer 0 issues turn t's GEMMs, then consumer 1, then consumer 0 turn t + 1,
// so that one warpgroup's softmax overlaps the other's GEMMs. Every consumer passes every turn
// (also where it sees nothing: rows past S, or documents starting after the block), so that both
// do n_blocks + 1 syncs and get as many arrivals: consumer 1 arrives once on consumer 0's barrier
// before its first turn and not after its last.
// With a cp.async producer (the removed variant 2) it needed 3 stages or more: that producer signalled
// block t's `full` only once it could start block t + 1 (after block t + 1 - NS was released), and a
// consumer releases block t - 1 only at turn t, after block t's `full`; with 2 stages each waited for
// the other (tools/hopper_attention_model.py shows it). The TMA producer's `full` is not late.
constexpr int kSchedBar = 3;  // + c: consumer c's scheduling barrier (1 + c: the Q-load barriers)

// g0: the ring position of the block's first key block (variant 4 runs one ring through several
// blocks). q_done(): called once the warpgroup's last S = Q K^T of the block has completed (variant 4
// then lets the producer load the next block's Q); a no-op otherwise.
struct NoHook {
  __device__ __forceinline__ void operator()() const {}
};
template <int D, int BC, int NS, typename QDone = NoHook>
__device__ __forceinline__ void consume_v2(const Params& p, const Block& b, const Rows& r, uint32_t base,
                                            uint32_t full_bar, uint32_t empty_bar, float (&o)[D / 64][32],
                                            float (&m_run)[2], float (&l_run)[2], int g0 = 0,
                                            QDone q_done = QDone{}) {
  using T = Tile<D, BC, NS>;
  const int lane = threadIdx.x % 32;
  const int n = b.n_blocks, my_bar = kSchedBar + r.c, other_bar = kSchedBar + 1 - r.c;
  // The key blocks the warpgroup sees, a .. a + n_vis - 1 (as Rows::sees, which is contiguous).
  int a = n, n_vis = 0;
  if (r.active) {
    const int first = max(b.kb_lo, r.wlo_min / BC), last = min(b.kb_lo + n - 1, r.wrow_max / BC);
    a = first - b.kb_lo;
    n_vis = max(last - first + 1, 0);
  }
  const auto stage_k = [&](int t) { return base + T::q_bytes + ((g0 + t) % NS) * T::stage_bytes; };
  const auto full_wait = [&](int t) { mbar_wait(full_bar + 8 * ((g0 + t) % NS), ((g0 + t) / NS) & 1); };
  const auto release = [&](int t) {  // this warp is done with block t's stage
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar + 8 * ((g0 + t) % NS));
  };
  // Lets the other consumer's turn go, except consumer 1 after its last turn (n): consumer 0 does
  // no turn after that. Predicated, not branched: wgmma may be in flight here.
  const auto pass_turn = [&](int t) { named_barrier_arrive_if(r.c == 0 || t < n, other_bar, 256); };
  const auto idle_turn = [&](int t) {  // a turn with no GEMM of ours
    if (t < n) full_wait(t);
    named_barrier_sync(my_bar, 256);
    pass_turn(t);
    if (t < n) release(t);
  };
  if (r.c == 1) named_barrier_arrive(other_bar, 256);  // consumer 0 goes first

  int t = 0;
  for (; t < (n_vis > 0 ? a : n + 1); ++t) idle_turn(t);
  if (n_vis == 0) q_done();
  if (n_vis > 0) {
    uint32_t pa[BC / 16][4];  // P of the previous block, the A operand of its P V
    // Turn a: S_a alone (O is zero: no rescale).
    {
      const int ks = (b.kb_lo + t) * BC;
      full_wait(t);
      float sc[BC / 2];
      named_barrier_sync(my_bar, 256);
      wgmma_fence();
      issue_qk<D, BC>(sc, r.sq, stage_k(t));
      wgmma_commit();
      pass_turn(t);
      wgmma_wait<0>();
      fence_regs(sc);
      float alpha[2];
      softmax_block<BC>(sc, ks, ks + BC - 1, p.S, r, p.scale_log2, m_run, l_run, alpha);
      pack_p<BC>(sc, pa);
      ++t;
    }
    // Turns a + 1 .. a + n_vis - 1: S_t, then P_{t-1} V_{t-1}; the softmax of S_t under the latter.
    for (; t < a + n_vis; ++t) {
      const int ks = (b.kb_lo + t) * BC;
      full_wait(t);
      float sc[BC / 2];
      named_barrier_sync(my_bar, 256);
#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(o[hh]);
      wgmma_fence();
      issue_qk<D, BC>(sc, r.sq, stage_k(t));
      wgmma_commit();
      issue_pv<D, BC>(o, pa, stage_k(t - 1) + T::kv_bytes);
      wgmma_commit();
      pass_turn(t);
      wgmma_wait<1>();  // S_t landed; P_{t-1} V_{t-1} may still run
      fence_regs(sc);
      float alpha[2];
      softmax_block<BC>(sc, ks, ks + BC - 1, p.S, r, p.scale_log2, m_run, l_run, alpha);
      wgmma_wait<0>();
      fence_regs_u32(pa);
#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(o[hh]);
      release(t - 1);
      rescale_o_if(o, alpha);
      pack_p<BC>(sc, pa);
    }
    // Every S of the block has landed (the wait above); Q is free.
    q_done();
    // Turn a + n_vis: the last P V (and block t, if any, unseen).
    if (t < n) full_wait(t);
    named_barrier_sync(my_bar, 256);
#pragma unroll
    for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(o[hh]);
    wgmma_fence();
    issue_pv<D, BC>(o, pa, stage_k(t - 1) + T::kv_bytes);
    wgmma_commit();
    pass_turn(t);
    wgmma_wait<0>();
    fence_regs_u32(pa);
#pragma unroll
    for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(o[hh]);
    release(t - 1);
    if (t < n) release(t);
    for (++t; t <= n; ++t) idle_turn(t);
  }
}

// ---- The kernel: setup, the producer, the consumers' Q, then the variant's loop and the epilogue ----

// tk, tv: the K and V tensor maps.
template <int D, int BC, int NS>
__device__ __forceinline__ void forward_cta(const Params& p, const CUtensorMap* tk, const CUtensorMap* tv) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<D, BC, NS>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  unsigned char* smem = smem_raw + (base - raw);
  int* s_doc = reinterpret_cast<int*>(smem + T::doc_off);
  int* s_red = reinterpret_cast<int*>(smem + T::red_off);
  const uint32_t full_bar = base + T::bar_off, empty_bar = full_bar + NS * 8;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
  if (tid == 0) {
    prefetch_tensormap(tk);
    prefetch_tensormap(tv);
  }
  const Block b = setup_block<BC, NS>(p, s_doc, s_red, full_bar, empty_bar, 1u);

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegsTma>();
    if (wtid == 0) produce_tma<D, BC, NS>(b, base, full_bar, empty_bar, tk, tv);
    return;
  }

  setmaxnreg_inc<kConsumerRegsTma>();
  const Rows r = consumer_rows<D, BC, NS>(p, b, base, s_doc, s_red, wg, wtid);
  float o[T::kHalves][32], m_run[2], l_run[2];
  start_rows(o, m_run, l_run);
  consume_v2<D, BC, NS>(p, b, r, base, full_bar, empty_bar, o, m_run, l_run);
  epilogue<D>(p, b, r, o, m_run, l_run);
#else
  __trap();  // built only for sm_90a; the host side refuses other devices
#endif
}

// Variant 3: the K and V tensor maps as kernel parameters (TMA reads them from parameter space).
template <int D, int BC, int NS>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_attention_forward_tma_kernel(const Params p, const __grid_constant__ CUtensorMap tk,
                                        const __grid_constant__ CUtensorMap tv) {
  forward_cta<D, BC, NS>(p, &tk, &tv);
}

// ---- Variant 4: variant 3 made persistent ----
//
// One CTA per SM walks blocks (128 query rows of one head) in a fixed order: the heaviest first
// across all heads (as variant 3's dispatch), dealt out in rounds of G = the grid's size, every other
// round reversed (a snake: CTA b takes block rG + b in even rounds, rG + G - 1 - b in odd ones), so
// that the sums per CTA even out (a list-scheduling model puts the snake's makespan at 1.00-1.01x the
// mean load for 4K and packed 4K documents, docs/attention.md). The point is the overlap: one CTA's
// producer loads the next block's Q and first K / V while its consumers finish the current block,
// where variant 3 pays each block's start (loads, pipeline fill) and end with the SM otherwise idle.
// Every role walks the same blocks and computes their key ranges itself (no CTA-wide barrier after
// the start):
//   the producer (warp 0; lane 0 issues): per block, the rows' smallest document start (a warp
//     reduction over 128 loads), then each consumer's Q tile once that consumer released it
//     (q_empty[c], 4 warp arrivals; q_full[c] completes on the bytes), then the K / V blocks into the
//     ring, whose position g runs on across blocks;
//   each consumer: per block, its threads load the 128 rows' document starts (one each) into its own
//     scratch and reduce them per warp, meet at named barrier 1 + c, wait for q_full[c], run
//     variant 2's turns from ring position g0 (consume_v2), release Q after its last S (q_done) and
//     write the block's out and lse. Its scratch is rewritten only a block later, after every warp of
//     the consumer passed that block's turn barriers (all four take part in each).
template <int D, int BC, int NS>
struct PTile {
  using Base = Tile<D, BC, NS>;  // Q [2][halves][64][128 B], then the ring: variant 3's layout
  static constexpr int qbar_off = Base::bar_off + 2 * NS * 8;   // q_full[2], q_empty[2]
  static constexpr int scratch_off = qbar_off + 4 * 8;          // per consumer: doc [128], red [8]
  static constexpr int scratch_ints = kBR + 8;
  static constexpr size_t smem_bytes = 1024 + scratch_off + 2 * scratch_ints * 4;
  static_assert(smem_bytes <= 227 * 1024, "shared memory");
};

// Block number i of this CTA's walk (-1 past the end): rounds of gridDim.x, every other one reversed.
__device__ __forceinline__ int persistent_block(int i, int n_blocks_all) {
  const int G = gridDim.x, b = blockIdx.x;
  const int k = i * G + ((i & 1) ? G - 1 - b : b);
  return i * G < n_blocks_all && k < n_blocks_all ? k : -1;
}

// The first row of walk entry k's query block (heaviest first, heads inside).
__device__ __forceinline__ int persistent_q0(const Params& p, int k) {
  return ((p.S + kBR - 1) / kBR - 1 - k / p.H) * kBR;
}

// Walk entry k's query block and head, and the key blocks that its rows can see given their smallest
// document start `lo` (kIntMax: no row below S).
template <int BC>
__device__ __forceinline__ Block persistent_block_at(const Params& p, int k, int lo) {
  Block b;
  b.h = k % p.H;
  b.hk = b.h / p.group;
  b.q0 = persistent_q0(p, k);
  const int q_last = min(b.q0 + kBR - 1, p.S - 1);
  b.kb_lo = max(lo, 0) / BC;
  b.n_blocks = q_last / BC - b.kb_lo + 1;
  return b;
}

template <int D, int BC, int NS>
__device__ __forceinline__ void forward_persistent_cta(const Params& p, const CUtensorMap* tk, const CUtensorMap* tv,
                                                       const CUtensorMap* tq) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<D, BC, NS>;
  using PT = PTile<D, BC, NS>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  unsigned char* smem = smem_raw + (base - raw);
  const uint32_t full_bar = base + T::bar_off, empty_bar = full_bar + NS * 8;
  const uint32_t q_full = base + PT::qbar_off, q_empty = q_full + 2 * 8;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid % 32;
  const int S = p.S, n_all = ((S + kBR - 1) / kBR) * p.H;
  if (tid == 0) {
    prefetch_tensormap(tk);
    prefetch_tensormap(tv);
    prefetch_tensormap(tq);
    for (int s = 0; s < NS; ++s) {
      mbar_init(full_bar + 8 * s, 1);   // the TMA thread's arrive.expect_tx, then the bytes
      mbar_init(empty_bar + 8 * s, 8);  // every consumer warp, once done with the stage
    }
    for (int c = 0; c < 2; ++c) {
      mbar_init(q_full + 8 * c, 1);
      mbar_init(q_empty + 8 * c, 4);  // the consumer's warps, once its last S of a block landed
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegsTma>();
    if (wtid >= 32) return;
    int g = 0;  // ring position
    for (int i = 0;; ++i) {
      const int k = persistent_block(i, n_all);
      if (k < 0) break;
      const int q0 = persistent_q0(p, k);
      int lo = kIntMax;
#pragma unroll
      for (int x = 0; x < kBR / 32; ++x) {
        const int row = q0 + lane + 32 * x;
        if (row < S) lo = min(lo, p.doc_start[row]);
      }
      lo = __reduce_min_sync(0xffffffffu, lo);
      const Block b = persistent_block_at<BC>(p, k, lo);
      if (lane == 0) {
        for (int c = 0; c < 2; ++c) {
          mbar_wait(q_empty + 8 * c, (i & 1) ^ 1);
          mbar_arrive_expect_tx(q_full + 8 * c, T::q_wg_bytes);
          tma_load_tile<D>(base + c * T::q_wg_bytes, 64, tq, b.h, b.q0 + 64 * c, q_full + 8 * c);
        }
        produce_tma<D, BC, NS>(b, base, full_bar, empty_bar, tk, tv, g);
      }
      g += b.n_blocks;
      __syncwarp();
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegsTma>();
  const int c = wg - 1, wi = wtid / 32;
  int* s_doc = reinterpret_cast<int*>(smem + PT::scratch_off) + c * PT::scratch_ints;
  int* s_red = s_doc + kBR;
  int g0 = 0;
  for (int i = 0;; ++i) {
    const int k = persistent_block(i, n_all);
    if (k < 0) break;
    const int q0 = persistent_q0(p, k);
    // The 128 rows' document starts, one a thread, and their per-warp minimum and maximum.
    {
      const int row = q0 + wtid;
      int lo = row < S ? p.doc_start[row] : kIntMax, hi = lo;
      s_doc[wtid] = lo;
      lo = __reduce_min_sync(0xffffffffu, lo);
      hi = __reduce_max_sync(0xffffffffu, hi);
      if (lane == 0) {
        s_red[wi] = lo;
        s_red[4 + wi] = hi;
      }
    }
    named_barrier_sync(1 + c, 128);
    const Block b = persistent_block_at<BC>(p, k, min(min(s_red[0], s_red[1]), min(s_red[2], s_red[3])));
    Rows r;
    r.c = c;
    r.r0 = b.q0 + 64 * c;
    r.sq = base + c * T::q_wg_bytes;
    fill_rows(r, S, s_doc, s_red, wtid);
    mbar_wait(q_full + 8 * c, i & 1);
    float o[T::kHalves][32], m_run[2], l_run[2];
    start_rows(o, m_run, l_run);
    const uint32_t qe = q_empty + 8 * c;
    consume_v2<D, BC, NS>(p, b, r, base, full_bar, empty_bar, o, m_run, l_run, g0, [&] {
      __syncwarp();
      if (lane == 0) mbar_arrive(qe);
    });
    epilogue<D>(p, b, r, o, m_run, l_run);
    g0 += b.n_blocks;
  }
#else
  __trap();  // built only for sm_90a; the host side refuses other devices
#endif
}

template <int D, int BC, int NS>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_attention_forward_persistent_kernel(const Params p, const __grid_constant__ CUtensorMap tk,
                                               const __grid_constant__ CUtensorMap tv,
                                               const __grid_constant__ CUtensorMap tq) {
  forward_persistent_cta<D, BC, NS>(p, &tk, &tv, &tq);
}

// The tensor map of a [S, Hkv, D] bf16 tensor (K or V) for variant 3: box {64, 1, BC}: 64 columns
// (128 bytes, the 128-byte swizzle's span) of one head over BC keys, 128-byte swizzled, keys past S
// zero-filled (hopper_tensor_map.h).
template <int D, int BC>
CUtensorMap kv_tensor_map(const bf16* ptr, int S, int Hkv) {
  return hopper_tensor_map(ptr, 2, S, Hkv, D, 64, BC, "cuda::hopper_attention_forward");
}

// Variant 3, or with PERSISTENT variant 4: the same layout and stages, one CTA per SM (at most one
// per block), and Q through a tensor map too (box {64, 1, 64}: one consumer's 64 rows of one head).
template <int D, int NS, bool PERSISTENT = false>
void launch_tma(const Params& p, cudaStream_t stream) {
  constexpr int BC = 128;
  constexpr size_t smem = PERSISTENT ? PTile<D, BC, NS>::smem_bytes : Tile<D, BC, NS>::smem_bytes;
  const CUtensorMap tk = kv_tensor_map<D, BC>(p.k, p.S, p.Hkv), tv = kv_tensor_map<D, BC>(p.v, p.S, p.Hkv);
  const unsigned nqb = static_cast<unsigned>((p.S + kBR - 1) / kBR), nh = static_cast<unsigned>(p.H);
  if constexpr (PERSISTENT) {
    constexpr auto kernel = hopper_attention_forward_persistent_kernel<D, BC, NS>;
    const CUtensorMap tq = hopper_tensor_map(p.q, 2, p.S, p.H, D, 64, 64, "cuda::hopper_attention_forward");
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(int64_t(nqb) * nh, std::max(sms, 1)));
    kernel<<<grid, kThreads, smem, stream>>>(p, tk, tv, tq);
  } else {
    constexpr auto kernel = hopper_attention_forward_tma_kernel<D, BC, NS>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const dim3 grid = p.heads_inside ? dim3(nh, nqb) : dim3(nqb, nh);  // see setup_block
    kernel<<<grid, kThreads, smem, stream>>>(p, tk, tv);
  }
  CUDA_CHECK_LAUNCH("hopper_attention_forward");
}

// 3 stages (d 128: Q 32 KB + 3 x 64 KB of K and V, 225.6 KB in all). The TMA producer would not
// deadlock with 2 (its `full` is not one block late; the model checks it) but keeps 3 for slack: a
// TMA load of a stage starts only once both consumers released it.
constexpr int kStagesV3 = 3;

template <int D>
void launch_variant(const Params& p, int variant, cudaStream_t stream) {
  if (variant == 4) launch_tma<D, kStagesV3, true>(p, stream);
  else launch_tma<D, kStagesV3>(p, stream);
}

}  // namespace
}  // namespace hopper

bool hopper_attention_supported(int64_t d, int64_t H, int64_t Hkv, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (d != 64 && d != 128) return no("head_dim " + std::to_string(d) + " (the Hopper kernel has 64 and 128)");
  if (H < 1 || Hkv < 1 || H % Hkv != 0)
    return no("H = " + std::to_string(H) + " is not a multiple of Hkv = " + std::to_string(Hkv));
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return no("no CUDA device");
  }
  if (major != 9 || minor != 0)
    return no("compute capability " + std::to_string(major) + "." + std::to_string(minor) +
              " (the Hopper kernel is built for sm_90a only)");
  return true;
}

int hopper_attention_variant() {
  const char* v = std::getenv("ULYSSES_HOPPER_VARIANT");
  if (v == nullptr || *v == '\0') return 3;
  const std::string s = v;
  ULY_CHECK(s != "1" && s != "2", "ULYSSES_HOPPER_VARIANT=" << s
                                                          << ": variants 1 and 2 of the Hopper forward were removed "
                                                             "(2026-12-07; 3, with TMA loads, was faster); takes 3 "
                                                             "(the default) or 4 (variant 3 persistent)");
  ULY_CHECK(s == "3" || s == "4", "ULYSSES_HOPPER_VARIANT=" << s
                                                           << ": takes 3 (the TMA producer, the default) or 4 "
                                                              "(variant 3 persistent)");
  return s[0] - '0';
}

HopperCtaOrder hopper_cta_order() {
  const char* v = std::getenv("ULYSSES_HOPPER_CTA_ORDER");
  if (v == nullptr || *v == '\0') return HopperCtaOrder::kAuto;
  const std::string s = v;
  ULY_CHECK(s == "heads-inside" || s == "heads-outer",
            "ULYSSES_HOPPER_CTA_ORDER=" << s
                                        << ": takes heads-inside (the heaviest blocks of all heads first) or "
                                           "heads-outer (the blocks of one head after another); unset, each kernel "
                                           "picks its own");
  return s == "heads-inside" ? HopperCtaOrder::kHeadsInside : HopperCtaOrder::kHeadsOuter;
}

bool hopper_cta_heads_inside_default(bool backward, int64_t longest) { return !backward || longest < 16384; }

void hopper_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv,
                              int64_t d, double scale, cudaStream_t stream) {
  hopper_attention_forward_variant(out, lse, q, k, v, doc_start, S, H, Hkv, d, scale, stream,
                                   hopper_attention_variant());
}

void hopper_attention_forward_variant(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q,
                                      const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start,
                                      int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale, cudaStream_t stream,
                                      int variant) {
  const char* op = "cuda::hopper_attention_forward";
  ULY_CHECK(variant != 1 && variant != 2, op << ": variant " << variant
                                              << " was removed (2026-12-07; 3, with TMA loads, was faster): 3 or 4");
  ULY_CHECK(variant == 3 || variant == 4, op << ": variant " << variant << " (3 or 4)");
  attn_host::check_shapes(op, S, H, Hkv, d, scale);
  std::string why;
  ULY_CHECK(hopper_attention_supported(d, H, Hkv, &why),
            op << ": not supported here: " << why << " (use cuda::attention_forward)");
  if (S == 0) return;
  attn_host::check_ptr(out, "out", op);
  attn_host::check_ptr(q, "q", op);
  attn_host::check_ptr(k, "k", op);
  attn_host::check_ptr(v, "v", op);
  ULY_CHECK(lse != nullptr && doc_start != nullptr, op << ": lse or doc_start is null");
  hopper::Params p{};
  p.out = out;
  p.lse = lse;
  p.q = q;
  p.k = k;
  p.v = v;
  p.doc_start = doc_start;
  p.S = static_cast<int>(S);
  p.H = static_cast<int>(H);
  p.Hkv = static_cast<int>(Hkv);
  p.group = static_cast<int>(H / Hkv);
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  // The blocks go in the grid's y (at most 65535: 8.4M tokens); past that, the heads-outer order.
  const HopperCtaOrder order = hopper_cta_order();
  const bool inside = order == HopperCtaOrder::kAuto ? hopper_cta_heads_inside_default(false, S)
                                                     : order == HopperCtaOrder::kHeadsInside;
  p.heads_inside = inside && (S + hopper::kBR - 1) / hopper::kBR <= 65535 ? 1 : 0;
  if (d == 128) hopper::launch_variant<128>(p, variant, stream);
  else hopper::launch_variant<64>(p, variant, stream);
}

}  // namespace ulysses::cuda
