// Hopper (sm_90a) causal attention forward, warp-specialised with wgmma, after the design of
// FlashAttention-3 (Shah et al., arXiv 2407.08608); our own code. See docs/attention.md.
//
// One CTA per (query block of BR = 128 rows, query head), heaviest (latest) query blocks first,
// 3 warpgroups of 128 threads:
//   warpgroup 0, producer: streams the K and V tiles of BC keys that the block's rows can see into
//     a ring of NS shared-memory stages with cp.async (zero-filling keys past S), then fences them
//     to the async proxy and arrives on the stage's `full` mbarrier; it waits on the stage's
//     `empty` mbarrier before refilling it. (cp.async rather than TMA: no tensor map, no driver
//     entry point, and our own zero-fill at the sequence end; TMA is the next step.)
//   warpgroups 1 and 2, consumers: each owns 64 query rows (its Q tile loaded once with cp.async),
//     and per key block: S = Q K^T with wgmma m64n{BC}k16 (A = Q, B = K, both shared-memory
//     descriptors, K-major), masking only where a block is not wholly visible (causal diagonal,
//     document starts, keys past S), online softmax in fp32 registers on log2e-prescaled scores,
//     P to bf16 in registers and O += P V with wgmma m64n64k16 (A = P from registers, B = V from
//     shared memory, transposed: V is stored key-major with d contiguous); then each warp
//     arrives on the stage's `empty` mbarrier.
// Shared-memory tiles use the 128-byte swizzle of wgmma's canonical layouts: a tile of R rows and D
// columns is stored as D / 64 column halves of R rows x 128 bytes each, row r's 16-byte chunk c at
// r * 128 + ((c ^ (r % 8)) * 16), every half 1024-byte aligned (a swizzle atom is 8 rows, 1024 bytes).
// Descriptors (see hopper_device.cuh): K-major (Q, K): stride byte offset 1024 (the next 8 rows),
// the leading byte offset unused by swizzled K-major layouts; a k16 step moves the start address
// by 32 bytes inside the atom, the next 64 columns are the next half. V (MN-major, transposed):
// one wgmma per 64-column half of d, so only one swizzle atom spans N and the only stride used is
// the one between groups of 8 keys, 1024 bytes, given as both offsets.
#include <algorithm>
#include <string>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/attention_launch.h"
#include "backend/cuda/check.h"
#include "backend/cuda/hopper_attention.h"
#include "backend/cuda/hopper_device.cuh"

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
constexpr int kProducerRegs = 56;     // setmaxnreg: 128 x 56 + 256 x 224 = 168 x 384 (the launch bound's)
constexpr int kConsumerRegs = 224;

struct Params {
  bf16* out;                 // [S, H, D]
  float* lse;                // [H, S]
  const bf16* q;             // [S, H, D]
  const bf16* k;             // [S, Hkv, D]
  const bf16* v;             // [S, Hkv, D]
  const int32_t* doc_start;  // [S]
  int S, H, Hkv, group;
  float scale_log2;          // scale * log2(e)
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

template <int D, int BC, int NS>
__global__ void __launch_bounds__(kThreads, 1) hopper_attention_forward_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<D, BC, NS>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  unsigned char* smem = smem_raw + (base - raw);
  int* s_doc = reinterpret_cast<int*>(smem + T::doc_off);
  int* s_red = reinterpret_cast<int*>(smem + T::red_off);
  const uint32_t full_bar = base + T::bar_off, empty_bar = full_bar + NS * 8;

  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = tid / 32, lane = tid % 32;
  const int S = p.S;
  const int qb = int(gridDim.x) - 1 - int(blockIdx.x);  // heaviest query blocks first
  const int h = blockIdx.y, hk = h / p.group;
  const int q0 = qb * kBR;
  const int64_t q_row = int64_t(p.H) * D, kv_row = int64_t(p.Hkv) * D;

