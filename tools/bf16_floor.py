#!/usr/bin/env python3
"""How close can any bf16 engine get to the float64 fixtures?

Recomputes each fixture's loss and gradients in float64 torch, rounding values
to bfloat16 exactly where the CUDA backend stores them (weights, every
activation it writes, every activation gradient, the attention probabilities
before P.V and dS before the dQ/dK products), with exact math in between. The
gradient error of that computation is a floor for a bf16 engine: its kernels
can only add error on top (fp32 accumulation instead of float64). Variants
switch the rounding off for one class of tensors at a time, to show which
rounding the error comes from.

    python3 tools/bf16_floor.py --cases fixtures [--json fixtures/bf16_floor.json]

With --json, writes each case's worst gradient error with bf16 storage (the
floor) for `tools/check_loss_grad.py --floor`. Needs torch, transformers (for the rope frequencies) and safetensors.
"""
import argparse
import json
import math
import pathlib

import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import load_file as load_torch
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

torch.set_default_dtype(torch.float64)


def to_bf16(x):
    return x.to(torch.bfloat16).to(torch.float64)


class Store(torch.autograd.Function):
    """A storage point: rounds the value (forward) and/or its gradient (backward)."""

    @staticmethod
    def forward(ctx, x, round_value, round_grad):
        ctx.round_grad = round_grad
        return to_bf16(x) if round_value else x.clone()

    @staticmethod
    def backward(ctx, g):
        return (to_bf16(g) if ctx.round_grad else g), None, None


VARIANTS = {
    "float64 (no rounding)": dict(weights=False, acts=False, grads=False),
    "bf16 storage (the CUDA backend)": dict(weights=True, acts=True, grads=True),
    "  but activation grads fp32": dict(weights=True, acts=True, grads=False),
    "  but activations fp32": dict(weights=True, acts=False, grads=True),
    "  but weights fp32": dict(weights=False, acts=True, grads=True),
    "bf16 weights only": dict(weights=True, acts=False, grads=False),
}


def inv_freq(cfg, head_dim):
    params = getattr(cfg, "rope_parameters", None) or {}
    kind = params.get("rope_type", "default")
    if kind == "default":
        theta = params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")[0].double()


def worst_grad_error(case, v):
    cfg = AutoConfig.from_pretrained(case / "model")
    weights = {k: t.double() for k, t in load_torch(str(case / "model" / "model.safetensors")).items()}
    batch, ref = load_file(str(case / "batch.safetensors")), load_file(str(case / "reference.safetensors"))
    ids = torch.from_numpy(batch["input_ids"].astype(np.int64))
    targets = torch.from_numpy(ref["targets"].astype(np.int64)).reshape(ids.shape)
    pos = (torch.from_numpy(batch["position_ids"].astype(np.int64)) if "position_ids" in batch
           else torch.arange(ids.shape[1]).expand_as(ids))
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    freqs = inv_freq(cfg, hd)
    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def act(x):
        return Store.apply(x, v["acts"], v["grads"])

    def w(name):  # weight gradients are fp32 accumulators in the engine: never rounded
        return Store.apply(params[name], v["weights"], False)

    def rms(x, weight):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + cfg.rms_norm_eps) * weight

    def rope(x, p):
        f = p[:, None].double() * freqs[None, :]
        c, s = torch.cos(f)[:, None, :], torch.sin(f)[:, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    loss_sum = 0.0
    for b in range(ids.shape[0]):
        p, n = pos[b], ids.shape[1]
        doc = torch.cumsum((p == 0).long(), 0)
        mask = (torch.arange(n)[:, None] >= torch.arange(n)[None, :]) & (doc[:, None] == doc[None, :])
        x = act(w("model.embed_tokens.weight")[ids[b]])
        for layer in range(cfg.num_hidden_layers):
            pre = f"model.layers.{layer}."
            xn = act(rms(x, w(pre + "input_layernorm.weight")))
            q = act(xn @ w(pre + "self_attn.q_proj.weight").T).view(n, H, hd)
            k = act(xn @ w(pre + "self_attn.k_proj.weight").T).view(n, Hkv, hd)
            val = act(xn @ w(pre + "self_attn.v_proj.weight").T).view(n, Hkv, hd)
            q, k = act(rope(q, p)), act(rope(k, p))
            k, val = k.repeat_interleave(H // Hkv, 1), val.repeat_interleave(H // Hkv, 1)
            scores = torch.einsum("nhd,mhd->hnm", q, k) / math.sqrt(hd)
            scores = Store.apply(scores, False, v["grads"])  # dS is rounded before the dQ/dK products
            probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
            probs = Store.apply(probs, v["acts"], False)  # P is rounded before P.V
            o = act(torch.einsum("hnm,mhd->nhd", probs, val)).reshape(n, H * hd)
            x_mid = act(act(o @ w(pre + "self_attn.o_proj.weight").T) + x)
            xn2 = act(rms(x_mid, w(pre + "post_attention_layernorm.weight")))
            gate = act(xn2 @ w(pre + "mlp.gate_proj.weight").T)
            up = act(xn2 @ w(pre + "mlp.up_proj.weight").T)
            h = act(torch.nn.functional.silu(gate) * up)
            x = act(act(h @ w(pre + "mlp.down_proj.weight").T) + x_mid)
        head = "lm_head.weight" if "lm_head.weight" in params else "model.embed_tokens.weight"
        logits = act(act(rms(x, w("model.norm.weight"))) @ w(head).T)
        valid = targets[b] != -100
        loss_sum = loss_sum + torch.nn.functional.cross_entropy(logits[valid], targets[b][valid], reduction="sum")
    (loss_sum / int((targets != -100).sum())).backward()
    worst = (0.0, "")
    for name, t in params.items():
        if "grad." + name not in ref:
            continue
        r = torch.from_numpy(ref["grad." + name].astype(np.float64))
        err = float((t.grad - r).norm() / r.norm())
        worst = max(worst, (err, name))
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="a folder of fixture case folders")
    ap.add_argument("--json", help="write {case: {worst, parameter}} for the bf16-storage variant here")
    args = ap.parse_args()
    cases = sorted(c for c in pathlib.Path(args.cases).iterdir() if (c / "reference.safetensors").exists())
    print("worst gradient error (||g - ref|| / ||ref||, largest over parameters) per case")
    print(f"{'variant':34s}" + "".join(f"{c.name:>12s}" for c in cases))
    floors = {}
    for name, v in VARIANTS.items():
        row = [worst_grad_error(c, v) for c in cases]
        print(f"{name:34s}" + "".join(f"{e:12.2e}" for e, _ in row), flush=True)
        if v == VARIANTS["bf16 storage (the CUDA backend)"]:
            floors = {c.name: {"worst": e, "parameter": p} for c, (e, p) in zip(cases, row)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"made_with": "tools/bf16_floor.py", "variant": "bf16 storage (the CUDA backend)",
                       "cases": floors}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
