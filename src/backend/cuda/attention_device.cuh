// Warp-level building blocks of the attention kernels: tensor-core MMA,
// ldmatrix, cp.async, shuffles. The kernel bodies (attention_*_kernel.cuh)
// call only these and thread/block indices through this file, so that the same
// bodies can also be compiled for the host and run by a lane-by-lane emulator
// (define ULY_ATTN_EMULATE and link an implementation of the declarations in
// the #else branch): that is how the index arithmetic was checked on a machine
// without a GPU.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16 inputs and .f32 accumulators;
// g = lane / 4, t = lane % 4; a register holds two bf16, the lower column in the low half):
//   A (16x16, row-major):  a[0] = A[g][2t..2t+1],   a[1] = A[g+8][2t..2t+1],
//                          a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9]
//   B (16x8, "col"):       b[0] = B[2t..2t+1][g],   b[1] = B[2t+8..2t+9][g]
//   C (16x8 fp32):         c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
// ldmatrix.x4: lanes 8m..8m+7 give the row addresses of 8x8 matrix m, which
// lands in register m; lane l receives row l/4, columns 2(l%4)..+1 (with .trans:
// rows 2(l%4)..+1 of column l/4).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) && !defined(ULY_ATTN_EMULATE)

#define ATTN_DEV __device__ __forceinline__

namespace ulysses::cuda::attn {

ATTN_DEV int thread_idx() { return static_cast<int>(threadIdx.x); }
ATTN_DEV int block_x() { return static_cast<int>(blockIdx.x); }
ATTN_DEV int block_y() { return static_cast<int>(blockIdx.y); }
ATTN_DEV int grid_x() { return static_cast<int>(gridDim.x); }
ATTN_DEV void block_sync() { __syncthreads(); }

ATTN_DEV float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
ATTN_DEV int shfl_xor(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

ATTN_DEV uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// p: this lane's row address in shared memory (16-byte aligned).
ATTN_DEV void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
ATTN_DEV void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// c += A * B on one 16x8x16 tile.
ATTN_DEV void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Asynchronous global -> shared copies; visible after cp_async_wait_all() and a barrier.
ATTN_DEV void cp_async16(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}
ATTN_DEV void cp_async4(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}
ATTN_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
ATTN_DEV void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

ATTN_DEV void zero16(void* p) { *reinterpret_cast<uint4*>(p) = make_uint4(0u, 0u, 0u, 0u); }
ATTN_DEV void load16(uint32_t (&r)[4], const void* p) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
}
ATTN_DEV void store_u32(void* p, uint32_t v) { *reinterpret_cast<uint32_t*>(p) = v; }
ATTN_DEV void store_u64(void* p, uint32_t lo, uint32_t hi) { *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi); }
ATTN_DEV void load_f4(float (&r)[4], const float* p) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
}

// 2^x; -inf gives +0.
ATTN_DEV float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// p[0] += a, p[1] += b in one vector reduction (p 8-byte aligned, global).
ATTN_DEV void red_add_f2(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

}  // namespace ulysses::cuda::attn

#else  // host emulation: implemented by the emulator, one fiber per CUDA thread

#define ATTN_DEV inline

namespace ulysses::cuda::attn {

int thread_idx();
int block_x();
int block_y();
int grid_x();
void block_sync();
float shfl_xor(float v, int mask);
int shfl_xor(int v, int mask);
void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p);
void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p);
void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void cp_async16(void* smem_dst, const void* gmem_src);
void cp_async4(void* smem_dst, const void* gmem_src);
void cp_async_commit();
void cp_async_wait_all();
void zero16(void* p);
void load16(uint32_t (&r)[4], const void* p);
void store_u32(void* p, uint32_t v);
void store_u64(void* p, uint32_t lo, uint32_t hi);
void load_f4(float (&r)[4], const float* p);
float fast_exp2(float x);
void red_add_f2(float* p, float a, float b);

}  // namespace ulysses::cuda::attn

#endif

namespace ulysses::cuda::attn {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kIntMax = 2147483647;
constexpr float kNegInf = -INFINITY;

// Two floats -> one register of two bf16 (round to nearest even), `lo` in the low half.
ATTN_DEV uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, sizeof(r));
  return r;
}
// The two bf16 of a register as floats (exact).
ATTN_DEV float bf16_lo(uint32_t r) {
  const uint32_t bits = r << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}
ATTN_DEV float bf16_hi(uint32_t r) {
  const uint32_t bits = r & 0xffff0000u;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

ATTN_DEV int imin(int a, int b) { return a < b ? a : b; }
ATTN_DEV int imax(int a, int b) { return a > b ? a : b; }
ATTN_DEV float fmax2(float a, float b) { return a > b ? a : b; }

// Lane -> row/column offsets of the ldmatrix.x4 row addresses.
// Pattern A: matrices ordered (rows 0-7, cols 0-7), (rows 8-15, cols 0-7),
//   (rows 0-7, cols 8-15), (rows 8-15, cols 8-15): an A fragment of a row-major
//   16x16 tile, or (with .trans) the B fragments of two n-tiles of a [k][n] tile.
// Pattern B: (rows 0-7, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 0-7),
//   (rows 8-15, cols 8-15): the B fragments of two n-tiles of an [n][k] tile, or
//   (with .trans) an A fragment of a tile stored transposed as [k][m].
ATTN_DEV int pat_a_row(int lane) { return lane % 16; }
ATTN_DEV int pat_a_col(int lane) { return (lane / 16) * 8; }
ATTN_DEV int pat_b_row(int lane) { return (lane / 16) * 8 + lane % 8; }
ATTN_DEV int pat_b_col(int lane) { return ((lane / 8) % 2) * 8; }

}  // namespace ulysses::cuda::attn
