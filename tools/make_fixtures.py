#!/usr/bin/env python3
"""Float64 Hugging Face reference fixtures for `ulysses loss-grad`.

Each case is a tiny random decoder (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or
MistralForCausalLM) saved as a HF model folder, one batch,
and the float64 loss and parameter gradients that our loss contract gives on it:

  targets:  shift_labels if given; else labels (default: input_ids) shifted by one,
            target[b,i] = labels[b,i+1] if i+1 < S and position_ids[b,i+1] != 0 else -100
  loss:     sum of token cross-entropies over targets != -100 / their count (whole batch)
  documents start where position_ids restart at 0; no token attends across documents

The reference is computed from the stored (rounded) weights upcast to float64, with
HF's three float32 islands (RMSNorm, RoPE cos/sin, eager softmax) replaced by float64
versions of the same formulas; the unmodified HF model is then checked to agree within
float32 rounding. Packed rows are computed document by document and the script asserts
that HF's packed forward (position_ids alone, and an explicit 4-D block-diagonal mask)
gives the same loss and gradients.

  python3 tools/make_fixtures.py --out fixtures                  # the committed set
  python3 tools/make_fixtures.py --out /tmp/fx --random 8 --seed 1
"""
import argparse
import dataclasses
import inspect
import json
import math
import os
import shutil
import sys
import types
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
import transformers
import transformers.utils.logging as hf_logging
from safetensors.numpy import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

# arch -> (config class, model class, modeling module whose eager attention is swapped)
ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, modeling_llama),
    "mistral": (MistralConfig, MistralForCausalLM, modeling_mistral),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, modeling_qwen2),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, modeling_qwen3),
}

IGNORE = -100
STORAGE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Case:
    name: str
    description: str
    seed: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    batch: int
    seq: int
    layers: int = 2
    head_dim: int | None = None          # None: hidden / heads, not written to config
    rope: dict = field(default_factory=lambda: {"rope_type": "default", "rope_theta": 10000.0})
    max_pos: int = 128
    eps: float = 1e-5
    tie: bool = False
    storage: str = "float32"
    layout: str = "5.x"                  # "4.x": rope_theta + rope_scaling in config.json
    docs: list | None = None             # per row: list of document lengths summing to seq
    labels: str = "none"                 # none | labels | shift_labels
    ignore_frac: float = 0.0
    ids_dtype: str = "int64"
    explicit_positions: bool = False     # write position_ids 0..S-1 even without documents
    weight_std: float = 0.15
    qk_gain: float = 1.5                 # q/k weights drawn with weight_std * qk_gain: sharper attention
    arch: str = "llama"                  # llama | mistral | qwen2 | qwen3 (ARCHS)
    attention_bias: bool = False         # llama/qwen3: q/k/v/o biases (qwen2 always has q/k/v ones)
    window: int | None = None            # mistral: sliding_window
    act: str = "silu"                    # hidden_act: the MLP's gate activation (transformers' ACT2FN name)