  // The block's row document starts (kIntMax for rows past S: they see nothing), their per-warp
  // min / max, and the barriers.
  if (tid < kBR) {
    const int i = q0 + tid;
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
      mbar_init(full_bar + 8 * s, 128);  // every producer thread, once its copies landed
      mbar_init(empty_bar + 8 * s, 8);   // every consumer warp, once done with the stage
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int cta_lo = max(min(min(s_red[0], s_red[1]), min(s_red[2], s_red[3])), 0);
  const int q_last = min(q0 + kBR - 1, S - 1);  // the block's last visible key
  const int kb_lo = cta_lo / BC, kb_hi = q_last / BC;
  const int n_blocks = kb_hi - kb_lo + 1;  // >= 1: every row sees at least itself (doc_start[i] <= i)

  if (wg == 0) {
    // ---------------- producer ----------------
    setmaxnreg_dec<kProducerRegs>();
    const bf16* kbase = p.k + int64_t(hk) * D;
    const bf16* vbase = p.v + int64_t(hk) * D;
    for (int it = 0; it < n_blocks; ++it) {
      const int s = it % NS, round = it / NS;
      mbar_wait(empty_bar + 8 * s, (round & 1) ^ 1);
      const int k0 = (kb_lo + it) * BC;
      const uint32_t sk = base + T::q_bytes + s * T::stage_bytes, sv = sk + T::kv_bytes;
      load_tile<D>(sk, BC, kbase + k0 * kv_row, kv_row, S - k0, wtid, 128);
      load_tile<D>(sv, BC, vbase + k0 * kv_row, kv_row, S - k0, wtid, 128);
      cp_async_commit();
      if (it > 0) {
        cp_async_wait<1>();  // this thread's copies of block it - 1 landed
        fence_proxy_async();
        mbar_arrive(full_bar + 8 * ((it - 1) % NS));
      }
    }
    if (n_blocks > 0) {  // (always, unless doc_start breaks doc_start[i] <= i)
      cp_async_wait<0>();
      fence_proxy_async();
      mbar_arrive(full_bar + 8 * ((n_blocks - 1) % NS));
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1, wi = wtid / 32, g = lane / 4, t = lane % 4;
  const int r0 = q0 + 64 * c;  // the warpgroup's first row
  const uint32_t sq = base + c * T::q_wg_bytes;
  load_tile<D>(sq, 64, p.q + (r0 < S ? int64_t(r0) * q_row : 0) + int64_t(h) * D, q_row, S - r0, wtid, 128);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  named_barrier_sync(1 + c, 128);

  const bool active = r0 < S;
  const int wlo_min = min(s_red[2 * c], s_red[2 * c + 1]), wlo_max = max(s_red[4 + 2 * c], s_red[5 + 2 * c]);
  const int wrow_max = min(r0 + 63, S - 1);  // the warpgroup's last visible key
  const int rowA = r0 + 16 * wi + g;          // this thread's rows: rowA and rowA + 8
  const int lo[2] = {s_doc[64 * c + 16 * wi + g], s_doc[64 * c + 16 * wi + g + 8]};

  float o[T::kHalves][32];
#pragma unroll
  for (int hh = 0; hh < T::kHalves; ++hh)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[hh][i] = 0.f;
  float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.f, 0.f};

  for (int it = 0; it < n_blocks; ++it) {
    const int s = it % NS, round = it / NS;
    const int ks = (kb_lo + it) * BC, ke = ks + BC - 1;
    mbar_wait(full_bar + 8 * s, round & 1);
    if (active && ke >= wlo_min && ks <= wrow_max) {
      const uint32_t sk = base + T::q_bytes + s * T::stage_bytes, sv = sk + T::kv_bytes;
      // S = Q K^T (64 x BC).
      float sc[BC / 2];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint64_t da = make_desc_sw128(sq + (kk / 4) * (64 * 128) + (kk % 4) * 32, 16, 1024);
        const uint64_t db = make_desc_sw128(sk + (kk / 4) * (BC * 128) + (kk % 4) * 32, 16, 1024);
        wgmma_s<BC>(sc, da, db, kk > 0 ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(sc);

      // Online softmax (log2 domain); no element masked when every row's document starts at or
      // before ks, every row is at or after ke and ke < S.
      const bool full = ks >= wlo_max && ke <= r0 && ke < S;
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int n = 0; n < BC / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sc[4 * n + e] * p.scale_log2;
          if (!full) {
            const int col = ks + 8 * n + 2 * t + (e & 1), row = rowA + 8 * (e / 2);
            if (col < lo[e / 2] || col > row || col >= S) x = kNegInf;
          }
          sc[4 * n + e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
        const float m_new = fmaxf(m_run[hf], mx[hf]);
        const float b = m_new == kNegInf ? 0.f : m_new;  // -inf - (-inf) would be NaN
        const float alpha = fast_exp2(m_run[hf] - b);
        m_run[hf] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int n = 0; n < BC / 8; ++n) {
          sc[4 * n + 2 * hf] = fast_exp2(sc[4 * n + 2 * hf] - b);
          sc[4 * n + 2 * hf + 1] = fast_exp2(sc[4 * n + 2 * hf + 1] - b);
          rs += sc[4 * n + 2 * hf] + sc[4 * n + 2 * hf + 1];
        }
        l_run[hf] = l_run[hf] * alpha + rs;  // this thread's columns; summed over the quad at the end
#pragma unroll
        for (int hh = 0; hh < T::kHalves; ++hh)
#pragma unroll
          for (int n = 0; n < 8; ++n) {
            o[hh][4 * n + 2 * hf] *= alpha;
            o[hh][4 * n + 2 * hf + 1] *= alpha;
          }
      }

      // O += P V: k16 step kk covers keys 16kk..16kk+15, the S chunks 2kk and 2kk + 1.
      uint32_t pa[BC / 16][4];
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk) {
        pa[kk][0] = pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
      }
#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(o[hh]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
        for (int hh = 0; hh < T::kHalves; ++hh) {
          const uint64_t db = make_desc_sw128(sv + hh * (BC * 128) + kk * (16 * 128), 1024, 1024);
          wgmma_rs_m64n64k16_tb(o[hh], pa[kk], db, 1);
        }
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int hh = 0; hh < T::kHalves; ++hh) fence_regs(o[hh]);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar + 8 * s);  // this warp is done with the stage
  }

