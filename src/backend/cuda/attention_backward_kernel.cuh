// Backward attention kernel bodies (FlashAttention-2 partitioning):
//   attention_bwd_dsum_body:   D[h, i] = dout_i . out_i            (fp32, workspace)
//   attention_bwd_qbmin_body:  qbmin[b] = min doc_start over query block b
//   attention_bwd_sufmin_body: sufmin[b] = min over b' >= b of qbmin[b']
//   attention_bwd_main_body:   one CTA per (key block of BC keys, kv head);
//       warp w owns keys 16w..16w+15 and keeps their dK, dV rows in registers
//       while the CTA walks (query head of the group, query block) pairs;
//       dQ partial sums go to an fp32 workspace by vector atomics.
//   attention_bwd_dq_body:     dq = bf16(scale * dq_acc)
// With s = scale q.k, P = exp(s - lse), dP = dout . v, dS = P (dP - D):
//   dV = P^T dout, dK = scale dS^T q, dQ = scale dS k.
#pragma once
#include "backend/cuda/attention_device.cuh"

namespace ulysses::cuda::attn {

// Block-offset form (ring attention): query row i is global token q_off + i, key
// row j global token k_off + j; doc_start is the whole row's, qbmin and sufmin hold
// global doc_start values of the query rows; the full form has Sq = Sk = S, offsets 0.
struct BwdParams {
  bf16* dk;                  // [Sk, Hkv, D]
  bf16* dv;                  // [Sk, Hkv, D]
  float* dq_acc;             // [Sq, H, D] workspace, zeroed before the main kernel
  const bf16* dout;          // [Sq, H, D]
  const bf16* q;             // [Sq, H, D]
  const bf16* k;             // [Sk, Hkv, D]
  const bf16* v;             // [Sk, Hkv, D]
  const float* lse;          // [H, Sq]
  const float* dsum;         // [H, Sq] workspace (D above)
  const int32_t* doc_start;  // [S_row]
  const int32_t* qbmin;      // [nqb] workspace
  const int32_t* sufmin;     // [nqb] workspace
  int32_t* dq_order;         // [H, ceil(Sq / 64), 2] workspace, zeroed: the deterministic Hopper backward's
                             // dQ contributions done per (head, 64-row block, 64-column half)
  int Sq, Sk, q_off, k_off;
  int H, Hkv, group, nqb;
  float scale_log2, scale;
  int heads_inside = 1;  // the Hopper backward's CTA order: 1: blockIdx.x = kv head; 0: x = key block
};

template <int D, int NW, int BR>
struct BwdTile {
  static constexpr int BC = 16 * NW;  // keys per CTA
  static constexpr int NT = 32 * NW;
  static constexpr int LDS = D + 8;   // padded smem row strides (elements), ldmatrix conflict-free
  static constexpr int LDP = BR + 8;
  // dQ = dS K tiling of the (BR x D) tile over the warps: WM x WN warps of 16 x DNW.
  static constexpr int WM = BR / 16, WN = NW / WM, DNW = D / WN;
  static_assert(BR % 16 == 0 && NW % WM == 0 && D % WN == 0 && DNW % 16 == 0, "dQ warp tiling");
  static constexpr size_t bf16_elems = size_t(2 * BC + 4 * BR) * LDS + size_t(BC) * LDP;
  static constexpr size_t smem_bytes = bf16_elems * sizeof(bf16) + 6 * BR * sizeof(float) + 16;
};

// Tile choice per head_dim: NW warps (16 * NW keys per CTA), BR query rows per step.
template <int D>
struct BwdConfig {
  static constexpr int NW = (D == 128) ? 8 : 4;
  static constexpr int BR = (D == 128) ? 32 : 64;
};

// ---- preprocessing ---------------------------------------------------------------
// D/8 threads per (row i, head h); blocks of 256 threads. rows = S * H.
template <int D>
ATTN_DEV void attention_bwd_dsum_body(float* dsum, const bf16* dout, const bf16* out, int S, int H) {
  constexpr int CH = D / 8;
  const int64_t gid = int64_t(block_x()) * 256 + thread_idx();
  const int64_t row = gid / CH;  // = i * H + h
  const int c = static_cast<int>(gid % CH);
  float acc = 0.f;
  if (row < int64_t(S) * H) {
    uint32_t a[4], b[4];
    load16(a, dout + row * D + c * 8);
    load16(b, out + row * D + c * 8);
#pragma unroll
    for (int x = 0; x < 4; ++x) acc += bf16_lo(a[x]) * bf16_lo(b[x]) + bf16_hi(a[x]) * bf16_hi(b[x]);
  }
#pragma unroll
  for (int m = CH / 2; m >= 1; m /= 2) acc += shfl_xor(acc, m);
  if (c == 0 && row < int64_t(S) * H) {
    const int64_t i = row / H, h = row % H;
    dsum[h * S + i] = acc;
  }
}

// One thread per query block of BR rows.
template <int BR>
ATTN_DEV void attention_bwd_qbmin_body(int32_t* qbmin, const int32_t* doc_start, int S, int nqb) {
  const int b = block_x() * 256 + thread_idx();
  if (b >= nqb) return;
  int m = kIntMax;
  const int end = imin(S, (b + 1) * BR);
  for (int i = b * BR; i < end; ++i) m = imin(m, doc_start[i]);
  qbmin[b] = m;
}

// One CTA of NT threads; smem: NT ints.
template <int NT>
ATTN_DEV void attention_bwd_sufmin_body(int32_t* sufmin, const int32_t* qbmin, int nqb, int* smem) {
  const int tid = thread_idx();
  const int chunk = (nqb + NT - 1) / NT;
  const int begin = imin(nqb, tid * chunk), end = imin(nqb, begin + chunk);
  int m = kIntMax;
  for (int b = end - 1; b >= begin; --b) m = imin(m, qbmin[b]);
  smem[tid] = m;
  block_sync();
  // Hillis-Steele suffix scan: smem[x] becomes the min over threads x..NT-1.
  for (int off = 1; off < NT; off *= 2) {
    const int other = tid + off < NT ? smem[tid + off] : kIntMax;
    block_sync();
    smem[tid] = imin(smem[tid], other);
    block_sync();
  }
  int carry = tid + 1 < NT ? smem[tid + 1] : kIntMax;
  for (int b = end - 1; b >= begin; --b) {
    carry = imin(carry, qbmin[b]);
    sufmin[b] = carry;
  }
}

// dq[i] = bf16(scale * acc[i]) for 4 consecutive elements per thread; n % 4 == 0.
ATTN_DEV void attention_bwd_dq_body(bf16* dq, const float* acc, int64_t n, float scale) {
  const int64_t stride = int64_t(grid_x()) * 256;
  for (int64_t x = (int64_t(block_x()) * 256 + thread_idx()) * 4; x < n; x += stride * 4) {
    float f[4];
    load_f4(f, acc + x);
    store_u64(dq + x, pack_bf16(f[0] * scale, f[1] * scale), pack_bf16(f[2] * scale, f[3] * scale));
  }
}

// ---- main kernel -------------------------------------------------------------------
template <int D, int NW, int BR>
ATTN_DEV void attention_bwd_main_body(const BwdParams& p, unsigned char* smem) {
  using Tile = BwdTile<D, NW, BR>;
  constexpr int BC = Tile::BC, NT = Tile::NT, LDS = Tile::LDS, LDP = Tile::LDP, CH = D / 8;
  constexpr int WN = Tile::WN, DNW = Tile::DNW;

  bf16* sK = reinterpret_cast<bf16*>(smem);  // [BC][LDS]
  bf16* sV = sK + BC * LDS;                  // [BC][LDS]
  bf16* sQ = sV + BC * LDS;                  // [2][BR][LDS]
  bf16* sdO = sQ + 2 * BR * LDS;             // [2][BR][LDS]
  bf16* sdS = sdO + 2 * BR * LDS;            // [BC][LDP]: dS^T of the current pair, keys x queries
  float* sLse = reinterpret_cast<float*>(sdS + BC * LDP);  // [2][BR]
  float* sDs = sLse + 2 * BR;                               // [2][BR]
  int* sLo = reinterpret_cast<int*>(sDs + 2 * BR);          // [2][BR] doc_start, kIntMax past S
  int* sRange = sLo + 2 * BR;                               // [1]

  const int tid = thread_idx(), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int Sq = p.Sq, Sk = p.Sk, delta = p.q_off - p.k_off;  // query i sees local keys up to i + delta
  const int kb = block_x(), hk = block_y();
  const int k0 = kb * BC;
  const int k_last = imin(k0 + BC - 1, Sk - 1);
  const int k_last_g = k_last + p.k_off;  // its global index, for the (global) doc_start minima
  const int64_t q_row = int64_t(p.H) * D, kv_row = int64_t(p.Hkv) * D;

  for (int c = tid; c < BC * CH; c += NT) {
    const int r = c / CH, cc = c % CH, j = k0 + r;
    if (j < Sk) {
      const int64_t off = j * kv_row + int64_t(hk) * D + cc * 8;
      cp_async16(sK + r * LDS + cc * 8, p.k + off);
      cp_async16(sV + r * LDS + cc * 8, p.v + off);
    } else {
      zero16(sK + r * LDS + cc * 8);
      zero16(sV + r * LDS + cc * 8);
    }
  }
  cp_async_commit();

  // Query blocks that can see a key of this block: from the one holding k0 (no
  // earlier query sees it) up to the last block whose suffix-min doc_start is
  // <= k_last (no later query's document starts early enough). sufmin is
  // non-decreasing, so binary search.
  const int qb_begin = imax(k0 - delta, 0) / BR;
  if (tid == 0) {
    int lo = qb_begin, hi = p.nqb;  // first b in [qb_begin, nqb) with sufmin[b] > k_last_g
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (p.sufmin[mid] > k_last_g) hi = mid;
      else lo = mid + 1;
    }
    sRange[0] = lo;
  }
  block_sync();
  const int nq = imax(sRange[0] - qb_begin, 0);  // 0 when every query precedes the block, or its document does
  const int total = p.group * nq;

