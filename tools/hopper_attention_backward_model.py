#!/usr/bin/env python3
"""A numpy model of src/backend/cuda/hopper_attention_backward.cu (the Hopper wgmma backward), for
checking its index arithmetic on a machine without a GPU, as tools/hopper_attention_model.py does for
the forward (whose helpers it reuses: swizzled tile stores, the canonical K-major and MN-major
128-byte-swizzle reads, the accumulator and register-A layouts). It transcribes the kernel's pair walk
(qb range from sufmin, qbmin skips), the tile addresses and descriptor start addresses and k-steps,
the S^T / dP^T accumulator -> P^T / dS^T register-A mapping, masking, the dS^T stores into the shared
tile and its transposed read as dQ's A operand, the dq atomics' and the epilogue's indices, and
compares dq, dk, dv with a float64 reference. What it cannot check: the hardware's reading of the
descriptors (the transposed-A form included), the mbarrier protocol (the forward's model covers the
same ring), the proxy fences, timing.
  python3 tools/hopper_attention_backward_model.py     (about a minute)
"""
import os

import numpy as np

# The forward model's definitions (everything before its first check loop), without running its checks.
_src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hopper_attention_model.py")).read()
_ns = {"__name__": "hopper_attention_model_helpers"}
exec(compile(_src[: _src.index("\nfor (S, H, Hkv, D, lens) in")].replace("int(sys.argv[1]) if len(sys.argv) > 1 else 0", "0"),
             "hopper_attention_model.py", "exec"), _ns)
bf16, sw128, load_tile, swz = _ns["bf16"], _ns["sw128"], _ns["load_tile"], _ns["swz"]
read_kmajor, read_mnmajor, acc_to_regs, rega_to_A = (_ns["read_kmajor"], _ns["read_mnmajor"], _ns["acc_to_regs"],
                                                     _ns["rega_to_A"])
doc_of = _ns["doc_of"]
rng = np.random.default_rng(1)
BR, BC = 64, 128
INT_MAX = 2**31 - 1


