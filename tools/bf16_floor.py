#!/usr/bin/env python3
"""How close can any bf16 engine get to the float64 fixtures?

Recomputes each fixture's loss and gradients in float64 torch, rounding values
to bfloat16 exactly where the CUDA backend stores them (weights, every
activation it writes, every activation gradient, the attention probabilities
before P.V and dS before the dQ/dK products), with exact math in between and
the RoPE inverse frequencies in float32, as the engine (like transformers)
computes them. The gradient error of that computation is a floor for a bf16
engine: its kernels can only add error on top (fp32 accumulation instead of
float64). Variants switch the rounding off for one class of tensors at a time,
to show which rounding the error comes from.

    python3 tools/bf16_floor.py --cases fixtures [--json fixtures/bf16_floor.json]

A LoRA case (an adapter/ folder, tools/make_lora_fixtures.py) adds each adapter as the engine
does (model/lora_linear.cpp) and compares the adapters' gradients (the base is frozen).

Families (config.json's model_type): llama, mistral (sliding window), qwen2 (q/k/v
biases), qwen3 (per-head q/k RMSNorm, optional q/k/v/o biases). RoPE: default,
linear, dynamic (per row), llama3 and yarn, with transformers' own formulas (run in float64 too, for
the check below).

The "float64 (no rounding)" variant must reproduce each fixture's reference loss and
gradients (to NO_ROUNDING_TOL): that checks this model of the network before its
rounding is trusted. With --json, writes each case's worst gradient error with bf16
storage (the floor) for `tools/check_loss_grad.py --floor`. Needs torch,
transformers (for the config and the rope frequencies) and safetensors.
"""
import argparse
import contextlib
import json
import math
import pathlib
import sys
from dataclasses import dataclass

import numpy as np
import torch
import transformers.utils.logging as hf_logging
from safetensors.numpy import load_file
from safetensors.torch import load_file as load_torch
from torch.overrides import TorchFunctionMode
from transformers import AutoConfig
from transformers.activations import ACT2FN
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

torch.set_default_dtype(torch.float64)

# The no-rounding variant against the float64 reference: float64 summation order only.
NO_ROUNDING_TOL = 1e-9


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


# weights/acts/grads: round that class of stored tensors to bf16 (see Net.w, Net.act);
# rope32: float32 RoPE frequencies (the engine's) instead of float64 ones (the reference's).
NO_ROUNDING = "float64 (no rounding)"
BF16_STORAGE = "bf16 storage (the CUDA backend)"
VARIANTS = {
    NO_ROUNDING: dict(weights=False, acts=False, grads=False, rope32=False),
    BF16_STORAGE: dict(weights=True, acts=True, grads=True, rope32=True),
    "  but activation grads fp32": dict(weights=True, acts=True, grads=False, rope32=True),
    "  but activations fp32": dict(weights=True, acts=False, grads=True, rope32=True),
    "  but weights fp32": dict(weights=False, acts=True, grads=True, rope32=True),
    "bf16 weights only": dict(weights=True, acts=False, grads=False, rope32=False),
    "fp32 RoPE frequencies only": dict(weights=False, acts=False, grads=False, rope32=True),
}

# ----------------------------------------------------------------------------- architecture


@dataclass
class Arch:
    """What the supported decoder families do differently (all: RMSNorm, RoPE, SwiGLU MLP)."""
    qkv_bias: bool   # q/k/v projections have biases
    o_bias: bool     # o_proj has a bias
    qk_norm: bool    # per-head RMSNorm of q and k between the projection and RoPE
    windows: list    # per layer: query i sees keys j with i - j < window; None = no window


def architecture(cfg):
    kind = cfg.model_type
    assert kind in ("llama", "mistral", "qwen2", "qwen3"), f"unsupported model_type {kind!r} {cfg.architectures}"
    assert not getattr(cfg, "mlp_bias", False), "MLP biases are not modelled"
    bias = bool(getattr(cfg, "attention_bias", False))  # llama/qwen3; mistral has none, qwen2 no such option
    return Arch(qkv_bias=kind == "qwen2" or bias,  # Qwen2 always has q/k/v biases, never an o_proj one
                o_bias=kind != "qwen2" and bias,
                qk_norm=kind == "qwen3",
                windows=layer_windows(cfg))


