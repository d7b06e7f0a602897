#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of bench/device/attention_bench.cu,
in the same run, for a side-by-side ratio: causal, H=32 query / 8 key-value heads, d=128,
bf16, tensors in [S, H, d] memory order (BSHD) as the engine keeps them.

  python3 bench/peers/torch_sdpa_bench.py [--backend cudnn|flash|efficient|default] [--doc-len N] [--head-dim D] [S ...]

--backend default lets PyTorch choose, as transformers' sdpa attention does.

A packed row of documents of N tokens is timed as a batch of S/N independent sequences
(the same causal work: sum over documents of len^2). GQA runs with enable_gqa where the
backend takes it, else with K/V expanded to H heads before timing (noted in the output).
TFLOPS = 2*sum(len^2)*H*d (forward), 7*sum(len^2)*H*d (forward + backward). Prints a
table and one JSON line per size.
"""
import argparse
import contextlib
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "default": None}


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def bench(S, doc_len, backend, H=32, Hkv=8, d=128):
    L = doc_len if doc_len > 0 else S
    B = S // L
    g = torch.Generator(device="cuda").manual_seed(0)
    def rnd(h):  # [B, L, h, d] memory, viewed as [B, h, L, d]
        return (torch.rand(B, L, h, d, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1).transpose(1, 2)
    q, k, v = rnd(H), rnd(Hkv), rnd(Hkv)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    dout = rnd(H)
    gqa_note = "enable_gqa"
    with sdpa_kernel([BACKENDS[backend]]) if BACKENDS[backend] else contextlib.nullcontext():
        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        try:
            fwd()
        except RuntimeError:
            gqa_note = "expanded"
            k2 = k.detach().repeat_interleave(H // Hkv, dim=1).requires_grad_(True)
            v2 = v.detach().repeat_interleave(H // Hkv, dim=1).requires_grad_(True)
            def fwd():
                return F.scaled_dot_product_attention(q, k2, v2, is_causal=True)
        def fwd_bwd():
            o = fwd()
            o.backward(dout)
        for _ in range(2):
            fwd_bwd()
        torch.cuda.synchronize()
        reps = 3 if S >= 131072 else 7
        with torch.no_grad():
            f_ms = timed(fwd, reps)
        fb_ms = timed(fwd_bwd, reps)
    pairs = B * L * L
    f_tf = 2.0 * pairs * H * d / (f_ms * 1e-3) / 1e12
    fb_tf = 7.0 * pairs * H * d / (fb_ms * 1e-3) / 1e12
    print(f"{'torch-' + backend:<14} {S:9d} {L:9d} {f_ms:12.3f} {f_tf:10.1f} {fb_ms:12.3f} {fb_tf:10.1f}  ({gqa_note})")
    print(json.dumps({"bench": "attention", "impl": "torch-" + backend, "S": S, "H": H, "Hkv": Hkv, "d": d,
                      "doc_len": L, "fwd_ms": round(f_ms, 4), "fwd_tflops": round(f_tf, 2),
                      "fwd_bwd_ms": round(fb_ms, 4), "fwd_bwd_tflops": round(fb_tf, 2), "reps": reps,
                      "gqa": gqa_note, "torch": torch.__version__,
                      "cudnn": torch.backends.cudnn.version()}), flush=True)
    del q, k, v, dout
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="cudnn", choices=sorted(BACKENDS))
    ap.add_argument("--doc-len", type=int, default=0)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("sizes", type=int, nargs="*", default=[8192, 32768, 131072])
    a = ap.parse_args()
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print(f"{'impl':<14} {'S':>9} {'doc_len':>9} {'fwd_ms':>12} {'fwd_TFLOPS':>10} {'fwdbwd_ms':>12} {'fb_TFLOPS':>10}")
    for S in a.sizes:
        bench(S, a.doc_len, a.backend, d=a.head_dim)


if __name__ == "__main__":
    main()
