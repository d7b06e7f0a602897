// Forward attention kernel body (FlashAttention-2 partitioning): one CTA per
// (query block of BR rows, query head); each of the NW warps owns MT m-tiles
// of 16 query rows and keeps its output rows in registers while the CTA walks
// the key blocks of BC keys that the block's rows can see, double-buffering
// K/V tiles in shared memory with cp.async. Online softmax in fp32 on
// log2e-prescaled scores. See docs/attention.md.
//
// Block-offset form (ring attention): query row i is global token q_off + i and
// key row j global token k_off + j (doc_start is the whole row's), so row i sees
// keys j in [doc_start[q_off + i] - k_off, i + q_off - k_off]; the full form has
// Sq = Sk = S and q_off = k_off = 0.
#pragma once
#include "backend/cuda/attention_device.cuh"

namespace ulysses::cuda::attn {

struct FwdParams {
  bf16* out;               // [Sq, H, D]
  float* lse;              // [H, Sq]
  const bf16* q;           // [Sq, H, D]
  const bf16* k;           // [Sk, Hkv, D]
  const bf16* v;           // [Sk, Hkv, D]
  const int32_t* doc_start;  // [S_row]: the whole row's
  int Sq, Sk, q_off, k_off;  // rows, and their global offsets
  int H, Hkv, group;       // group = H / Hkv
  float scale_log2;        // scale * log2(e)
};

template <int D, int NW, int MT, int BC>
struct FwdTile {
  static constexpr int BR = 16 * MT * NW;  // query rows per CTA
  static constexpr int NT = 32 * NW;       // threads per CTA
  static constexpr int LDS = D + 8;        // smem row stride (elements): 16-byte pad keeps ldmatrix conflict-free
  static constexpr bool kQInRegs = MT * D <= 128;  // else Q fragments are re-read from smem per key block
  static constexpr size_t smem_bytes = size_t(BR + 4 * BC) * LDS * sizeof(bf16) + NW * sizeof(int);
  static_assert(D % 16 == 0 && BC % 16 == 0, "tile sizes");
};

// Tile choice per head_dim (no register spills on sm_90a with nvcc 13.0;
// d = 128 with MT = 2 spills, see docs/attention.md).
template <int D>
struct FwdConfig {
  static constexpr int NW = 4;                     // warps
  static constexpr int MT = (D == 64) ? 2 : 1;     // 16-row m-tiles per warp
  static constexpr int BC = 64;                    // keys per block
};

template <int D, int NW, int MT, int BC>
ATTN_DEV void attention_forward_body(const FwdParams& p, unsigned char* smem) {
  using Tile = FwdTile<D, NW, MT, BC>;
  constexpr int BR = Tile::BR, NT = Tile::NT, LDS = Tile::LDS, CH = D / 8;  // CH: 16-byte chunks per row
  
  bf16* sQ = reinterpret_cast<bf16*>(smem);  // [BR][LDS]
  bf16* sK = sQ + BR * LDS;                  // [2][BC][LDS]
  bf16* sV = sK + 2 * BC * LDS;              // [2][BC][LDS]
  int* sMin = reinterpret_cast<int*>(sV + 2 * BC * LDS);  // [NW]

  const int tid = thread_idx(), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int Sq = p.Sq, Sk = p.Sk, delta = p.q_off - p.k_off;  // row i sees local keys up to i + delta
  const int qb = grid_x() - 1 - block_x();  // heaviest (latest) query blocks first
  const int h = block_y(), hk = h / p.group;
  const int q0 = qb * BR;
  const int64_t q_row = int64_t(p.H) * D, kv_row = int64_t(p.Hkv) * D;

  for (int c = tid; c < BR * CH; c += NT) {
    const int r = c / CH, cc = c % CH, i = q0 + r;
    bf16* dst = sQ + r * LDS + cc * 8;
    if (i < Sq) cp_async16(dst, p.q + i * q_row + int64_t(h) * D + cc * 8);
    else zero16(dst);
  }
  cp_async_commit();

  // Visible (local) keys of this thread's rows: [lo, row + delta] (lo = kIntMax for rows past Sq: none).
  int lo[MT][2];
  const int wrow0 = q0 + warp * 16 * MT;  // the warp's first row
  int wlo_min = kIntMax, wlo_max = 0;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = wrow0 + mt * 16 + hf * 8 + g;
      lo[mt][hf] = i < Sq ? p.doc_start[p.q_off + i] - p.k_off : kIntMax;
      wlo_min = imin(wlo_min, lo[mt][hf]);
      wlo_max = imax(wlo_max, lo[mt][hf]);
    }
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) {
    wlo_min = imin(wlo_min, shfl_xor(wlo_min, m));
    wlo_max = imax(wlo_max, shfl_xor(wlo_max, m));
  }
  const bool warp_active = wrow0 < Sq;
  const int wrow_max = imin(imin(wrow0 + 16 * MT - 1, Sq - 1) + delta, Sk - 1);  // the warp's last visible key
  if (lane == 0) sMin[warp] = wlo_min;
  block_sync();
  int blo = kIntMax;
