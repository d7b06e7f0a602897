#!/usr/bin/env python3
"""A float64 Llama reference in numpy, for the command-line tests (no torch needed).

  llama_ref.py make-model DIR VOCAB              a tiny random Llama folder (config.json + model.safetensors, F32)
  llama_ref.py pack-loss DATA MODEL S [--no-mask] the mean cross-entropy of one epoch of `ulysses prepare` shards
                                                  packed as the loader packs them (rows of S, positions restarting
                                                  at documents and rows, no target across either, masked tokens no
                                                  targets), computed document piece by piece in float64
  llama_ref.py greedy MODEL N ID...               N greedy tokens after the prompt ids
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
          "torch_dtype": "float32"}


def make_model(out, vocab):
    c = dict(CONFIG, vocab_size=vocab)
    h, f, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    d = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    rng = np.random.default_rng(5)
    w = {"model.embed_tokens.weight": rng.normal(0, 1.0, (vocab, h)), "model.norm.weight": 1 + rng.normal(0, .1, h),
         "lm_head.weight": rng.normal(0, 0.3, (vocab, h))}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + rng.normal(0, .1, h)
        w[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, .1, h)
        for n, shape in (("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (kv, h)), ("self_attn.v_proj", (kv, h)),
                         ("self_attn.o_proj", (h, h)), ("mlp.gate_proj", (f, h)), ("mlp.up_proj", (f, h)),
                         ("mlp.down_proj", (h, f))):
            w[p + n + ".weight"] = rng.normal(0, 0.25, shape)
    os.makedirs(out, exist_ok=True)
    save_file({k: v.astype(np.float32) for k, v in w.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2)


class Model:
    def __init__(self, folder):
        self.c = json.load(open(os.path.join(folder, "config.json")))
        self.w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}

    def logits(self, ids):  # ids: one document piece, positions 0..n-1
        c, w = self.c, self.w
        n, H, Hkv = len(ids), c["num_attention_heads"], c["num_key_value_heads"]
        h = c["hidden_size"]
        d = c.get("head_dim") or h // H
        eps = c["rms_norm_eps"]
        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        inv = 1.0 / c.get("rope_theta", 10000.0) ** (np.arange(0, d, 2) / d)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

        def norm(v, g):
            return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

        def rope(t):  # [n, heads, d]
            rot = np.concatenate([-t[..., d // 2:], t[..., :d // 2]], -1)
            return t * cos[:, None, :] + rot * sin[:, None, :]

        mask = np.triu(np.full((n, n), -np.inf), 1)
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            a = norm(x, w[p + "input_layernorm.weight"])
            q = rope((a @ w[p + "self_attn.q_proj.weight"].T).reshape(n, H, d))
            k = rope((a @ w[p + "self_attn.k_proj.weight"].T).reshape(n, Hkv, d))
            v = (a @ w[p + "self_attn.v_proj.weight"].T).reshape(n, Hkv, d)
            k, v = np.repeat(k, H // Hkv, 1), np.repeat(v, H // Hkv, 1)
            s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            x = x + np.einsum("hqk,khd->qhd", s, v).reshape(n, H * d) @ w[p + "self_attn.o_proj.weight"].T
            a = norm(x, w[p + "post_attention_layernorm.weight"])
            g = a @ w[p + "mlp.gate_proj.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * (a @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        return norm(x, w["model.norm.weight"]) @ head.T


def read_shards(data):
    m = json.load(open(os.path.join(data, "manifest.json")))
    toks, starts, masks = [], [], []
    base = 0
    for s in m["train"]:
        p = os.path.join(data, s["file"])
        version = int(np.fromfile(p, np.uint32, 1, offset=8)[0])
        n, dcount, _, tok_off, idx_off = (int(v) for v in np.fromfile(p, np.uint64, 5, offset=16))
        toks.append(np.fromfile(p, np.uint32, n, offset=tok_off).astype(np.int64))
        idx = np.fromfile(p, np.uint64, dcount + 1, offset=idx_off).astype(np.int64)
        starts.extend((base + idx[:-1]).tolist())
        masks.append(np.fromfile(p, np.uint8, n, offset=idx_off + 8 * (dcount + 1)) if version == 2
                     else np.ones(n, np.uint8))
        base += n
    return np.concatenate(toks), set(starts), np.concatenate(masks)


def pack_loss(data, folder, S, use_mask):
    model = Model(folder)
    tokens, starts, mask = read_shards(data)
    if not use_mask:
        mask = np.ones_like(mask)
    total, count = 0.0, 0
    for r in range(len(tokens) // S):
        lo, hi = r * S, (r + 1) * S
        cuts = sorted({lo} | {t for t in starts if lo < t < hi}) + [hi]
        for a, b in zip(cuts[:-1], cuts[1:]):  # one document piece: attends only to itself
            ids = tokens[a:b]
            z = model.logits(ids)
            z = z - z.max(-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
            for i in range(len(ids) - 1):
                if mask[a + i + 1]:
                    total -= logp[i, ids[i + 1]]
                    count += 1
    return total / count, count


def greedy(folder, n, ids):
    model = Model(folder)
    ids = list(ids)
    out = []
    for _ in range(n):
        z = model.logits(ids)[-1]
        t = int(np.argmax(z))
        ids.append(t)
        out.append(t)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "make-model":
        make_model(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "pack-loss":
        loss, count = pack_loss(sys.argv[2], sys.argv[3], int(sys.argv[4]), "--no-mask" not in sys.argv)
        print(repr(float(loss)), count)
    elif sys.argv[1] == "greedy":
        print(" ".join(map(str, greedy(sys.argv[2], int(sys.argv[3]), [int(a) for a in sys.argv[4:]]))))