def layer_windows(cfg):
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if types is None:  # Mistral: the window (if any) applies to every layer
        return [window] * cfg.num_hidden_layers
    # Qwen2/Qwen3 say per layer (sliding only with use_sliding_window, from max_window_layers on)
    return [window if t == "sliding_attention" else None for t in types]


# ----------------------------------------------------------------------------- RoPE


class Float32AsFloat64(TorchFunctionMode):
    """Runs torch code written for float32 in float64: every float32 dtype it asks for becomes float64.

    transformers computes the RoPE frequencies in float32 (relative error ~1e-7, far above
    what the no-rounding check needs); under this mode its own formulas run in float64."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)  # x.to(torch.float)
        kwargs = {k: torch.float64 if a is torch.float32 else a for k, a in (kwargs or {}).items()}
        return func(*args, **kwargs)


def rope_frequencies(cfg, head_dim, dtype, length):
    """(inverse frequencies [head_dim / 2] as float64 values, yarn attention factor), computed in `dtype`
    with transformers' formulas: float32 as transformers (and the engine, which mirrors it) does,
    float64 as the fixtures' reference does.

    transformers has already rewritten a 4.x config (rope_theta + rope_scaling, with "type" or
    "rope_type") into cfg.rope_parameters. `length` (1 + the row's largest position id) matters to
    dynamic scaling alone, which the engine computes per row."""
    params = getattr(cfg, "rope_parameters", None) or {}
    kind = params.get("rope_type", "default")
    assert params.get("partial_rotary_factor", 1.0) == 1.0, "partial rotary embeddings are not modelled"
    if kind == "default":  # in the model classes, not ROPE_INIT_FUNCTIONS
        theta = params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        inv_freq, factor = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim), 1.0
    else:
        assert kind in ("linear", "dynamic", "llama3", "yarn"), f"rope_type {kind!r} is not modelled"
        extra = {"seq_len": length} if kind == "dynamic" else {}
        with Float32AsFloat64() if dtype == torch.float64 else contextlib.nullcontext():
            inv_freq, factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu", **extra)
    assert inv_freq.dtype == dtype and inv_freq.shape == (head_dim // 2,), (inv_freq.dtype, inv_freq.shape)
    return inv_freq.double(), float(factor)


def rope(x, pos, inv_freq):
    """x: [n, heads, d] rotated by position (halves layout, as HF's rotate_half)."""
    d = x.shape[-1]
    f = pos[:, None].double() * inv_freq[None, :]
    c, s = torch.cos(f)[:, None, :], torch.sin(f)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


# ----------------------------------------------------------------------------- the network with its storage points


def rms(x, weight, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


class Net:
    """One fixture's model (float64 parameters with gradients) and where a variant rounds."""

    def __init__(self, case, v):
        self.cfg = AutoConfig.from_pretrained(case / "model")
        self.arch = architecture(self.cfg)
        weights = {k: t.double() for k, t in load_torch(str(case / "model" / "model.safetensors")).items()}
        self.lora_scale = None
        if (case / "adapter").is_dir():  # a LoRA case: the adapters train, the base is frozen
            acfg = json.loads((case / "adapter" / "adapter_config.json").read_text())
            r = acfg["r"]
            self.lora_scale = acfg["lora_alpha"] / (math.sqrt(r) if acfg.get("use_rslora") else r)
            adapters = load_torch(str(case / "adapter" / "adapter_model.safetensors"))
            self.params = {k: t.double().requires_grad_(True) for k, t in adapters.items()}
        else:
            self.params = {k: t.requires_grad_(True) for k, t in weights.items()}
        self.tensors = {**weights, **self.params}
        self.v = v
        cfg = self.cfg
        self.H, self.Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.H
        self.case_name, self.inv_freqs = case.name, {}
        _, self.attention_factor = self.rope_for(1)
        self.eps = cfg.rms_norm_eps
        self.gate_act = ACT2FN[cfg.hidden_act]  # transformers' own activation, run in float64

    def rope_for(self, length):
        """(inverse frequencies, attention factor) for a row whose largest position is length - 1."""
        if length not in self.inv_freqs:
            inv64, af64 = rope_frequencies(self.cfg, self.hd, torch.float64, length)
            inv32, af32 = rope_frequencies(self.cfg, self.hd, torch.float32, length)
            # the float64 run of transformers' formulas must change nothing but the precision
            assert af32 == af64 and ((inv32 - inv64).abs() / inv64).max() < 1e-6, self.case_name
            self.inv_freqs[length] = (inv32 if self.v["rope32"] else inv64, af64)
        return self.inv_freqs[length]

    def act(self, x):
        """An activation the engine writes in bf16; its gradient is written in bf16 too."""
        return Store.apply(x, self.v["acts"], self.v["grads"])

    def w(self, name):  # weight gradients are fp32 accumulators in the engine: never rounded
        return Store.apply(self.tensors[name], self.v["weights"], False)

    def lora(self, y, x, module):
        """y plus the module's adapter, as the engine adds it: t = x A^T stored in bf16 (and its
        gradient), then y + s t B^T accumulated into the bf16 y (one rounding of the sum)."""
        a = f"base_model.model.{module}.lora_A.weight"
        if self.lora_scale is None or a not in self.tensors:
            return y
        t = self.act(x @ self.w(a).T)
        return self.act(y + self.lora_scale * (t @ self.w(a.replace("lora_A", "lora_B")).T))

    def linear(self, x, name, bias):
        """x W^T is a bf16 GEMM output; a bias is then added in fp32 and the sum stored again:
        bf16(bf16(x W^T) + b). The bias gradient is the (unrounded) sum of the bf16 dy."""
        y = self.lora(self.act(x @ self.w(name + ".weight").T), x, name)
        return self.act(y + self.w(name + ".bias")) if bias else y

    def qkv(self, pre, xn, p):
        """q, k, v [n, heads, hd], q and k rotated (each stage stored in bf16, and its gradient)."""
        n, a = xn.shape[0], self.arch
        q = self.linear(xn, pre + "q_proj", a.qkv_bias).view(n, self.H, self.hd)
        k = self.linear(xn, pre + "k_proj", a.qkv_bias).view(n, self.Hkv, self.hd)
        val = self.linear(xn, pre + "v_proj", a.qkv_bias).view(n, self.Hkv, self.hd)
        if a.qk_norm:  # Qwen3: RMSNorm over each head (fp32 math, bf16 output; its backward's dq_pre bf16)
            q = self.act(rms(q, self.w(pre + "q_norm.weight"), self.eps))
            k = self.act(rms(k, self.w(pre + "k_norm.weight"), self.eps))
        inv_freq = self.rope_for(int(p.max()) + 1)[0]
        return self.act(rope(q, p, inv_freq)), self.act(rope(k, p, inv_freq)), val

    def attention(self, layer, xn, p, mask):
        """The attention block's output before o_proj, [n, H * hd]."""
        n, H, hd = xn.shape[0], self.H, self.hd
        q, k, val = self.qkv(f"model.layers.{layer}.self_attn.", xn, p)
        k, val = k.repeat_interleave(H // self.Hkv, 1), val.repeat_interleave(H // self.Hkv, 1)
        # YaRN: HF scales cos and sin by the attention factor (q.k by its square); the engine
        # folds the square into the softmax scale instead, leaving its bf16 q and k unscaled.
        af2 = self.attention_factor * self.attention_factor
        scores = torch.einsum("nhd,mhd->hnm", q, k) * af2 / math.sqrt(hd)
        scores = Store.apply(scores, False, self.v["grads"])  # dS is rounded before the dQ/dK products
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        probs = Store.apply(probs, self.v["acts"], False)  # P is rounded before P.V
        return self.act(torch.einsum("hnm,mhd->nhd", probs, val)).reshape(n, H * hd)

    def layer(self, layer, x, p, mask):
        pre = f"model.layers.{layer}."
        xn = self.act(rms(x, self.w(pre + "input_layernorm.weight"), self.eps))
        o = self.attention(layer, xn, p, mask)
        # Residual adds: the GEMM output and then the sum are rounded (as this script has always
        # done; the engine's matmul_add epilogue rounds only the sum).
        x_mid = self.act(self.act(o @ self.w(pre + "self_attn.o_proj.weight").T) + x)
        x_mid = self.lora(x_mid, o, pre + "self_attn.o_proj")
        if self.arch.o_bias:  # added to the stored residual sum in fp32, stored again
            x_mid = self.act(x_mid + self.w(pre + "self_attn.o_proj.bias"))
        xn2 = self.act(rms(x_mid, self.w(pre + "post_attention_layernorm.weight"), self.eps))
        gate = self.linear(xn2, pre + "mlp.gate_proj", False)
        up = self.linear(xn2, pre + "mlp.up_proj", False)
        h = self.act(self.gate_act(gate) * up)
        out = self.act(self.act(h @ self.w(pre + "mlp.down_proj.weight").T) + x_mid)
        return self.lora(out, h, pre + "mlp.down_proj")

    def row_loss(self, ids, p, targets):
        """Sum of the row's token cross-entropies (documents from position_ids restarting at 0)."""
        n = ids.shape[0]
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        doc = torch.cumsum((p == 0).long(), 0)
        mask = (i >= j) & (doc[:, None] == doc[None, :])
        x = self.act(self.w("model.embed_tokens.weight")[ids])
        for layer, window in enumerate(self.arch.windows):
            x = self.layer(layer, x, p, mask if window is None else mask & (i - j < window))
        head = "lm_head.weight" if "lm_head.weight" in self.tensors else "model.embed_tokens.weight"
        logits = self.act(self.act(rms(x, self.w("model.norm.weight"), self.eps)) @ self.w(head).T)
        valid = targets != -100
        return torch.nn.functional.cross_entropy(logits[valid], targets[valid], reduction="sum")


# ----------------------------------------------------------------------------- one case, one variant


def errors(case, v):
    """(worst gradient error, its parameter, loss error), relative to the fixture's float64 reference."""
    net = Net(case, v)
    batch, ref = load_file(str(case / "batch.safetensors")), load_file(str(case / "reference.safetensors"))
    ids = torch.from_numpy(batch["input_ids"].astype(np.int64))
    targets = torch.from_numpy(ref["targets"].astype(np.int64)).reshape(ids.shape)
    pos = (torch.from_numpy(batch["position_ids"].astype(np.int64)) if "position_ids" in batch
           else torch.arange(ids.shape[1]).expand_as(ids))
    loss_sum = 0.0
    for b in range(ids.shape[0]):
        loss_sum = loss_sum + net.row_loss(ids[b], pos[b], targets[b])
    loss = loss_sum / int((targets != -100).sum())
    loss.backward()
    ref_names = {k[len("grad."):] for k in ref if k.startswith("grad.")}
    assert ref_names == set(net.params), f"{case.name}: reference gradients != model parameters"
    worst = (0.0, "")
    for name, t in net.params.items():
        assert t.grad is not None, f"{case.name}: {name} is not used by this model of the network"
        r = torch.from_numpy(ref["grad." + name].astype(np.float64))
        worst = max(worst, (float((t.grad - r).norm() / r.norm()), name))
    ref_loss = float(ref["loss"][0])
    return worst[0], worst[1], abs(loss.item() - ref_loss) / abs(ref_loss)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="a folder of fixture case folders")
    ap.add_argument("--json", help="write {case: {worst, parameter}} for the bf16-storage variant here")
    args = ap.parse_args()
    hf_logging.set_verbosity_error()  # e.g. yarn's note that factor != max_position / original
    cases = sorted(c for c in pathlib.Path(args.cases).iterdir() if (c / "reference.safetensors").exists())
    width = max([12] + [len(c.name) + 2 for c in cases])
    print("worst gradient error (||g - ref|| / ||ref||, largest over parameters) per case")
    print(f"{'variant':34s}" + "".join(f"{c.name:>{width}s}" for c in cases))
    rows = {}
    for name, v in VARIANTS.items():
        rows[name] = [errors(c, v) for c in cases]
        print(f"{name:34s}" + "".join(f"{e:{width}.2e}" for e, _, _ in rows[name]), flush=True)
        if name == NO_ROUNDING:
            print(f"{'  its loss error':34s}" + "".join(f"{le:{width}.2e}" for _, _, le in rows[name]), flush=True)
    bad = [c.name for c, (e, _, le) in zip(cases, rows[NO_ROUNDING]) if not max(e, le) < NO_ROUNDING_TOL]
    if bad:  # the model of the network is wrong for these: their floors would mean nothing
        sys.exit(f"no-rounding variant differs from the float64 reference by > {NO_ROUNDING_TOL:g}: {bad}")
    if args.json:
        floors = {c.name: {"worst": e, "parameter": p} for c, (e, p, _) in zip(cases, rows[BF16_STORAGE])}
        with open(args.json, "w") as f:
            json.dump({"made_with": "tools/bf16_floor.py", "variant": BF16_STORAGE, "cases": floors}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
