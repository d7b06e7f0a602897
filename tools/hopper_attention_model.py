#!/usr/bin/env python3
"""A numpy model of src/backend/cuda/hopper_attention_forward.cu (the Hopper wgmma forward), for
checking its index arithmetic on a machine without a GPU. Not a test of the CUDA source: the model
transcribes the kernel's index expressions (load_tile's swizzled addressing, the descriptors' start
addresses and k-steps, the S accumulator -> P register-A mapping, masking and block skipping, the
online softmax per thread with quad shuffles, the epilogue), reads the wgmma operands back through
the PTX ISA's canonical 128-byte-swizzle layouts (K-major for Q and K; MN-major, one 64-wide atom,
for V) and compares with a float64 reference. A second part interleaves the producer and the 8
consumer warps at random over the full/empty mbarrier protocol (parity waits) and checks that no
stage is read before its block or overwritten while in use, and that nothing deadlocks.
All three kernel variants: the numeric part runs variant 2's order too (O += P_{t-1} V_{t-1}, then
the rescale by block t's alpha; its visible block range against the per-block test), and variant 3's
(variant 2's, with K and V written as a TMA box load with the 128-byte swizzle writes them: by the
address bits, rows past S zero), and a third part steps variant 2's consumers turn by turn over the
mbarriers and the two scheduling (named) barriers: no stale read, no early overwrite, no deadlock,
no arrival left over, GEMMs issued in ping-pong order (and the deadlock 2 stages would have, which is
why variant 2 has 3); then the same for variant 3's producer (one arrive.expect_tx per stage, the
loads completing their bytes in any order), which has no such deadlock.
What it cannot check: the hardware's reading of the descriptors, the proxy fences, timing.
  python3 tools/hopper_attention_model.py [seed]     (a few seconds)
"""
import random
import sys

import numpy as np
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)

def bf16(x):
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)

BR, BC = 128, 128

def sw128(r, c):
    return r * 128 + ((c ^ (r & 7)) << 4)