def committed_cases():
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    llama3_b = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 2.0, "original_max_position_embeddings": 32}
    return [
        Case("gqa", "GQA (4 heads, 2 kv heads), untied, fp32 weights, default RoPE, labels = input_ids",
             seed=101, hidden=32, intermediate=80, heads=4, kv_heads=2, vocab=160, batch=2, seq=32),
        Case("mqa_llama3", "MQA (4 heads, 1 kv head), llama3 rope_scaling factor 8 with "
             "original_max_position_embeddings 16 (frequencies bent at positions up to 63), 4.x config "
             "layout as on the Hub, explicit position_ids 0..S-1, labels differ from input_ids",
             seed=202, hidden=64, intermediate=64, heads=4, kv_heads=1, vocab=128, batch=1, seq=64,
             rope=llama3, layout="4.x", labels="labels", ignore_frac=0.1, explicit_positions=True,
             ids_dtype="int32", eps=1e-6),
        Case("tied", "tie_word_embeddings (lm_head = embed_tokens, one gradient), bf16 weights, MHA",
             seed=303, hidden=32, intermediate=64, heads=4, kv_heads=4, vocab=256, batch=2, seq=24,
             tie=True, storage="bfloat16", rope={"rope_type": "default", "rope_theta": 1000.0}),
        Case("packed", "B=2 rows of packed documents (position_ids restart at 0; one 1-token document), "
             "labels given with some -100 and some tokens differing from input_ids",
             seed=404, hidden=32, intermediate=64, heads=4, kv_heads=2, vocab=128, batch=2, seq=48,
             docs=[[5, 13, 19, 11], [17, 1, 23, 7]], labels="labels", ignore_frac=0.15, ids_dtype="int32"),
        Case("ignored", "shift_labels with ~60% -100 (a target on the last position too), fp16 weights, "
             "4.x config layout, explicit head_dim 16 != hidden/heads 12",
             seed=505, hidden=48, intermediate=72, heads=4, kv_heads=2, vocab=144, batch=2, seq=40,
             head_dim=16, storage="float16", layout="4.x", labels="shift_labels", ignore_frac=0.6),
        Case("heads8_kv2", "8 heads, 2 kv heads, S=64 (sequence parallel P=8 > kv heads), llama3 rope in "
             "5.x rope_parameters, row 1 packed as two documents (27 + 37), default labels",
             seed=606, hidden=64, intermediate=64, heads=8, kv_heads=2, vocab=128, batch=2, seq=64,
             rope=llama3_b, docs=[[64], [27, 37]]),
        Case("qwen2_bias", "Qwen2: q/k/v biases, untied, GQA 4/2, theta 1e6, packed documents, labels with -100",
             seed=707, hidden=32, intermediate=64, heads=4, kv_heads=2, vocab=160, batch=2, seq=40, arch="qwen2",
             rope={"rope_type": "default", "rope_theta": 1000000.0}, eps=1e-6,
             docs=[[40], [9, 21, 10]], labels="labels", ignore_frac=0.1),
        Case("qwen2_yarn_tied", "Qwen2, tied embeddings, bf16 weights, YaRN factor 4 over original 16 "
             "(positions up to 47: interpolated and ramped dimensions), 4.x layout with rope_scaling 'type'",
             seed=808, hidden=64, intermediate=96, heads=4, kv_heads=2, vocab=128, batch=1, seq=48, arch="qwen2",
             rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                   "original_max_position_embeddings": 16},
             tie=True, storage="bfloat16", layout="4.x"),
        Case("qwen3_qknorm", "Qwen3: per-head q/k RMSNorm, head_dim 16 != hidden/heads 8, 8 heads / 2 kv heads "
             "(sp 8), linear RoPE factor 2, row 1 two documents",
             seed=909, hidden=64, intermediate=64, heads=8, kv_heads=2, vocab=128, batch=2, seq=64, arch="qwen3",
             head_dim=16, rope={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
             docs=[[64], [29, 35]], eps=1e-6),
        Case("qwen3_bias_yarn", "Qwen3 with attention_bias (q/k/v/o biases), YaRN factor 8 over original 8 with "
             "beta_fast 16 and an explicit attention_factor, fp16 weights, shift_labels",
             seed=1010, hidden=48, intermediate=80, heads=4, kv_heads=4, vocab=144, batch=2, seq=32, arch="qwen3",
             attention_bias=True, storage="float16", labels="shift_labels", ignore_frac=0.2,
             rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 8,
                   "beta_fast": 16.0, "attention_factor": 1.25}),
        Case("llama_dynamic", "Llama with dynamic (NTK) RoPE factor 2, max_position_embeddings 16 < S=40 "
             "(the base raised for length 40), GQA 4/2, two unpacked rows, 4.x layout (rope_scaling)",
             seed=1212, hidden=32, intermediate=64, heads=4, kv_heads=2, vocab=128, batch=2, seq=40, max_pos=16,
             rope={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, layout="4.x",
             labels="labels", ignore_frac=0.1),
        Case("llama_gelu_tanh", "Llama-shaped with hidden_act gelu_pytorch_tanh (GELU, tanh approximation, as "
             "Gemma's MLP), GQA 4/2, one document per row plus packed row 1 = 21+19, labels",
             seed=1313, hidden=32, intermediate=64, heads=4, kv_heads=2, vocab=128, batch=2, seq=40,
             act="gelu_pytorch_tanh", docs=[[40], [21, 19]], labels="labels", ignore_frac=0.1),
        Case("mistral_window", "Mistral with sliding_window 12 < S=48 (and documents longer and shorter than the "
             "window), GQA 4/2, theta 1e6, 4.x layout",
             seed=1111, hidden=32, intermediate=64, heads=4, kv_heads=2, vocab=128, batch=2, seq=48,
             arch="mistral", window=12, rope={"rope_type": "default", "rope_theta": 1000000.0}, layout="4.x",
             docs=[[48], [7, 30, 11]], labels="labels", ignore_frac=0.1),
    ]