  // Epilogue: normalise, write out (bf16) and lse (natural log).
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = l_run[hf];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int i = rowA + 8 * hf;
    if (i >= S) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    bf16* dst = p.out + int64_t(i) * q_row + int64_t(h) * D + 2 * t;
#pragma unroll
    for (int hh = 0; hh < T::kHalves; ++hh)
#pragma unroll
      for (int n = 0; n < 8; ++n)
        *reinterpret_cast<uint32_t*>(dst + 64 * hh + 8 * n) =
            pack_bf16(o[hh][4 * n + 2 * hf] * inv, o[hh][4 * n + 2 * hf + 1] * inv);
    if (t == 0) p.lse[int64_t(h) * S + i] = l > 0.f ? (m_run[hf] + __log2f(l)) * kLn2 : kNegInf;
  }
#else
  __trap();  // built only for sm_90a; the host side refuses other devices
#endif
}

template <int D>
void launch(const Params& p, cudaStream_t stream) {
  constexpr int BC = 128, NS = 2;
  using T = Tile<D, BC, NS>;
  auto kernel = hopper_attention_forward_kernel<D, BC, NS>;
  // Every launch, as attention_forward does: the attribute belongs to the current device.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(T::smem_bytes)));
  const dim3 grid(static_cast<unsigned>((p.S + kBR - 1) / kBR), static_cast<unsigned>(p.H));
  kernel<<<grid, kThreads, T::smem_bytes, stream>>>(p);
  CUDA_CHECK_LAUNCH("hopper_attention_forward");
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

void hopper_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                              const __nv_bfloat16* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv,
                              int64_t d, double scale, cudaStream_t stream) {
  const char* op = "cuda::hopper_attention_forward";
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
  if (d == 128) hopper::launch<128>(p, stream);
  else hopper::launch<64>(p, stream);
}

}  // namespace ulysses::cuda