def load_tile(smem, dst, rows, D, src, valid):
    # src: [rows_avail, D] float (bf16 values); rows >= valid zero
    CH = D // 8
    for c in range(rows * CH):
        r, cc = c // CH, c % CH
        a = dst + (cc // 8) * rows * 128 + sw128(r, cc % 8)
        if r < valid:
            smem[a // 2: a // 2 + 8] = src[r, cc * 8: cc * 8 + 8]
        else:
            smem[a // 2: a // 2 + 8] = 0

def swz(addr):  # 128B swizzle on byte addresses: bits [4:6] ^= bits [7:9]
    return addr ^ (((addr >> 7) & 7) << 4)

def tma_tile(smem, dst, rows, D, src, valid):
    # Variant 3: per 64-column half hh, a TMA box {64 columns, 1 head, rows} at dst + hh * rows * 128,
    # CU_TENSOR_MAP_SWIZZLE_128B: box element (row r, column x) at the swizzled address of
    # r * 128 + 2 x (dst 1024-byte aligned); rows past the tensor (>= valid) filled with zeros.
    assert dst % 1024 == 0
    for hh in range(D // 64):
        for r in range(rows):
            for x in range(64):
                a = swz(dst + hh * rows * 128 + r * 128 + 2 * x)
                smem[a // 2] = src[r, 64 * hh + x] if r < valid else 0

def read_kmajor(smem, start, sbo, rows, k=16):
    # K-major SW128: element (row, kk) at start + (row//8)*SBO + (row%8)*128 + 2*kk, then swizzled
    m = np.zeros((rows, k), np.float32)
    for r in range(rows):
        for kk in range(k):
            a = start + (r // 8) * sbo + (r % 8) * 128 + 2 * kk
            m[r, kk] = smem[swz(a) // 2]
    return m

def read_mnmajor(smem, start, sbo, n, k=16):
    # MN-major SW128, n <= 64 (one atom across N): element (kk, nn) at start + (kk//8)*SBO + (kk%8)*128 + 2*nn
    assert n <= 64
    m = np.zeros((k, n), np.float32)
    for kk in range(k):
        for nn in range(n):
            a = start + (kk // 8) * sbo + (kk % 8) * 128 + 2 * nn
            m[kk, nn] = smem[swz(a) // 2]
    return m

def acc_to_regs(Dm, N):  # Dm [64, N] -> regs[warp][lane][N/2]
    regs = np.zeros((4, 32, N // 2), np.float32)
    for w in range(4):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i in range(N // 8):
                for e in range(4):
                    regs[w, lane, 4 * i + e] = Dm[16 * w + g + 8 * (e // 2), 8 * i + 2 * t + (e & 1)]
    return regs

def regs_to_acc(regs, N):
    Dm = np.zeros((64, N), np.float32)
    for w in range(4):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i in range(N // 8):
                for e in range(4):
                    Dm[16 * w + g + 8 * (e // 2), 8 * i + 2 * t + (e & 1)] = regs[w, lane, 4 * i + e]
    return Dm

def rega_to_A(pa):  # pa[warp][lane][4][2] (lo, hi) -> A [64, 16]
    A = np.zeros((64, 16), np.float32)
    for w in range(4):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for r in range(4):
                row = 16 * w + g + 8 * (r & 1)
                col = 2 * t + 8 * (r >> 1)
                A[row, col], A[row, col + 1] = pa[w, lane, r, 0], pa[w, lane, r, 1]
    return A

def kernel(q, k, v, doc, S, H, Hkv, D, scale, variant=1):
    out = np.full((S, H, D), np.nan, np.float32)
    lse = np.full((H, S), np.nan, np.float32)
    group = H // Hkv
    scale_log2 = np.float32(scale * 1.4426950408889634)
    halves = D // 64
    q_wg_bytes = 64 * D * 2; q_bytes = 2 * q_wg_bytes; kv_bytes = BC * D * 2; stage_bytes = 2 * kv_bytes
    NS = 2 if variant == 1 else 3
    nblk = (S + BR - 1) // BR
    for bx in range(nblk):
        qb = nblk - 1 - bx
        for h in range(H):
            hk = h // group
            q0 = qb * BR
            smem = np.zeros((q_bytes + NS * stage_bytes) // 2, np.float32)
            sdoc = [doc[q0 + i] if q0 + i < S else 2**31 - 1 for i in range(BR)]
            red_lo = [min(sdoc[32 * w: 32 * w + 32]) for w in range(4)]
            red_hi = [max(sdoc[32 * w: 32 * w + 32]) for w in range(4)]
            cta_lo = max(min(red_lo), 0)
            q_last = min(q0 + BR - 1, S - 1)
            kb_lo, kb_hi = cta_lo // BC, q_last // BC
            n_blocks = kb_hi - kb_lo + 1
            # consumers' Q
            for c in range(2):
                r0 = q0 + 64 * c
                src = q[r0:, h, :] if r0 < S else np.zeros((0, D), np.float32)
                load_tile(smem, c * q_wg_bytes, 64, D, src, S - r0)
            state = []
            for c in range(2):
                r0 = q0 + 64 * c
                st = dict(o=[np.zeros((4, 32, 32), np.float32) for _ in range(halves)],
                          m=np.full((4, 32, 2), -np.inf, np.float32), l=np.zeros((4, 32, 2), np.float32),
                          pa=None, sv_prev=None)
                # variant 2: the visible range a .. a + n_vis - 1, as the kernel computes it
                wlo_min = min(red_lo[2 * c], red_lo[2 * c + 1]); wrow_max = min(r0 + 63, S - 1)
                a, n_vis = n_blocks, 0
                if r0 < S:
                    first = max(kb_lo, wlo_min // BC); last = min(kb_lo + n_blocks - 1, wrow_max // BC)
                    a, n_vis = first - kb_lo, max(last - first + 1, 0)
                st['range'] = (a, n_vis)
                state.append(st)
            for it in range(n_blocks):
                s = it % NS
                k0 = (kb_lo + it) * BC
                sk = q_bytes + s * stage_bytes; sv = sk + kv_bytes
                kv_load = tma_tile if variant == 3 else load_tile
                kv_load(smem, sk, BC, D, k[k0:, hk, :] if k0 < S else np.zeros((0, D)), S - k0)
                kv_load(smem, sv, BC, D, v[k0:, hk, :] if k0 < S else np.zeros((0, D)), S - k0)
                for c in range(2):
                    st = state[c]
                    r0 = q0 + 64 * c
                    active = r0 < S
                    wlo_min = min(red_lo[2 * c], red_lo[2 * c + 1]); wlo_max = max(red_hi[2 * c], red_hi[2 * c + 1])
                    wrow_max = min(r0 + 63, S - 1)
                    ks, ke = k0, k0 + BC - 1
                    sees = active and ke >= wlo_min and ks <= wrow_max
                    if variant >= 2:
                        a, n_vis = st['range']
                        assert sees == (a <= it < a + n_vis), "visible range differs from sees()"
                    if not sees:
                        continue
                    sq = c * q_wg_bytes
                    Sacc = np.zeros((64, BC), np.float32)
                    for kk in range(D // 16):
                        A = read_kmajor(smem, sq + (kk // 4) * (64 * 128) + (kk % 4) * 32, 1024, 64)
                        B = read_kmajor(smem, sk + (kk // 4) * (BC * 128) + (kk % 4) * 32, 1024, BC)
                        Sacc = (Sacc if kk > 0 else 0) + A @ B.T
                    sc = acc_to_regs(Sacc, BC)
                    full = ks >= wlo_max and ke <= r0 and ke < S
                    pa = np.zeros((4, 32, BC // 16, 4, 2), np.float32)
                    alphas = np.ones((4, 32, 2), np.float32)
                    for w in range(4):
                        mx_q = np.full((32, 2), -np.inf, np.float32)
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            rowA = r0 + 16 * w + g
                            lo = [sdoc[64 * c + 16 * w + g], sdoc[64 * c + 16 * w + g + 8]]
                            for n in range(BC // 8):
                                for e in range(4):
                                    x = sc[w, lane, 4 * n + e]  # raw: the max before the scale
                                    if not full:
                                        col = ks + 8 * n + 2 * t + (e & 1); row = rowA + 8 * (e // 2)
                                        if col < lo[e // 2] or col > row or col >= S:
                                            x = -np.inf
                                    sc[w, lane, 4 * n + e] = x
                                    mx_q[lane, e // 2] = max(mx_q[lane, e // 2], x)
                        # quad shuffles (xor 1, 2)
                        mx = np.zeros((32, 2), np.float32)
                        for lane in range(32):
                            base = lane & ~3
                            mx[lane] = mx_q[base:base + 4].max(axis=0)
                        for lane in range(32):
                            for hf in range(2):
                                # the running max moves only past a slack of 8 (P <= 2^8; alpha 1 otherwise)
                                m_blk = np.float32(mx[lane, hf] * scale_log2)
                                grow = m_blk > st['m'][w, lane, hf] + 8
                                m_new = m_blk if grow else st['m'][w, lane, hf]
                                b = 0.0 if m_new == -np.inf else m_new
                                alpha = np.exp2(st['m'][w, lane, hf] - b) if grow else np.float32(1)
                                st['m'][w, lane, hf] = m_new
                                rs = 0.0
                                for n in range(BC // 8):
                                    for j in (0, 1):
                                        val = np.exp2(np.float32(sc[w, lane, 4 * n + 2 * hf + j] * scale_log2 - b))
                                        sc[w, lane, 4 * n + 2 * hf + j] = val
                                        rs += val
                                st['l'][w, lane, hf] = st['l'][w, lane, hf] * alpha + rs
                                if variant >= 2 and st['pa'] is not None:  # P_{t-1} V_{t-1} lands first
                                    alphas[w, lane, hf] = alpha
                                    continue
                                for hh in range(halves):
                                    for n in range(8):
                                        st['o'][hh][w, lane, 4 * n + 2 * hf] *= alpha
                                        st['o'][hh][w, lane, 4 * n + 2 * hf + 1] *= alpha
                            for kk in range(BC // 16):
                                x = sc[w, lane]
                                pa[w, lane, kk, 0] = bf16([x[8 * kk + 0], x[8 * kk + 1]])
                                pa[w, lane, kk, 1] = bf16([x[8 * kk + 2], x[8 * kk + 3]])
                                pa[w, lane, kk, 2] = bf16([x[8 * kk + 4], x[8 * kk + 5]])
                                pa[w, lane, kk, 3] = bf16([x[8 * kk + 6], x[8 * kk + 7]])
                    if variant == 1:
                        pv(st, pa, sv, smem, halves)
                    else:  # variants 2, 3: O += P_{t-1} V_{t-1} (stage t - 1 still holds it), then O *= alpha_t; P_t kept
                        if st['pa'] is not None:
                            pv(st, st['pa'], st['sv_prev'], smem, halves)
                            for hh in range(halves):
                                for n in range(8):
                                    for hf in range(2):
                                        st['o'][hh][:, :, 4 * n + 2 * hf] *= alphas[:, :, hf]
                                        st['o'][hh][:, :, 4 * n + 2 * hf + 1] *= alphas[:, :, hf]
                        st['pa'], st['sv_prev'] = pa, sv
                        if it == st['range'][0] + st['range'][1] - 1:  # the last turn's P V
                            pv(st, pa, sv, smem, halves)
                            st['pa'] = None
            # epilogue
            for c in range(2):
                st = state[c]; r0 = q0 + 64 * c
                for w in range(4):
                    for lane in range(32):
                        g, t = lane // 4, lane % 4
                        rowA = r0 + 16 * w + g
                        for hf in range(2):
                            base = lane & ~3
                            l = st['l'][w, base:base + 4, hf].sum()
                            i = rowA + 8 * hf
                            if i >= S:
                                continue
                            inv = 1.0 / l if l > 0 else 0.0
                            for hh in range(halves):
                                for n in range(8):
                                    col = 64 * hh + 8 * n + 2 * t
                                    out[i, h, col:col + 2] = bf16([st['o'][hh][w, lane, 4 * n + 2 * hf] * inv,
                                                                  st['o'][hh][w, lane, 4 * n + 2 * hf + 1] * inv])
                            if t == 0:
                                lse[h, i] = (st['m'][w, lane, hf] + np.log2(l)) * np.log(2.0) if l > 0 else -np.inf
    return out, lse

def pv(st, pa, sv, smem, halves):
    for kk in range(BC // 16):
        A = rega_to_A(pa[:, :, kk])
        for hh in range(halves):
            Bv = read_mnmajor(smem, sv + hh * (BC * 128) + kk * (16 * 128), 1024, 64)
            Om = regs_to_acc(st['o'][hh], 64) + A @ Bv
            st['o'][hh] = acc_to_regs(Om, 64)

def reference(q, k, v, doc, S, H, Hkv, D, scale):
    out = np.zeros((S, H, D)); lse = np.zeros((H, S))
    for h in range(H):
        hk = h // (H // Hkv)
        s = (q[:, h, :].astype(np.float64) @ k[:, hk, :].T.astype(np.float64)) * scale
        for i in range(S):
            row = s[i].copy()
            row[: doc[i]] = -np.inf; row[i + 1:] = -np.inf
            m = row.max(); p = np.exp(row - m); l = p.sum()
            out[i, h] = p @ v[:, hk, :] / l
            lse[h, i] = m + np.log(l)
    return out, lse

def doc_of(S, lens):
    d = np.zeros(S, np.int64); pos = 0
    for L in lens:
        st = pos
        for _ in range(L):
            if pos < S: d[pos] = st; pos += 1
    st = pos
    while pos < S: d[pos] = st; pos += 1
    return d

# The TMA box layout is load_tile's (variant 3 loads K and V one way, Q the other).
for D in (64, 128):
    for valid in (0, 1, 7, 64, 127, 128, 300):
        src = bf16(rng.uniform(-1, 1, (min(max(valid, 0), 128), D)))
        a = np.full(BC * D, np.nan, np.float32); b = np.full(BC * D, np.nan, np.float32)
        load_tile(a, 0, BC, D, src, valid); tma_tile(b, 0, BC, D, src, valid)
        assert np.array_equal(a, b), "the TMA box layout differs from load_tile's"
print("TMA 128-byte-swizzled box == load_tile's layout (d 64, 128; rows past S zero)")

for variant in (1, 2, 3):
  for (S, H, Hkv, D, lens) in [(1, 1, 1, 64, []), (7, 2, 1, 64, [3]), (129, 2, 1, 128, [5, 1, 60]),
                               (300, 2, 2, 64, [100, 1, 70]), (260, 1, 1, 128, [])]:
    q = bf16(rng.uniform(-1, 1, (S, H, D))); k = bf16(rng.uniform(-1, 1, (S, Hkv, D))); v = bf16(rng.uniform(-1, 1, (S, Hkv, D)))
    doc = doc_of(S, lens)
    o, l = kernel(q, k, v, doc, S, H, Hkv, D, 1 / np.sqrt(D), variant)
    ro, rl = reference(q, k, v, doc, S, H, Hkv, D, 1 / np.sqrt(D))
    e = np.linalg.norm(o - ro) / np.linalg.norm(ro)
    row = max(np.linalg.norm(o[i, h] - ro[i, h]) / np.linalg.norm(ro[i, h]) for i in range(S) for h in range(H))
    le = np.abs(l - rl).max()
    nan = int(np.isnan(o).sum() + np.isnan(l).sum())
    print(f"v{variant} S={S} H={H} Hkv={Hkv} D={D} docs={len(lens)+1}: out rel {e:.2e}, worst row {row:.2e}, "
          f"lse max abs {le:.2e}, nan {nan}", flush=True)
    assert nan == 0 and e < 1e-2 and row < 2e-2 and le < 1e-4, "the model disagrees with the reference"


class Bar:
    def __init__(s, count): s.count, s.pending, s.phase = count, count, 0  # phase: completed phases
    def arrive(s, n=1):
        s.pending -= n
        assert s.pending >= 0
        if s.pending == 0: s.phase += 1; s.pending = s.count
    def done(s, parity): return (s.phase & 1) != parity  # phase with that parity completed (current phase = s.phase)
# try_wait.parity P returns true iff the current phase parity != P (i.e. phase P completed)
class TxBar(Bar):
    """An mbarrier with a transaction count (variant 3's `full`): a phase completes once its arrivals
    are in and the bytes expected by arrive.expect_tx have landed (complete_tx)."""
    def __init__(s, count): super().__init__(count); s.tx = 0
    def arrive(s, n=1, tx=0):
        s.tx += tx; s.pending -= n
        assert s.pending >= 0
        s._complete()
    def complete_tx(s, b):
        s.tx -= b
        assert s.tx >= 0
        s._complete()
    def _complete(s):
        if s.pending == 0 and s.tx == 0: s.phase += 1; s.pending = s.count
def producer(n_blocks, NS, full, empty, stage_block, landed, readers):
    """The producer warpgroup (both variants): fills stage it % NS with block it once its `empty`
    phase completed, signals block it - 1's `full` after issuing block it (cp.async.wait_group 1)."""
    for it in range(n_blocks):
        s, rnd_ = it % NS, it // NS
        while not empty[s].done((rnd_ & 1) ^ 1): yield
        assert readers[s] == 0, "overwrite while read"
        stage_block[s] = it; landed[s] = False
        yield
        landed[s] = True  # (cp.async lands some time; modelled before the signal)
        if it > 0:
            full[(it - 1) % NS].arrive(128); yield
    full[(n_blocks - 1) % NS].arrive(128)
LOADS = 4  # variant 3, d 128: K and V, two 64-column halves each; one unit of bytes per load
def producer_tma(n_blocks, NS, full, empty, stage_block, landed, readers, inflight, done, g0=0, last=True):
    """Variant 3's producer thread: once stage (g0 + it) % NS is free, arrive.expect_tx on its `full`
    (count 1) and issue the block's TMA loads; nothing waits for them. g0: the ring position of the
    first block (variant 4's ring runs on across blocks); last: the producer ends after these."""
    for it in range(g0, g0 + n_blocks):
        s, rnd_ = it % NS, it // NS
        while not empty[s].done((rnd_ & 1) ^ 1): yield
        assert readers[s] == 0, "overwrite while read"
        stage_block[s] = it; landed[s] = 0
        full[s].arrive(1, tx=LOADS); yield
        for _ in range(LOADS): inflight.append((full, landed, s)); yield
    if last: done.append(True)
def tma_engine(rnd, inflight, done):
    """The copy engine: completes the loads in flight, (barriers, landed counts, index) each, in any
    order; a tile has landed once all its loads did (before the last complete_tx, which may complete
    the phase)."""
    while not (done and not inflight):
        if inflight:
            bars, landed, i = inflight.pop(rnd.randrange(len(inflight)))
            landed[i] += 1
            bars[i].complete_tx(1)
        yield
def interleave(rnd, agents):
    """Steps the agents (generators) in a random order until all end; 'deadlock' if they never do."""
    steps = 0
    while agents:
        a = rnd.choice(agents)
        try: next(a)
        except StopIteration: agents.remove(a)
        steps += 1
        assert steps < 200000, "deadlock"
def run(n_blocks, NS, seed):
    rnd = random.Random(seed)
    full = [Bar(128) for _ in range(NS)]; empty = [Bar(8) for _ in range(NS)]
    stage_block = [None] * NS; landed = [False] * NS; readers = [0] * NS
    def consumer(w):
        for it in range(n_blocks):
            s, rnd_ = it % NS, it // NS
            while not full[s].done(rnd_ & 1): yield
            assert stage_block[s] == it and landed[s], f"warp {w} read stage {s} holding {stage_block[s]}, wanted {it}"
            readers[s] += 1; yield; readers[s] -= 1
            empty[s].arrive(1); yield
    interleave(rnd, [producer(n_blocks, NS, full, empty, stage_block, landed, readers)] +
               [consumer(w) for w in range(8)])
for n in range(1, 9):
    for NS in (2, 3):
        for seed in range(200): run(n, NS, seed)
print("mbarrier protocol: ok (1-8 blocks, 2 and 3 stages, 200 interleavings each)")


class NamedBar:  # bar.sync / bar.arrive with a count of warps (256 threads = 8 warps)
    def __init__(s, count): s.count, s.arrived, s.gen = count, 0, 0
    def arrive(s):
        s.arrived += 1
        if s.arrived == s.count: s.arrived = 0; s.gen += 1  # a sync arriving in generation g waits for gen > g
def run_v2(n_blocks, NS, ranges, seed, tma=False):
    """Variant 2 (tma: variant 3): the consumers' turns (consume_v2), warp by warp, over the full /
    empty mbarriers and the two scheduling barriers. ranges[c] = (a, n_vis) of consumer c."""
    rnd = random.Random(seed)
    full = [TxBar(1) if tma else Bar(128) for _ in range(NS)]; empty = [Bar(8) for _ in range(NS)]
    sched = [NamedBar(8), NamedBar(8)]
    stage_block = [None] * NS; landed = [False] * NS; readers = [0] * NS
    order = []  # (consumer, turn) of every GEMM issue, in issue order (warp 0 of each consumer)
    def consumer(c, w):
        n = n_blocks; a, n_vis = ranges[c]
        if n_vis == 0: a = n + 1
        def wait_full(t):
            s = t % NS
            while not full[s].done((t // NS) & 1): yield
            assert stage_block[s] == t and landed[s] == (LOADS if tma else True), \
                f"consumer {c} warp {w} read stage {s} holding {stage_block[s]}, wanted {t}"
        def turn(t, issue_s, issue_pv):
            if t < n: yield from wait_full(t)
            g = sched[c].gen; sched[c].arrive()
            while sched[c].gen == g: yield
            if issue_s or issue_pv:
                if w == 0: order.append((c, t))
            if issue_s: readers[t % NS] += 1
            if c == 0 or t < n: sched[1 - c].arrive()
            yield
            if issue_pv:
                readers[(t - 1) % NS] -= 1; empty[(t - 1) % NS].arrive(1); yield
            if t < n and not issue_s:
                empty[t % NS].arrive(1); yield
        if c == 1: sched[0].arrive()
        for t in range(n + 1):
            yield from turn(t, a <= t < a + n_vis, a < t <= a + n_vis)
    if tma:
        inflight, done = [], []
        producers = [producer_tma(n_blocks, NS, full, empty, stage_block, landed, readers, inflight, done),
                     tma_engine(rnd, inflight, done)]
    else:
        producers = [producer(n_blocks, NS, full, empty, stage_block, landed, readers)]
    interleave(rnd, producers + [consumer(w // 4, w % 4) for w in range(8)])
    assert all(b.arrived == 0 for b in sched), "scheduling barrier left with arrivals"
    # ping-pong: turns alternate consumer 0, consumer 1 (among turns with GEMMs)
    turns = [(t, c) for c, t in order]
    assert turns == sorted(turns), f"GEMM issues out of turn order: {order}"
# With 2 stages variant 2 deadlocks: the producer signals block t's `full` only once it may start
# block t + 1 (its cp.async group of t has then one behind it), i.e. after block t + 1 - NS was
# released, and variant 2 releases block t - 1 only at turn t, after waiting for block t's `full`:
# NS = 2 waits in a circle. The kernel therefore has 3 stages (static_assert); checked both ways.
def deadlocks(*args):
    try: run_v2(*args)
    except AssertionError as e:
        if str(e) == "deadlock": return True
        raise
    return False
assert deadlocks(3, 2, ((0, 3), (0, 3)), 0), "expected the 2-stage deadlock"
n_cases = 0
for n in range(1, 7):
    for NS in (3, 4):
        for ranges in [((0, n), (0, n)), ((0, n), (n, 0)), ((0, n), (min(1, n - 1), n - min(1, n - 1))),
                       ((n - 1, 1), (0, n)), ((0, max(n - 1, 1)), (0, n))]:
            for seed in range(60): run_v2(n, NS, ranges, seed); n_cases += 1
print(f"variant 2 protocol (turns, scheduling barriers, GEMMs in ping-pong order): ok ({n_cases} interleavings, "
      "1-6 blocks, 3 and 4 stages; 2 stages deadlock, as expected)")

# Variant 3: consume_v2 unchanged, its `full` completed by the TMA bytes rather than by the producer
# one block late, so 2 stages no longer wait in a circle (block t's `full` needs nothing released).
n_cases = 0
for n in range(1, 7):
    for NS in (2, 3):
        for ranges in [((0, n), (0, n)), ((0, n), (n, 0)), ((0, n), (min(1, n - 1), n - min(1, n - 1))),
                       ((n - 1, 1), (0, n)), ((0, max(n - 1, 1)), (0, n))]:
            for seed in range(60): run_v2(n, NS, ranges, seed, tma=True); n_cases += 1
print(f"variant 3 protocol (variant 2's turns over a TMA producer: one arrive.expect_tx per stage, loads "
      f"landing in any order): ok ({n_cases} interleavings, 1-6 blocks, 2 and 3 stages: no deadlock with 2)")

# Variant 4 (persistent): one CTA walks several blocks. The producer thread issues, per block, each
# consumer's Q tile (once that consumer released the previous block's Q: q_empty[c], 4 warp arrivals;
# q_full[c] completes on the bytes) and then the block's K / V into one ring whose position runs on
# across blocks; each consumer waits for its Q, runs variant 2's turns from the ring position g0,
# releases Q once its last S has landed (at once where it sees no key) and goes on to the next block.
QLOADS = 2  # d 128: a consumer's Q tile is two 64-column boxes
def run_v4(blocks, NS, seed, fault=None):
    """blocks: [(n_blocks, ranges)] of one CTA's walk; ranges as run_v2's. fault: "early_q" releases Q
    one turn before the last S, "ring_reset" restarts the consumers' ring position at every block."""
    rnd = random.Random(seed)
    full = [TxBar(1) for _ in range(NS)]; empty = [Bar(8) for _ in range(NS)]
    q_full = [TxBar(1), TxBar(1)]; q_empty = [Bar(4), Bar(4)]
    sched = [NamedBar(8), NamedBar(8)]
    stage_block = [None] * NS; landed = [0] * NS; readers = [0] * NS
    q_block = [None, None]; q_landed = [0, 0]; q_readers = [0, 0]
    inflight, done = [], []
    starts = [sum(n for n, _ in blocks[:j]) for j in range(len(blocks))]  # ring position of each block
    def producer():
        g = 0
        for j, (n, _) in enumerate(blocks):
            for c in (0, 1):
                while not q_empty[c].done((j & 1) ^ 1): yield
                assert q_readers[c] == 0, f"Q of consumer {c} overwritten while an S reads it"
                q_block[c] = j; q_landed[c] = 0
                q_full[c].arrive(1, tx=QLOADS); yield
                for _ in range(QLOADS): inflight.append((q_full, q_landed, c)); yield
            yield from producer_tma(n, NS, full, empty, stage_block, landed, readers, inflight, done, g0=g,
                                    last=j == len(blocks) - 1)
            g += n
    def consumer(c, w):
        for j, (n, ranges) in enumerate(blocks):
            g0 = 0 if fault == "ring_reset" else starts[j]
            a, n_vis = ranges[c]
            if n_vis == 0: a = n + 1
            while not q_full[c].done(j & 1): yield
            assert q_block[c] == j and q_landed[c] == QLOADS, f"consumer {c} warp {w}: Q of block {q_block[c]}, wanted {j}"
            def wait_full(t):
                s = (g0 + t) % NS
                while not full[s].done(((g0 + t) // NS) & 1): yield
                assert stage_block[s] == g0 + t and landed[s] == LOADS, \
                    f"consumer {c} warp {w} read stage {s} holding {stage_block[s]}, wanted {g0 + t}"
            def turn(t, issue_s, issue_pv):
                if t < n: yield from wait_full(t)
                gen = sched[c].gen; sched[c].arrive()
                while sched[c].gen == gen: yield
                if issue_s:
                    readers[(g0 + t) % NS] += 1
                    q_readers[c] += 1
                if c == 0 or t < n: sched[1 - c].arrive()
                yield
                if issue_s: q_readers[c] -= 1  # S landed (wait_group) before the turn's softmax
                if issue_pv:
                    readers[(g0 + t - 1) % NS] -= 1; empty[(g0 + t - 1) % NS].arrive(1); yield
                if t < n and not issue_s:
                    empty[(g0 + t) % NS].arrive(1); yield
            if c == 1: sched[0].arrive()
            released = False
            for t in range(n + 1):
                # q_done: after the last turn that issued an S (or at once with no S at all)
                last_s = a + n_vis - (1 if fault == "early_q" and n_vis > 1 else 0)
                if not released and (n_vis == 0 or t == last_s):
                    q_empty[c].arrive(1); released = True; yield
                yield from turn(t, a <= t < a + n_vis, a < t <= a + n_vis)
            assert released
    interleave(rnd, [producer(), tma_engine(rnd, inflight, done)] + [consumer(w // 4, w % 4) for w in range(8)])
    assert all(b.arrived == 0 for b in sched), "scheduling barrier left with arrivals"

n_cases = 0
rnd_blocks = random.Random(7)
for trial in range(300):
    walk = []
    for _ in range(rnd_blocks.randint(1, 4)):
        n = rnd_blocks.randint(1, 5)
        pick = rnd_blocks.choice([((0, n), (0, n)), ((0, n), (n, 0)), ((0, n), (min(1, n - 1), n - min(1, n - 1))),
                                  ((n - 1, 1), (0, n)), ((0, max(n - 1, 1)), (0, n))])
        walk.append((n, pick))
    for NS in (2, 3):
        run_v4(walk, NS, trial); n_cases += 1
for fault in ("early_q", "ring_reset"):
    caught = 0
    for seed in range(40):
        try: run_v4([(4, ((0, 4), (0, 4))), (3, ((0, 3), (0, 3))), (4, ((1, 3), (0, 4)))], 3, seed, fault)
        except AssertionError: caught += 1
    assert caught > 0, f"the model should catch the {fault} fault"
print(f"variant 4 protocol (persistent: one ring across blocks, Q per consumer by q_full / q_empty): ok "
      f"({n_cases} interleavings of 1-4 blocks of 1-5 key blocks, 2 and 3 stages; Q released before the last S, "
      f"or the ring restarted per block, fail)")