def kernel(q, k, v, dout, lse, dsum, doc, S, H, Hkv, D, scale):
    group, nqb = H // Hkv, (S + BR - 1) // BR
    qbmin = [min(doc[b * BR: min(S, (b + 1) * BR)]) for b in range(nqb)]
    sufmin = [min(qbmin[b:]) for b in range(nqb)]
    halves = D // 64
    kv_wg = 64 * D * 2
    k_off, v_off = 0, 2 * kv_wg
    st_off = v_off + 2 * kv_wg
    qt = BR * D * 2
    ds_off = st_off + 2 * qt  # one stage modelled
    dq_acc = np.zeros((S, H, D), np.float64)
    dk_out = np.full((S, Hkv, D), np.nan)
    dv_out = np.full((S, Hkv, D), np.nan)
    scale_log2 = np.float32(scale * 1.4426950408889634)
    for hk in range(Hkv):
        for kb in range((S + BC - 1) // BC):
            smem = np.zeros((ds_off + 2 * BC * BR * 2) // 2, np.float32)
            k0 = kb * BC
            k_last = min(k0 + BC - 1, S - 1)
            for c in range(2):
                kc = k0 + 64 * c
                src_k = k[kc:, hk, :] if kc < S else np.zeros((0, D))
                src_v = v[kc:, hk, :] if kc < S else np.zeros((0, D))
                load_tile(smem, k_off + c * kv_wg, 64, D, src_k, S - kc)
                load_tile(smem, v_off + c * kv_wg, 64, D, src_v, S - kc)
            qb_begin = k0 // BR
            lo, hi = qb_begin, nqb
            while lo < hi:
                mid = (lo + hi) // 2
                if sufmin[mid] > k_last: hi = mid
                else: lo = mid + 1
            nq = max(lo - qb_begin, 0)
            dk = [[np.zeros((64, 64), np.float32) for _ in range(halves)] for _ in range(2)]
            dv = [[np.zeros((64, 64), np.float32) for _ in range(halves)] for _ in range(2)]
            n = 0
            for it in range(group * nq):
                h, qb = hk * group + it // nq, qb_begin + it % nq
                if qbmin[qb] > k_last: continue
                buf = n & 1; n += 1
                q0 = qb * BR
                sq, so = st_off, st_off + qt
                load_tile(smem, sq, BR, D, q[q0:, h, :], S - q0)
                load_tile(smem, so, BR, D, dout[q0:, h, :], S - q0)
                c_lse = [lse[h, q0 + r] if q0 + r < S else 0.0 for r in range(BR)]
                c_ds = [dsum[h, q0 + r] if q0 + r < S else 0.0 for r in range(BR)]
                c_lo = [doc[q0 + r] if q0 + r < S else INT_MAX for r in range(BR)]
                sds = ds_off + buf * BC * BR * 2
                sa_all = []
                for c in range(2):
                    sk, sv = k_off + c * kv_wg, v_off + c * kv_wg
                    st = np.zeros((64, 64), np.float32); dpt = np.zeros((64, 64), np.float32)
                    for kk in range(D // 16):
                        koff = (kk // 4) * (64 * 128) + (kk % 4) * 32
                        st += read_kmajor(smem, sk + koff, 1024, 64) @ read_kmajor(smem, sq + koff, 1024, 64).T
                        dpt += read_kmajor(smem, sv + koff, 1024, 64) @ read_kmajor(smem, so + koff, 1024, 64).T
                    rs, rd = acc_to_regs(st, 64), acc_to_regs(dpt, 64)
                    pa = np.zeros((4, 32, 4, 4, 2), np.float32); sa = np.zeros((4, 32, 4, 4, 2), np.float32)
                    for wi in range(4):
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            jl = 16 * wi + g; key0 = k0 + 64 * c + jl
                            for nn in range(8):
                                for e in range(4):
                                    qc = 8 * nn + 2 * t + (e & 1); i = q0 + qc; j = key0 + 8 * (e // 2)
                                    ok = j >= c_lo[qc] and j <= i and j < S
                                    pv = np.float32(2.0) ** (rs[wi, lane, 4 * nn + e] * scale_log2 -
                                                           np.float32(c_lse[qc]) * np.float32(1.4426950408889634)) if ok else 0.0
                                    rs[wi, lane, 4 * nn + e] = pv
                                    rd[wi, lane, 4 * nn + e] = pv * (rd[wi, lane, 4 * nn + e] - c_ds[qc])
                            for kk in range(4):
                                for x in range(4):
                                    pa[wi, lane, kk, x] = bf16([rs[wi, lane, 8 * kk + 2 * x], rs[wi, lane, 8 * kk + 2 * x + 1]])
                                    sa[wi, lane, kk, x] = bf16([rd[wi, lane, 8 * kk + 2 * x], rd[wi, lane, 8 * kk + 2 * x + 1]])
                    for kk in range(4):
                        A_p, A_s = rega_to_A(pa[:, :, kk]), rega_to_A(sa[:, :, kk])
                        for hh in range(halves):
                            boff = hh * (BR * 128) + kk * (16 * 128)
                            dv[c][hh] += A_p @ read_mnmajor(smem, so + boff, 1024, 64)
                            dk[c][hh] += A_s @ read_mnmajor(smem, sq + boff, 1024, 64)
                    sa_all.append(sa)
                for c in range(2):  # the dS^T stores (both consumers, before the barrier)
                    sa = sa_all[c]
                    for wi in range(4):
                        for lane in range(32):
                            g, t = lane // 4, lane % 4; jl = 16 * wi + g
                            for kk in range(4):
                                for x in range(4):
                                    a = sds + sw128(64 * c + jl + 8 * (x & 1), 2 * kk + x // 2) + 4 * t
                                    smem[a // 2], smem[a // 2 + 1] = sa[wi, lane, kk, x]
                for c in range(halves):
                    dqm = np.zeros((64, 64), np.float32)
                    for kk in range(BC // 16):
                        koff = k_off + (kk // 4) * kv_wg + c * (64 * 128) + (kk % 4) * (16 * 128)
                        A = read_mnmajor(smem, sds + kk * (16 * 128), 1024, 64).T  # transposed A: [M=64, K=16]
                        dqm += A @ read_mnmajor(smem, koff, 1024, 64)
                    r = acc_to_regs(dqm, 64)
                    for wi in range(4):
                        for lane in range(32):
                            g, t = lane // 4, lane % 4; jl = 16 * wi + g
                            for hf in range(2):
                                i = q0 + jl + 8 * hf
                                if i >= S: continue
                                for nn in range(8):
                                    col = 64 * c + 8 * nn + 2 * t
                                    dq_acc[i, h, col] += r[wi, lane, 4 * nn + 2 * hf]
                                    dq_acc[i, h, col + 1] += r[wi, lane, 4 * nn + 2 * hf + 1]
            for c in range(2):
                rk = [acc_to_regs(dk[c][hh], 64) for hh in range(halves)]
                rv = [acc_to_regs(dv[c][hh], 64) for hh in range(halves)]
                for wi in range(4):
                    for lane in range(32):
                        g, t = lane // 4, lane % 4
                        key0 = k0 + 64 * c + 16 * wi + g
                        for hf in range(2):
                            j = key0 + 8 * hf
                            if j >= S: continue
                            for hh in range(halves):
                                for nn in range(8):
                                    col = 64 * hh + 8 * nn + 2 * t
                                    dk_out[j, hk, col: col + 2] = rk[hh][wi, lane, 4 * nn + 2 * hf: 4 * nn + 2 * hf + 2] * scale
                                    dv_out[j, hk, col: col + 2] = rv[hh][wi, lane, 4 * nn + 2 * hf: 4 * nn + 2 * hf + 2]
    return dq_acc * scale, dk_out, dv_out


def reference(q, k, v, dout, doc, S, H, Hkv, D, scale):
    dq = np.zeros((S, H, D)); dk = np.zeros((S, Hkv, D)); dv = np.zeros((S, Hkv, D))
    lse = np.zeros((H, S)); out = np.zeros((S, H, D))
    mask = np.array([[doc[i] <= j <= i for j in range(S)] for i in range(S)])
    for h in range(H):
        hk = h // (H // Hkv)
        s = (q[:, h, :].astype(np.float64) @ k[:, hk, :].T.astype(np.float64)) * scale
        s = np.where(mask, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m); l = p.sum(axis=1, keepdims=True); p /= l
        lse[h] = (m + np.log(l))[:, 0]
        out[:, h] = p @ v[:, hk, :]
        dp = dout[:, h, :].astype(np.float64) @ v[:, hk, :].T
        dsum = (dout[:, h, :] * out[:, h]).sum(axis=1, keepdims=True)
        ds = p * (dp - dsum)
        dq[:, h] = scale * ds @ k[:, hk, :]
        dk[:, hk] += scale * ds.T @ q[:, h, :]
        dv[:, hk] += p.T @ dout[:, h, :]
    return dq, dk, dv, lse, out


for (S, H, Hkv, D, lens) in [(1, 1, 1, 64, []), (7, 2, 1, 64, [3]), (129, 2, 1, 128, [5, 1, 60]),
                             (200, 2, 2, 64, [100, 1, 70]), (260, 2, 1, 128, [])]:
    q = bf16(rng.uniform(-1, 1, (S, H, D))); k = bf16(rng.uniform(-1, 1, (S, Hkv, D)))
    v = bf16(rng.uniform(-1, 1, (S, Hkv, D))); dout = bf16(rng.uniform(-1, 1, (S, H, D)))
    doc = doc_of(S, lens)
    scale = 1 / np.sqrt(D)
    rq, rk, rv, lse, out = reference(q, k, v, dout, doc, S, H, Hkv, D, scale)
    dsum = np.stack([(dout[:, h, :] * bf16(out[:, h, :])).sum(axis=1) for h in range(H)])
    mq, mk, mv = kernel(q, k, v, dout, lse.astype(np.float32), dsum.astype(np.float32), doc, S, H, Hkv, D, scale)
    errs = [np.linalg.norm(m - r) / max(np.linalg.norm(r), 1e-2) for m, r in ((mq, rq), (mk, rk), (mv, rv))]
    nan = int(np.isnan(mq).sum() + np.isnan(mk).sum() + np.isnan(mv).sum())
    print(f"S={S} H={H} Hkv={Hkv} D={D} docs={len(lens)+1}: dq rel {errs[0]:.2e}, dk rel {errs[1]:.2e}, "
          f"dv rel {errs[2]:.2e}, nan {nan}", flush=True)
    assert nan == 0 and max(errs) < 2e-2, "the model disagrees with the reference"
print("backward model: ok")