  auto load_q = [&](int it, int buf) {
    const int h = hk * p.group + it / nq, q0 = (qb_begin + it % nq) * BR;
    bf16* dQ = sQ + buf * BR * LDS;
    bf16* dO = sdO + buf * BR * LDS;
    for (int c = tid; c < BR * CH; c += NT) {
      const int r = c / CH, cc = c % CH, i = q0 + r;
      if (i < Sq) {
        const int64_t off = i * q_row + int64_t(h) * D + cc * 8;
        cp_async16(dQ + r * LDS + cc * 8, p.q + off);
        cp_async16(dO + r * LDS + cc * 8, p.dout + off);
      } else {
        zero16(dQ + r * LDS + cc * 8);
        zero16(dO + r * LDS + cc * 8);
      }
    }
    for (int c = tid; c < BR; c += NT) {
      const int i = q0 + c;
      if (i < Sq) {
        cp_async4(sLse + buf * BR + c, p.lse + int64_t(h) * Sq + i);
        cp_async4(sDs + buf * BR + c, p.dsum + int64_t(h) * Sq + i);
        cp_async4(sLo + buf * BR + c, p.doc_start + p.q_off + i);  // global: compared with global keys
      } else {
        sLse[buf * BR + c] = 0.f;
        sDs[buf * BR + c] = 0.f;
        sLo[buf * BR + c] = kIntMax;  // masks the padded query rows
      }
    }
  };
  if (total > 0) load_q(0, 0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;

  const int kw = warp * 16;  // the warp's first key row within the tile
  const int key[2] = {k0 + kw + g, k0 + kw + g + 8};  // local key rows
  const int arow = pat_a_row(lane), acol = pat_a_col(lane);
  const int brow = pat_b_row(lane), bcol = pat_b_col(lane);
  const int wm = warp / WN, wn = warp % WN;  // dQ tile of this warp

  for (int it = 0; it < total; ++it) {
    const int buf = it & 1;
    cp_async_wait_all();
    block_sync();  // tiles[buf] landed; every warp is done with tiles[buf ^ 1] and sdS
    if (it + 1 < total) load_q(it + 1, buf ^ 1);
    cp_async_commit();

    const int h = hk * p.group + it / nq, qb = qb_begin + it % nq, q0 = qb * BR;
    // A block whose every query's document starts after this key block (possible
    // only for non-contiguous doc_start) contributes nothing. CTA-uniform.
    if (p.qbmin[qb] > k_last_g) continue;
    const bf16* cQ = sQ + buf * BR * LDS;
    const bf16* cdO = sdO + buf * BR * LDS;
    const float* cLse = sLse + buf * BR;
    const float* cDs = sDs + buf * BR;
    const int* cLo = sLo + buf * BR;

    // st = K Q^T and dpt = V dO^T: this warp's 16 keys x BR queries.
    float st[BR / 8][4], dpt[BR / 8][4];
#pragma unroll
    for (int n = 0; n < BR / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
      ldsm_x4(ak, sK + (kw + arow) * LDS + kk * 16 + acol);
      ldsm_x4(av, sV + (kw + arow) * LDS + kk * 16 + acol);
#pragma unroll
      for (int np = 0; np < BR / 16; ++np) {
        uint32_t bq[4], bo[4];
        ldsm_x4(bq, cQ + (np * 16 + brow) * LDS + kk * 16 + bcol);
        ldsm_x4(bo, cdO + (np * 16 + brow) * LDS + kk * 16 + bcol);
        mma16816(st[2 * np], ak, bq[0], bq[1]);
        mma16816(st[2 * np + 1], ak, bq[2], bq[3]);
        mma16816(dpt[2 * np], av, bo[0], bo[1]);
        mma16816(dpt[2 * np + 1], av, bo[2], bo[3]);
      }
    }

    // st <- P^T (masked), dpt <- dS^T = P^T (dP^T - D).
#pragma unroll
    for (int n = 0; n < BR / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = n * 8 + 2 * t + (e & 1), i = q0 + qc, j = key[e / 2];
        const bool ok = j + p.k_off >= cLo[qc] && j <= i + delta && j < Sk;
        const float pr = ok ? fast_exp2(st[n][e] * p.scale_log2 - cLse[qc] * kLog2e) : 0.f;
        st[n][e] = pr;
        dpt[n][e] = pr * (dpt[n][e] - cDs[qc]);
      }

    // dV += P^T dO and dK += dS^T Q (accumulator layout = A-fragment layout).
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
      uint32_t ap[4], as[4];
      ap[0] = pack_bf16(st[2 * kk][0], st[2 * kk][1]);
      ap[1] = pack_bf16(st[2 * kk][2], st[2 * kk][3]);
      ap[2] = pack_bf16(st[2 * kk + 1][0], st[2 * kk + 1][1]);
      ap[3] = pack_bf16(st[2 * kk + 1][2], st[2 * kk + 1][3]);
      as[0] = pack_bf16(dpt[2 * kk][0], dpt[2 * kk][1]);
      as[1] = pack_bf16(dpt[2 * kk][2], dpt[2 * kk][3]);
      as[2] = pack_bf16(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
      as[3] = pack_bf16(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bo[4], bq[4];
        ldsm_x4_t(bo, cdO + (kk * 16 + arow) * LDS + dp * 16 + acol);
        ldsm_x4_t(bq, cQ + (kk * 16 + arow) * LDS + dp * 16 + acol);
        mma16816(dv[2 * dp], ap, bo[0], bo[1]);
        mma16816(dv[2 * dp + 1], ap, bo[2], bo[3]);
        mma16816(dk[2 * dp], as, bq[0], bq[1]);
        mma16816(dk[2 * dp + 1], as, bq[2], bq[3]);
      }
    }

    // dS^T to shared memory (bf16, as the MMAs above used it) for dQ = dS K.
#pragma unroll
    for (int n = 0; n < BR / 8; ++n) {
      store_u32(sdS + (kw + g) * LDP + n * 8 + 2 * t, pack_bf16(dpt[n][0], dpt[n][1]));
      store_u32(sdS + (kw + g + 8) * LDP + n * 8 + 2 * t, pack_bf16(dpt[n][2], dpt[n][3]));
    }
    block_sync();

    float dq[DNW / 8][4];
#pragma unroll
    for (int n = 0; n < DNW / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4_t(a, sdS + (kk * 16 + brow) * LDP + wm * 16 + bcol);
#pragma unroll
      for (int dp = 0; dp < DNW / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, sK + (kk * 16 + arow) * LDS + wn * DNW + dp * 16 + acol);
        mma16816(dq[2 * dp], a, b[0], b[1]);
        mma16816(dq[2 * dp + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = q0 + wm * 16 + hf * 8 + g;
      if (i >= Sq) continue;
      float* dst = p.dq_acc + i * q_row + int64_t(h) * D + wn * DNW + 2 * t;
#pragma unroll
      for (int n = 0; n < DNW / 8; ++n) red_add_f2(dst + n * 8, dq[n][2 * hf], dq[n][2 * hf + 1]);
    }
  }
  cp_async_wait_all();

#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    if (key[hf] >= Sk) continue;
    const int64_t off = key[hf] * kv_row + int64_t(hk) * D + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      store_u32(p.dk + off + n * 8, pack_bf16(dk[n][2 * hf] * p.scale, dk[n][2 * hf + 1] * p.scale));
      store_u32(p.dv + off + n * 8, pack_bf16(dv[n][2 * hf], dv[n][2 * hf + 1]));
    }
  }
}

}  // namespace ulysses::cuda::attn