def random_cases(n, seed, aligned=False):
    """aligned: hidden, intermediate and vocab multiples of 8 (for kernels that need 16-byte rows)."""
    rng = np.random.default_rng(seed)
    cases = []

    def align(x):
        return (x + 7) // 8 * 8 if aligned else x

    for k in range(n):
        while True:  # keep the models tiny: hidden and the attention width at most 128
            heads = int(rng.choice([2, 3, 4, 6, 8]))
            head_dim = int(rng.choice([8, 16, 24, 32]))
            explicit_hd = bool(rng.random() < 0.3)
            hidden = heads * (int(rng.choice([4, 8, 12, 16, 20])) if explicit_hd else head_dim)
            small = hidden <= 128 and heads * head_dim <= 128
            if small and (not explicit_hd or hidden != heads * head_dim) and not (aligned and hidden % 8):
                break
        kv = int(rng.choice([d for d in range(1, heads + 1) if heads % d == 0]))
        seq = 8 * int(rng.integers(2, 13))
        batch = int(rng.integers(1, 3))
        docs = None
        if rng.random() < 0.5:
            docs = []
            for _ in range(batch):
                cuts = sorted(rng.choice(np.arange(1, seq), size=int(rng.integers(0, 4)), replace=False))
                bounds = [0, *[int(c) for c in cuts], seq]
                docs.append([bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)])
        theta = float(rng.choice([10000.0, 500000.0]))
        rope = {"rope_type": "default", "rope_theta": theta}
        if rng.random() < 0.5:
            rope = {"rope_type": "llama3", "rope_theta": theta, "factor": float(rng.choice([2.0, 4.0, 8.0])),
                    "low_freq_factor": 1.0, "high_freq_factor": float(rng.choice([2.0, 4.0])),
                    "original_max_position_embeddings": int(rng.choice([8, 16, 32]))}
        labels = str(rng.choice(["none", "labels", "shift_labels"]))
        cases.append(Case(
            f"rand_{k:03d}", "random case", seed=int(rng.integers(1, 2**31 - 1)), hidden=hidden,
            intermediate=align(int(rng.integers(hidden // 2, 3 * hidden + 1))), heads=heads, kv_heads=kv,
            vocab=align(int(rng.integers(96, 321))), batch=batch, seq=seq, layers=int(rng.integers(1, 4)),
            head_dim=head_dim if explicit_hd else None, rope=rope, max_pos=max(128, 2 * seq),
            eps=float(rng.choice([1e-5, 1e-6])), tie=bool(rng.random() < 0.4),
            storage=str(rng.choice(list(STORAGE_DTYPES))), layout=str(rng.choice(["4.x", "5.x"])),
            docs=docs, labels=labels, ignore_frac=float(rng.choice([0.0, 0.2, 0.6])),
            ids_dtype=str(rng.choice(["int32", "int64"])), explicit_positions=bool(rng.random() < 0.5),
            weight_std=float(rng.uniform(0.1, 0.2) * min(1.0, math.sqrt(48 / hidden)))))
        c = cases[-1]
        c.description = (f"random: h={c.hidden} H={c.heads} Hkv={c.kv_heads} d={c.head_dim or c.hidden // c.heads} "
                         f"L={c.layers} V={c.vocab} B={c.batch} S={c.seq} rope={rope['rope_type']} tie={c.tie} "
                         f"{c.storage} {c.layout} docs={docs} labels={labels} ignore={c.ignore_frac}")
    return cases


# ----------------------------------------------------------------------------- model

def hf_config(c: Case):
    kw = dict(vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate,
              num_hidden_layers=c.layers, num_attention_heads=c.heads, num_key_value_heads=c.kv_heads,
              max_position_embeddings=c.max_pos, rms_norm_eps=c.eps, tie_word_embeddings=c.tie,
              rope_parameters=dict(c.rope), hidden_act=c.act,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if c.arch == "llama":
        kw.update(attention_bias=c.attention_bias, mlp_bias=False)
    elif c.arch == "qwen3":
        kw.update(attention_bias=c.attention_bias, use_sliding_window=False)
    elif c.arch == "qwen2":
        kw.update(use_sliding_window=False)
    elif c.arch == "mistral":
        kw.update(sliding_window=c.window)
    if c.head_dim is not None or c.arch == "qwen3":  # Qwen3's config always carries head_dim
        kw["head_dim"] = c.head_dim or c.hidden // c.heads
    return ARCHS[c.arch][0](**kw)


def build_and_save(c: Case, model_dir: str):
    """Random weights (own generator, sorted names: independent of HF's init order), stored in c.storage."""
    model = ARCHS[c.arch][1](hf_config(c))
    g = torch.Generator().manual_seed(c.seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                std = c.weight_std * (c.qk_gain if name.endswith(("q_proj.weight", "k_proj.weight")) else 1.0)
                p.copy_(std * torch.randn(p.shape, generator=g))
    model = model.to(STORAGE_DTYPES[c.storage])
    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True  # 4.x-style signature; 5.x always writes safetensors
    model.save_pretrained(model_dir, **kwargs)
    gen_cfg = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    assert sorted(os.listdir(model_dir)) == ["config.json", "model.safetensors"], os.listdir(model_dir)
    if c.layout == "4.x":
        rewrite_config_4x(c, os.path.join(model_dir, "config.json"))


def rewrite_config_4x(c: Case, path: str):
    with open(path) as f:
        cfg = json.load(f)
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    if c.head_dim is None and c.arch != "qwen3":  # 4.x-era configs carry head_dim only where it is not hidden / heads
        cfg.pop("head_dim", None)
    if cfg["rope_scaling"] is not None and c.arch == "qwen2":  # as Qwen2.5's model cards write it
        cfg["rope_scaling"]["type"] = cfg["rope_scaling"].pop("rope_type")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def rope_inv_freq64(c: Case, length: int = 0) -> torch.Tensor:
    """RoPE inverse frequencies in float64 (HF computes them in float32). `length` (1 + the largest
    position id of the forward) matters to dynamic scaling alone, past max_position_embeddings."""
    d = c.head_dim or c.hidden // c.heads
    r = c.rope
    base = r["rope_theta"]
    if r["rope_type"] == "dynamic" and length > c.max_pos:
        base = base * ((r["factor"] * length / c.max_pos) - (r["factor"] - 1)) ** (d / (d - 2))
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if r["rope_type"] in ("default", "dynamic"):
        return inv
    if r["rope_type"] == "linear":
        return inv / r["factor"]
    if r["rope_type"] == "yarn":
        return yarn_inv_freq64(r, d)
    assert r["rope_type"] == "llama3", r
    factor, lo, hi = r["factor"], r["low_freq_factor"], r["high_freq_factor"]
    old = r["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    smooth = (old / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * inv / factor + smooth * inv
    out = torch.where(wavelen > old / lo, inv / factor, inv)
    return torch.where((wavelen >= old / hi) & (wavelen <= old / lo), mid, out)


def yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq64(r, d):
    """transformers' _compute_yarn_parameters in float64 (its ramp ends rounded as with truncate)."""
    base, factor, ctx = r["rope_theta"], r["factor"], r["original_max_position_embeddings"]
    fast, slow = r.get("beta_fast", 32.0), r.get("beta_slow", 1.0)

    def corr(rot):
        return d * math.log(ctx / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(fast), corr(slow)
    if r.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    pos = base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp
    return (1.0 / (factor * pos)) * (1 - keep) + (1.0 / pos) * keep


def attention_factor(c: Case):
    r = c.rope
    if r["rope_type"] != "yarn":
        return 1.0
    if "attention_factor" in r:
        return r["attention_factor"]
    return yarn_mscale(r["factor"])


def load_fp64(c: Case, model_dir: str, exact: bool):
    model = ARCHS[c.arch][1].from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    cfg = model.config
    rp = cfg.rope_parameters
    for k, v in c.rope.items():  # both config layouts must read back to the same RoPE
        assert rp.get(k) == v, f"{c.name}: config read back rope {k}={rp.get(k)!r}, wrote {v!r}"
    assert model.model.layers[0].self_attn.head_dim == (c.head_dim or c.hidden // c.heads)
    rot = model.model.rotary_emb
    inv64 = rope_inv_freq64(c)
    rel = ((rot.inv_freq.double() - inv64).abs() / inv64).max().item()
    assert rel < 1e-6, f"{c.name}: float64 RoPE inv_freq differs from HF's by {rel:.2e}"
    assert abs(rot.attention_scaling - attention_factor(c)) < 1e-12, (rot.attention_scaling, attention_factor(c))
    if exact:
        for m in model.modules():
            if type(m).__name__.endswith("RMSNorm"):  # every family's (incl. Qwen3's q/k norms)
                m.forward = types.MethodType(_rmsnorm64, m)
        rot.inv_freq64 = lambda length: rope_inv_freq64(c, length)
        rot.forward = types.MethodType(_rotary64, rot)
    return model


def _rmsnorm64(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rotary64(self, x, position_ids):
    inv = self.inv_freq64(int(position_ids.max()) + 1)  # dynamic RoPE: the forward's length, as HF takes it
    freqs = position_ids[..., None].to(torch.float64) * inv.to(x.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def _eager_attention64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    # query: [B, H, S, d]; key/value: [B, Hkv, S, d]; softmax kept in the input dtype (float64)
    rep = module.num_key_value_groups
    key = key.repeat_interleave(rep, dim=1)
    value = value.repeat_interleave(rep, dim=1)
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


class Float64Attention:
    """Swaps HF's eager attention (softmax in float32) for a float64 one while active, in every family."""

    def __enter__(self):
        self.saved = {m: m.eager_attention_forward for _, _, m in ARCHS.values()}
        for m in self.saved:
            m.eager_attention_forward = _eager_attention64

    def __exit__(self, *exc):
        for m, f in self.saved.items():
            m.eager_attention_forward = f


# ----------------------------------------------------------------------------- batch and loss

def make_batch(c: Case):
    g = torch.Generator().manual_seed(c.seed + 7919)
    B, S = c.batch, c.seq
    ids = torch.randint(0, c.vocab, (B, S), generator=g)
    batch = {"input_ids": ids}
    if c.docs is not None:
        assert len(c.docs) == B and all(sum(r) == S and min(r) >= 1 for r in c.docs), c.docs
        batch["position_ids"] = torch.stack([torch.cat([torch.arange(n) for n in row]) for row in c.docs])
    elif c.explicit_positions:
        batch["position_ids"] = torch.arange(S).repeat(B, 1)

    def ignore(t):
        return torch.where(torch.rand(t.shape, generator=g) < c.ignore_frac, torch.full_like(t, IGNORE), t)

    if c.labels == "labels":
        other = torch.randint(0, c.vocab, (B, S), generator=g)
        lab = torch.where(torch.rand((B, S), generator=g) < 0.25, other, ids)
        batch["labels"] = ignore(lab)
    elif c.labels == "shift_labels":
        sl = ignore(torch.randint(0, c.vocab, (B, S), generator=g))
        sl[0, -1] = int(torch.randint(0, c.vocab, (1,), generator=g))  # shift_labels may target past the end
        batch["shift_labels"] = sl
    else:
        assert c.labels == "none", c.labels
    return batch


def contract_targets(batch):
    """The engine's shifting rule (see module docstring)."""
    if "shift_labels" in batch:
        return batch["shift_labels"].clone()
    lab = batch.get("labels", batch["input_ids"])
    tgt = torch.full_like(lab, IGNORE)
    tgt[:, :-1] = lab[:, 1:]
    if "position_ids" in batch:
        tgt[:, :-1][batch["position_ids"][:, 1:] == 0] = IGNORE
    return tgt


def documents(batch):
    """Per row, (start, end) of each document: a new one wherever position_ids == 0."""
    B, S = batch["input_ids"].shape
    if "position_ids" not in batch:
        return [[(0, S)] for _ in range(B)]
    out = []
    for row in batch["position_ids"]:
        starts = [0] + [i for i in range(1, S) if row[i] == 0]
        out.append([(s, e) for s, e in zip(starts, starts[1:] + [S])])
    return out


def block_causal_mask(batch, dtype, window=None):
    """[B, 1, S, S] additive mask: causal inside each document (and the window), blocked across documents."""
    B, S = batch["input_ids"].shape
    doc = torch.zeros(B, S, dtype=torch.long)
    for b, docs in enumerate(documents(batch)):
        for k, (s, e) in enumerate(docs):
            doc[b, s:e] = k
    allowed = (doc[:, :, None] == doc[:, None, :]) & torch.ones(S, S, dtype=torch.bool).tril()
    if window is not None:  # query i sees keys j > i - window
        allowed &= ~torch.ones(S, S, dtype=torch.bool).tril(-window)
    mask = torch.zeros(B, 1, S, S, dtype=dtype)
    return mask.masked_fill(~allowed[:, None], torch.finfo(dtype).min)


def loss_and_grads(model, batch, tgt, mode, window=None):
    """mode: per_doc (each document its own sequence), packed (HF reads position_ids), mask4d."""
    model.zero_grad(set_to_none=True)
    ids = batch["input_ids"].long()
    B, S = ids.shape
    pos = batch.get("position_ids")
    count = int((tgt != IGNORE).sum())
    token_loss = torch.zeros(B, S, dtype=torch.float64)
    if mode == "per_doc":
        for b, docs in enumerate(documents(batch)):
            for s, e in docs:
                p = torch.arange(e - s)[None] if pos is None else pos[b:b + 1, s:e].long()
                assert torch.equal(p[0], torch.arange(e - s)), "document positions must be 0..len-1"
                logits = model(input_ids=ids[b:b + 1, s:e], position_ids=p, use_cache=False).logits[0]
                token_loss[b, s:e] = F.cross_entropy(logits.double(), tgt[b, s:e], ignore_index=IGNORE,
                                                     reduction="none")
    else:
        kw = {} if pos is None else {"position_ids": pos.long()}
        if mode == "mask4d":
            kw["attention_mask"] = block_causal_mask(batch, next(model.parameters()).dtype, window)
        logits = model(input_ids=ids, use_cache=False, **kw).logits
        token_loss = F.cross_entropy(logits.double().reshape(B * S, -1), tgt.reshape(-1), ignore_index=IGNORE,
                                     reduction="none").reshape(B, S)
    loss = token_loss.sum() / count
    loss.backward()
    grads = {n: p.grad.detach().double().clone() for n, p in model.named_parameters()}
    return loss.detach(), token_loss.detach(), grads


def compare(a, b):
    """(loss rel err, worst grad rel err, its name) of result a against reference b."""
    (la, _, ga), (lb, _, gb) = a, b
    assert ga.keys() == gb.keys()
    worst, worst_name = 0.0, ""
    for n in gb:
        r = ((ga[n] - gb[n]).norm() / gb[n].norm()).item()
        if r > worst or math.isnan(r):
            worst, worst_name = r, n
    return abs(la.item() - lb.item()) / abs(lb.item()), worst, worst_name


# ----------------------------------------------------------------------------- one case

def make_case(c: Case, out_root: str):
    case_dir = os.path.join(out_root, c.name)
    if os.path.exists(case_dir):
        shutil.rmtree(case_dir)
    model_dir = os.path.join(case_dir, "model")
    os.makedirs(model_dir)
    assert c.seq % 8 == 0, f"{c.name}: S={c.seq} must be divisible by 8"
    build_and_save(c, model_dir)
    batch = make_batch(c)
    tgt = contract_targets(batch)
    count = int((tgt != IGNORE).sum())
    assert count > 0, f"{c.name}: no targets"
    checks = {}

    with Float64Attention():
        model = load_fp64(c, model_dir, exact=True)
        ref = loss_and_grads(model, batch, tgt, "per_doc")
        packed_docs = any(len(d) > 1 for d in documents(batch))
        for mode in ("packed", "mask4d"):
            if mode == "mask4d" and not packed_docs and "position_ids" not in batch:
                continue
            lr, gr, gn = compare(loss_and_grads(model, batch, tgt, mode, c.window), ref)
            checks[f"fp64_{mode}_vs_per_doc"] = {"loss_rel": lr, "grad_rel_max": gr, "worst": gn}
            assert lr < 1e-12 and gr < 1e-10, f"{c.name}: {mode} forward != per-document: {lr:.2e} {gr:.2e} {gn}"
        names = [n for n, _ in model.named_parameters()]
        del model

    # Unmodified HF (float32 RMSNorm/RoPE/softmax inside a float64 model) must agree to fp32 rounding.
    hf = load_fp64(c, model_dir, exact=False)
    lr, gr, gn = compare(loss_and_grads(hf, batch, tgt, "packed"), ref)
    checks["hf_fp32_islands_vs_ref"] = {"loss_rel": lr, "grad_rel_max": gr, "worst": gn}
    assert lr < 1e-5 and gr < 1e-4, f"{c.name}: unmodified HF differs from reference: {lr:.2e} {gr:.2e} {gn}"
    if not packed_docs:  # HF's own loss (float32 logits) with the same labels: checks our shift rule
        ids = batch["input_ids"].long()
        with torch.no_grad():
            if "shift_labels" in batch:
                hf_loss = hf(input_ids=ids, labels=batch["shift_labels"], shift_labels=batch["shift_labels"]).loss
            else:
                hf_loss = hf(input_ids=ids, labels=batch.get("labels", ids)).loss
        rel = abs(hf_loss.item() - ref[0].item()) / ref[0].item()
        checks["hf_builtin_loss_rel"] = rel
        assert rel < 1e-5, f"{c.name}: HF built-in loss {hf_loss.item()} != reference {ref[0].item()}"
    del hf

    tied = c.tie
    assert ("lm_head.weight" in names) != tied, names
    loss, token_loss, grads = ref
    tensors = {"loss": loss.reshape(1).numpy(), "targets": tgt.numpy().astype(np.int64),
               "token_loss": token_loss.numpy()}
    for n in names:
        tensors[f"grad.{n}"] = grads[n].numpy()
    save_file(tensors, os.path.join(case_dir, "reference.safetensors"), metadata={"case": c.name})
    np_batch = {}
    for k, v in batch.items():
        np_batch[k] = v.numpy().astype(c.ids_dtype)
    save_file(np_batch, os.path.join(case_dir, "batch.safetensors"))

    info = {
        "name": c.name, "description": c.description, "seed": c.seed,
        # fields added after the first cases are left out at their defaults, so regenerating keeps
        # the older cases' files byte-identical
        "case": {k: v for k, v in dataclasses.asdict(c).items() if not (k == "act" and v == "silu")},
        "batch": {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in np_batch.items()},
        "documents": [[e - s for s, e in d] for d in documents(batch)],
        "n_targets": count, "reference_loss": loss.item(),
        "n_params": sum(grads[n].numel() for n in names), "parameters": names,
        "checks": checks,
        "made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                      "python": sys.version.split()[0]},
    }
    write_json(os.path.join(case_dir, "case.json"), info)
    return info


def write_json(path, obj):
    """Indented, with a final newline (the case files' form)."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (one sub-folder per case)")
    ap.add_argument("--random", type=int, default=0, help="make N random cases instead of the committed set")
    ap.add_argument("--seed", type=int, default=0, help="seed for --random")
    ap.add_argument("--aligned", action="store_true", help="--random: dims multiples of 8")
    ap.add_argument("--only", nargs="*", help="case names to (re)make")
    args = ap.parse_args()
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    cases = random_cases(args.random, args.seed, args.aligned) if args.random else committed_cases()
    if args.only:
        cases = [c for c in cases if c.name in args.only]
    os.makedirs(args.out, exist_ok=True)
    print(f"{'case':<12} {'B':>2} {'S':>3} {'targets':>7} {'params':>7} {'loss':>20} {'hf32 loss':>9} "
          f"{'hf32 grad':>9} {'packed':>9}  size")
    for c in cases:
        info = make_case(c, args.out)
        ch = info["checks"]
        packed = max((v["grad_rel_max"] for k, v in ch.items() if k.startswith("fp64_")), default=float("nan"))
        size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(args.out, c.name))
                   for f in fs)
        print(f"{c.name:<12} {c.batch:>2} {c.seq:>3} {info['n_targets']:>7} {info['n_params']:>7} "
              f"{info['reference_loss']:>20.15f} {ch['hf_fp32_islands_vs_ref']['loss_rel']:>9.1e} "
              f"{ch['hf_fp32_islands_vs_ref']['grad_rel_max']:>9.1e} {packed:>9.1e}  {size / 1024:.0f} KiB",
              flush=True)


if __name__ == "__main__":
    main()
