// Hopper (sm_90a) building blocks of hopper_attention_forward.cu, as raw PTX: wgmma (warpgroup
// matrix multiply, asynchronous), its shared-memory matrix descriptors, mbarriers, the
// generic-to-async proxy fence, setmaxnreg, named barriers and TMA loads. Device code only, sm_90a only.
//
// wgmma accumulator layout (m64nNk16, fp32 D): warp w of the warpgroup holds rows 16w..16w+15;
// with g = lane / 4, t = lane % 4, registers d[4i + 0..1] = D[16w + g][8i + 2t .. +1] and
// d[4i + 2..3] = D[16w + g + 8][8i + 2t .. +1] (i = 0 .. N/8 - 1): per n8 chunk the m16n8 C layout.
// The register A operand (m64k16 bf16, 4 registers) is, per warp, the m16n8k16 A-fragment layout of
// its 16 rows, so a converted S accumulator is directly the A operand of P V.
#pragma once
#include <cstdint>

#define HOPPER_DEV __device__ __forceinline__

namespace ulysses::cuda::hopper {

HOPPER_DEV uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" of wgmma): bits 0-13 start
// address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4,
// 49-51 base offset (0: every swizzle atom is 1024-byte aligned), 62-63 swizzle (1 = 128-byte).
HOPPER_DEV uint64_t make_desc_sw128(uint32_t saddr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((saddr & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}

// The descriptor of the same form `bytes` past the one of `d` (bytes a multiple of 16): its start-address
// field (bits 0-13, the address >> 4) plus bytes >> 4, which cannot carry out of the field (shared
// addresses stay below 256 KB). The k-steps of a product take their descriptors this way from one
// descriptor per tile: one add before each wgmma instead of rebuilding the whole descriptor from the
// address (an and, a shift, an or and the moves to uniform registers, a dependent chain before each
// wgmma: the backward's consumers spent 44% of their time at 32K issuing products so, Nsight Compute's
// samples, H100, 2026-12-07).
HOPPER_DEV uint64_t desc_plus(uint64_t d, uint32_t bytes) {
  uint32_t lo, hi;
  asm("mov.b64 {%0, %1}, %2;\n" : "=r"(lo), "=r"(hi) : "l"(d));
  lo += bytes >> 4;  // a 32-bit add: the compiler cannot know that a 64-bit one would not carry
  uint64_t r;
  asm("mov.b64 %0, {%1, %2};\n" : "=l"(r) : "r"(lo), "r"(hi));
  return r;
}

HOPPER_DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
HOPPER_DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
HOPPER_DEV void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the asynchronous wgmma
// region (the registers are read and written by the tensor cores between the issue and the wait).
template <int N>
HOPPER_DEV void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Generic-proxy writes to shared memory (cp.async, st.shared) made visible to the async proxy
// (wgmma reads its shared-memory operands through it); by the writing threads, before the barrier.
HOPPER_DEV void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

HOPPER_DEV void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
HOPPER_DEV void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
HOPPER_DEV void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed (parity 1 before the first completion:
// returns at once, the phase "before" the first counts as complete).
HOPPER_DEV void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

HOPPER_DEV void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Counts this warp's threads towards named barrier `id` (of `threads` in all) without waiting.
HOPPER_DEV void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// named_barrier_arrive where `pred`, as a predicated instruction rather than a branch.
HOPPER_DEV void named_barrier_arrive_if(bool pred, int id, int threads) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.arrive %1, %2;\n}\n" ::"r"(int(pred)), "r"(id),
               "r"(threads)
               : "memory");
}

// named_barrier_sync where `pred` (warp-uniform), predicated likewise.
HOPPER_DEV void named_barrier_sync_if(bool pred, int id, int threads) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.sync %1, %2;\n}\n" ::"r"(int(pred)), "r"(id),
               "r"(threads)
               : "memory");
}

template <int R>
HOPPER_DEV void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
HOPPER_DEV void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

