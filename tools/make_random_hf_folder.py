#!/usr/bin/env python3
"""Writes a Hugging Face Llama folder of random bf16 weights, fast, for timing loads (start-up
benchmarks, issue 29): config.json and model-0000K-of-0000N.safetensors shards with their index.
The values come from one random block repeated (what a load costs does not depend on them), drawn
as N(0, 0.02) with the norms at 1, so a step on the folder is finite.

  python3 tools/make_random_hf_folder.py --out /tmp/hf8b --shape llama-3.1-8b
"""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8),
    "tiny": dict(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
}


def config_for(shape):
    c = dict(SHAPES[shape], architectures=["LlamaForCausalLM"], model_type="llama", max_position_embeddings=131072,
             rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, hidden_act="silu",
             torch_dtype="bfloat16", bos_token_id=128000, eos_token_id=128001,
             rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                               original_max_position_embeddings=8192))
    return c


def tensors(c):
    d, f, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    yield "model.embed_tokens.weight", (c["vocab_size"], d)
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        yield p + "self_attn.q_proj.weight", (d, d)
        yield p + "self_attn.k_proj.weight", (kv, d)
        yield p + "self_attn.v_proj.weight", (kv, d)
        yield p + "self_attn.o_proj.weight", (d, d)
        yield p + "post_attention_layernorm.weight", (d,)
        yield p + "mlp.gate_proj.weight", (f, d)
        yield p + "mlp.up_proj.weight", (f, d)
        yield p + "mlp.down_proj.weight", (d, f)
    yield "model.norm.weight", (d,)
    yield "lm_head.weight", (c["vocab_size"], d)


def bf16_bytes(n, block, ones):
    """n bf16 values as bytes: 1.0 for a norm, else the random block repeated."""
    if ones:
        return np.full(n, 0x3F80, dtype=np.uint16).tobytes()
    reps = -(-n // block.size)
    return np.tile(block, reps)[:n].tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    ap.add_argument("--shard-gib", type=float, default=4.0)
    a = ap.parse_args()
    c = config_for(a.shape)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2)
    rng = np.random.default_rng(0)
    block = (rng.standard_normal(1 << 22, dtype=np.float32) * 0.02).view(np.uint32)
    block = ((block + 0x8000) >> 16).astype(np.uint16)  # round to nearest bf16 (no NaNs in this range)
    shards, cur, size = [], [], 0
    limit = int(a.shard_gib * (1 << 30))
    for name, shape in tensors(c):
        n = int(np.prod(shape))
        if cur and size + 2 * n > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape, n))
        size += 2 * n
    shards.append(cur)
    weight_map, total = {}, 0
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {}, 0
        for name, shape, n in shard:
            header[name] = dict(dtype="BF16", shape=list(shape), data_offsets=[off, off + 2 * n])
            off += 2 * n
            weight_map[name] = fname
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(a.out, fname), "wb") as fh:
            fh.write(struct.pack("<Q", len(text)) + text)
            for name, shape, n in shard:
                fh.write(bf16_bytes(n, block, len(shape) == 1))
        total += off
        print(f"make_random_hf_folder: {fname} {off / 2**30:.2f} GiB", flush=True)
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as fh:
        json.dump(dict(metadata=dict(total_size=total), weight_map=weight_map), fh, indent=1)
    print(f"make_random_hf_folder: {a.out}: {total / 2**30:.2f} GiB in {len(shards)} shards")


if __name__ == "__main__":
    main()