#pragma unroll
  for (int w = 0; w < NW; ++w) blo = imin(blo, sMin[w]);
  blo = imax(blo, 0);
  // Key blocks before every row's document start or after the last row are never touched.
  const int q_last = imin(imin(q0 + BR - 1, Sq - 1) + delta, Sk - 1);  // the block's last visible key
  const int kb_lo = blo / BC, kb_hi = q_last < 0 ? -1 : q_last / BC;

  auto load_kv = [&](int kb, int buf) {
    bf16* dK = sK + buf * BC * LDS;
    bf16* dV = sV + buf * BC * LDS;
    for (int c = tid; c < BC * CH; c += NT) {
      const int r = c / CH, cc = c % CH, j = kb * BC + r;
      if (j < Sk) {
        const int64_t off = j * kv_row + int64_t(hk) * D + cc * 8;
        cp_async16(dK + r * LDS + cc * 8, p.k + off);
        cp_async16(dV + r * LDS + cc * 8, p.v + off);
      } else {
        zero16(dK + r * LDS + cc * 8);
        zero16(dV + r * LDS + cc * 8);
      }
    }
  };
  if (kb_lo <= kb_hi) load_kv(kb_lo, 0);
  cp_async_commit();

  float o[MT][D / 8][4];
  float m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
    m_run[mt][0] = m_run[mt][1] = kNegInf;
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }
  uint32_t qf[Tile::kQInRegs ? MT : 1][Tile::kQInRegs ? D / 16 : 1][4];

  const int arow = pat_a_row(lane), acol = pat_a_col(lane);
  const int brow = pat_b_row(lane), bcol = pat_b_col(lane);

  for (int kb = kb_lo; kb <= kb_hi; ++kb) {
    const int buf = (kb - kb_lo) & 1;
    cp_async_wait_all();
    block_sync();  // K/V[buf] (and Q) landed; every warp is done with buf ^ 1
    if constexpr (Tile::kQInRegs) {
      if (kb == kb_lo) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk)
            ldsm_x4(qf[mt][kk], sQ + (warp * 16 * MT + mt * 16 + arow) * LDS + kk * 16 + acol);
      }
    }
    if (kb < kb_hi) load_kv(kb + 1, buf ^ 1);
    cp_async_commit();

    const int ks = kb * BC, ke = ks + BC - 1;
    if (!warp_active || ke < wlo_min || ks > wrow_max) continue;  // fully masked for this warp
    // No element masked: every row's document starts at or before ks and every row is at or after ke.
    const bool full = ks >= wlo_max && ke <= wrow0 + delta && ke < Sk;
    const bf16* cK = sK + buf * BC * LDS;
    const bf16* cV = sV + buf * BC * LDS;

    // s = Q K^T for this warp's rows.
    float s[MT][BC / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < BC / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (Tile::kQInRegs) {
#pragma unroll
          for (int x = 0; x < 4; ++x) a[mt][x] = qf[mt][kk][x];
        } else {
          ldsm_x4(a[mt], sQ + (warp * 16 * MT + mt * 16 + arow) * LDS + kk * 16 + acol);
        }
      }
#pragma unroll
      for (int np = 0; np < BC / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, cK + (np * 16 + brow) * LDS + kk * 16 + bcol);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(s[mt][2 * np], a[mt], b[0], b[1]);
          mma16816(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Online softmax (log2 domain): mask, new running max, rescale.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int n = 0; n < BC / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][n][e] * p.scale_log2;
          if (!full) {
            const int col = ks + n * 8 + 2 * t + (e & 1);
            const int row = wrow0 + mt * 16 + (e / 2) * 8 + g;
            if (col < lo[mt][e / 2] || col > row + delta || col >= Sk) x = kNegInf;
          }
          s[mt][n][e] = x;
          mx[e / 2] = fmax2(mx[e / 2], x);
        }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        mx[hf] = fmax2(mx[hf], shfl_xor(mx[hf], 1));
        mx[hf] = fmax2(mx[hf], shfl_xor(mx[hf], 2));
        const float m_new = fmax2(m_run[mt][hf], mx[hf]);
        // A row with nothing visible yet keeps m = -inf; use 0 as the base so
        // that exp2 sees -inf - 0 (= 0) instead of -inf - (-inf) (= NaN).
        const float base = m_new == kNegInf ? 0.f : m_new;
        const float alpha = fast_exp2(m_run[mt][hf] - base);
        m_run[mt][hf] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) {
          s[mt][n][2 * hf] = fast_exp2(s[mt][n][2 * hf] - base);
          s[mt][n][2 * hf + 1] = fast_exp2(s[mt][n][2 * hf + 1] - base);
          rs += s[mt][n][2 * hf] + s[mt][n][2 * hf + 1];
        }
        l_run[mt][hf] = l_run[mt][hf] * alpha + rs;  // this lane's columns only; summed over the quad at the end
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o[mt][n][2 * hf] *= alpha;
          o[mt][n][2 * hf + 1] *= alpha;
        }
      }
    }

    // o += P V: the accumulator layout of P is the A-fragment layout of a 16x16 tile.
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, cV + (kk * 16 + arow) * LDS + dp * 16 + acol);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(o[mt][2 * dp], a[mt], b[0], b[1]);
          mma16816(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait_all();

  // Epilogue: normalise, write out (bf16) and lse (natural log).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = l_run[mt][hf];
      l += shfl_xor(l, 1);
      l += shfl_xor(l, 2);
      const int i = wrow0 + mt * 16 + hf * 8 + g;
      if (i >= Sq) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      bf16* dst = p.out + i * q_row + int64_t(h) * D + 2 * t;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        store_u32(dst + n * 8, pack_bf16(o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv));
      if (t == 0) {
        // A row that sees no key (a block wholly after it, or before its document) gets out = 0, lse = -inf.
        p.lse[int64_t(h) * Sq + i] = l > 0.f ? (m_run[mt][hf] + log2f(l)) * kLn2 : kNegInf;
      }
    }
}

}  // namespace ulysses::cuda::attn