HOPPER_DEV void cp_async16(uint32_t saddr, const void* gsrc) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gsrc) : "memory");
}
HOPPER_DEV void st_shared_zero16(uint32_t saddr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(saddr), "r"(0) : "memory");
}
HOPPER_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
HOPPER_DEV void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- TMA (cp.async.bulk.tensor), variant 3's producer ----
// `tmap`: the generic address of a CUtensorMap kernel parameter (const __grid_constant__).
HOPPER_DEV void prefetch_tensormap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}
// One arrival on `bar` that also adds `bytes` to the transactions its current phase waits for.
HOPPER_DEV void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// The box of the 3-D tensor map at coordinates {c0, c1, c2} (innermost first) into shared memory at
// `dst`, completing its bytes (the whole box's, out-of-bounds elements included: they land as zeros)
// on mbarrier `bar`.
HOPPER_DEV void tma_load_3d(uint32_t dst, const void* tmap, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// A tile of `rows` rows x D columns of one head (rows row0 .., head `head` of the tensor map's
// [rows, heads, D] bf16 tensor) into shared memory at `dst`: one TMA load per 64-column half, half hh
// at dst + hh * rows * 128 (the 128-byte-swizzled layout of the kernels' tiles), all completing on `bar`.
template <int D>
HOPPER_DEV void tma_load_tile(uint32_t dst, int rows, const void* tmap, int head, int row0, uint32_t bar) {
#pragma unroll
  for (int hh = 0; hh < D / 64; ++hh) tma_load_3d(dst + hh * (rows * 128), tmap, 64 * hh, head, row0, bar);
}

// The shared-memory box at `src` added (fp32 .add) into the 3-D tensor map's box at {c0, c1, c2}
// (innermost first; out-of-bounds elements are not written), as one bulk async-group operation of
// this thread (bulk_commit_group, then bulk_wait_group_read / bulk_wait_group).
HOPPER_DEV void tma_reduce_add_3d(const void* tmap, int c0, int c1, int c2, uint32_t src) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(c0), "r"(c1), "r"(c2), "r"(src)
      : "memory");
}
HOPPER_DEV void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups still read their shared-memory source.
template <int N>
HOPPER_DEV void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Until at most N of this thread's bulk groups are incomplete (their global writes done).
template <int N>
HOPPER_DEV void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// The same three for one thread picked by `pred`, without a branch (predicated in the PTX): for code
// that runs while wgmmas are in flight, where a divergent branch makes ptxas serialize them (C7518).
HOPPER_DEV void tma_reduce_add_3d_if(bool pred, const void* tmap, int c0, int c1, int c2, uint32_t src) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.u32 p, %5, 0;\n"
      "@p cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n}\n" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(c0), "r"(c1), "r"(c2), "r"(src), "r"(static_cast<uint32_t>(pred))
      : "memory");
}
HOPPER_DEV void bulk_commit_group_if(bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %0, 0;\n@p cp.async.bulk.commit_group;\n}\n" ::"r"(
                   static_cast<uint32_t>(pred))
               : "memory");
}
template <int N>
HOPPER_DEV void bulk_wait_group_read_if(bool pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %1, 0;\n@p cp.async.bulk.wait_group.read %0;\n}\n" ::"n"(N),
               "r"(static_cast<uint32_t>(pred))
               : "memory");
}
HOPPER_DEV void st_shared_v2_f32(uint32_t saddr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(saddr), "f"(x), "f"(y) : "memory");
}
// 16 bytes to / from shared memory at a shared address (volatile: ordered as written).
HOPPER_DEV void st_shared_v4(uint32_t saddr, const uint32_t (&r)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
HOPPER_DEV void st_shared_v4(uint32_t saddr, float x, float y, float z, float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
HOPPER_DEV void ld_shared_v4(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr)
               : "memory");
}
HOPPER_DEV void ld_shared_v4(float (&r)[4], uint32_t saddr) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3])
               : "r"(saddr)
               : "memory");
}

// ---- wgmma wrappers (operand lists generated; bf16 inputs, fp32 accumulators) ----
// d (+)= A * B, m64n64k16: A [64 x 16] and B [64 x 16] (both K-major) from shared-memory
// descriptors; scale_d = 0 overwrites d.
HOPPER_DEV void wgmma_ss_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A * B, m64n64k16: A [64 x 16] from registers (the m16n8k16 A-fragment layout, per warp its
// 16 rows), B from a shared-memory descriptor: TB = 1 an MN-major (N-contiguous) [16 x 64] tile, TB = 0
// a K-major [64 x 16] one; scale_d = 0 overwrites d.
template <int TB>
HOPPER_DEV void wgmma_rs_m64n64k16_b(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
}
HOPPER_DEV void wgmma_rs_m64n64k16_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  wgmma_rs_m64n64k16_b<1>(d, a, desc_b, scale_d);
}
HOPPER_DEV void wgmma_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  wgmma_rs_m64n64k16_b<0>(d, a, desc_b, scale_d);
}

// d (+)= A * B, m64n128k16: A [64 x 16] and B [128 x 16] (both K-major) from shared-memory
// descriptors; scale_d = 0 overwrites d.
HOPPER_DEV void wgmma_ss_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d += A * B, m64n128k16: A [64 x 16] from registers (the m16n8k16 A-fragment layout, per warp
// its 16 rows), B [16 x 128] from a shared-memory descriptor of an MN-major (N-contiguous) tile;
// scale_d = 0 overwrites d.
HOPPER_DEV void wgmma_rs_m64n128k16_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// ---- added for hopper_attention_backward.cu ----
// d (+)= A * B, m64n64k16, both from shared-memory descriptors of MN-major tiles (transposed: A
// stored K rows x M contiguous, B stored K rows x N contiguous); scale_d = 0 overwrites d.
HOPPER_DEV void wgmma_ss_m64n64k16_ta_tb(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// 4-byte cp.async into shared memory (address from smem_u32).
HOPPER_DEV void cp_async4(uint32_t saddr, const void* gsrc) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(gsrc) : "memory");
}

// p[0..1] += {a, b} in one vector reduction (global, 8-byte aligned).
HOPPER_DEV void red_add_v2(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// A counter other CTAs publish to (ordering the deterministic backward's dQ reductions): an acquiring
// load, a releasing increment, and the fence that orders this thread's generic-proxy accesses of
// global memory with its asynchronous-proxy ones (the TMA reductions) on either side.
HOPPER_DEV int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
HOPPER_DEV void red_release_gpu_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
HOPPER_DEV void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

}  // namespace ulysses::cuda::hopper
