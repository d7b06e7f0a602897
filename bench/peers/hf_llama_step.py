#!/usr/bin/env python3
"""The peer for `ulysses bench`: Hugging Face transformers, one training step
(forward + backward) of a named shape on random weights and tokens, bf16, sdpa
attention, with gradient checkpointing, on one GPU. The shapes are the engine's
(`ulysses bench --shape`) of its four families, each built with its own
transformers class: Llama (llama-3.1-8b, llama-3.2-1b: LlamaForCausalLM), Qwen2
(qwen2.5-7b, qwen2.5-1.5b: Qwen2ForCausalLM, q/k/v biases, no sliding window),
Qwen3 (qwen3-8b: Qwen3ForCausalLM, per-head q/k RMSNorm) and Mistral (mistral-7b,
v0.3: MistralForCausalLM, no sliding window). The file keeps its first family's
name, by which other scripts and the docs know it.

    python3 bench/peers/hf_llama_step.py --shape llama-3.1-8b --seq 32768 --json out.json
    python3 bench/peers/hf_llama_step.py --shape qwen2.5-7b --seq 32768

With --adamw each step ends with torch.optim.AdamW(fused=True) on the bf16
parameters (its state in bf16 too: the cheapest full step transformers offers;
the engine keeps fp32 masters and moments). Prints and writes step time,
tokens/s and peak GPU memory; an out-of-memory is reported as a result
("oom": true), not a crash. With --lora-r R the model is wrapped by PEFT (rank R,
alpha 2R, all seven projections, adapters in float32 under bf16 autocast) and
--adamw updates only the adapters: the LoRA peer.
"""
import argparse
import json
import time

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

# The transformers classes of each family (model_type): config, causal LM.
FAMILIES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
            "qwen3": (Qwen3Config, Qwen3ForCausalLM), "mistral": (MistralConfig, MistralForCausalLM)}
# The shapes of src/io/hf_config.cpp (named_model_config); a shape's family is its name's prefix (see family()).
SHAPES = {
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
                         rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position_embeddings=8192)),
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
                         rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position_embeddings=8192)),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       max_position_embeddings=32768, tie_word_embeddings=False, use_sliding_window=False,
                       sliding_window=None),
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                         max_position_embeddings=32768, tie_word_embeddings=True, use_sliding_window=False,
                         sliding_window=None),
    "qwen3-8b": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                     rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False,
                     use_sliding_window=False, sliding_window=None),
    "mistral-7b": dict(vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
                       rope_theta=1000000.0, max_position_embeddings=32768, tie_word_embeddings=False,
                       sliding_window=None),
}


def family(shape):
    """The shape's family, a key of FAMILIES: llama-3.1-8b -> llama, qwen2.5-7b -> qwen2, qwen3-8b -> qwen3."""
    name = shape.split("-")[0]
    return name.split(".")[0] if name.startswith("qwen") else name


def make_config(shape, layers=0):
    """The transformers config of the shape (its family's class), sdpa attention; layers > 0 replaces the layer count."""
    kw = dict(SHAPES[shape])
    if layers:
        kw["num_hidden_layers"] = layers
    cfg = FAMILIES[family(shape)][0](**kw)
    cfg._attn_implementation = "sdpa"
    return cfg


def make_model(shape, layers=0, device="cuda"):
    """The shape's causal LM (LlamaForCausalLM, Qwen2ForCausalLM, ...) on the GPU (or device: "meta" or "cpu" to
    check a shape off the GPU): random bf16 weights (seed 0), sdpa attention, training mode."""
    cfg = make_config(shape, layers)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = FAMILIES[family(shape)][1](cfg)
    torch.set_default_dtype(torch.float32)
    model.train()
    return model


def add_lora(model, r):
    """transformers + PEFT as a LoRA fine-tune runs: adapters of rank r (alpha 2r, no dropout) on all seven
    projections, in float32 under bf16 autocast (as Trainer's bf16=True), the base frozen in bf16."""
    from peft import LoraConfig, get_peft_model
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets))


def time_steps(model, seq, warmup, steps, label, opt=None, autocast=False):
    """Runs warmup + steps training steps on random tokens; returns (sorted step times, out of memory)."""
    ids = torch.randint(0, model.config.vocab_size, (1, seq), device="cuda")
    times, oom = [], False
    torch.cuda.reset_peak_memory_stats()
    try:
        for i in range(warmup + steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            if opt is not None:
                opt.step()
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            print(f"{label} step {i + 1}{' (warm-up)' if i < warmup else ''}: {dt:.3f} s, loss {out.loss.item():.4f}",
                  flush=True)
            if i >= warmup:
                times.append(dt)
    except torch.OutOfMemoryError:
        oom = True
    return sorted(times), oom


def report(res, times, prefix, json_path):
    """Adds the median step time and tokens/s to res, prints it after prefix, writes it to json_path if given."""
    if times:
        t = times[len(times) // 2]
        res.update(step_time_s=t, tokens_per_s=res["seq_len"] / t)
    print(prefix + json.dumps(res), flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(res, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--seq", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--adamw", action="store_true", help="a full step: fused AdamW after the backward")
    ap.add_argument("--lora-r", type=int, default=0, help="LoRA through PEFT with this rank (0: full)")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    model = make_model(a.shape, a.layers)
    if not a.no_checkpointing:
        # With LoRA non-reentrant: the frozen embeddings' output does not require gradients.
        kwargs = {"gradient_checkpointing_kwargs": {"use_reentrant": False}} if a.lora_r else {}
        model.gradient_checkpointing_enable(**kwargs)
    if a.lora_r:
        model = add_lora(model, a.lora_r)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True) if a.adamw else None
    times, oom = time_steps(model, a.seq, a.warmup, a.steps, "hf", opt, autocast=a.lora_r > 0)
    res = {"peer": "transformers + PEFT" if a.lora_r else "transformers", "shape": a.shape,
           "layers": model.config.num_hidden_layers, "seq_len": a.seq,
           "checkpointing": not a.no_checkpointing, "adamw": a.adamw, "lora_r": a.lora_r, "oom": oom,
           "peak_device_bytes": torch.cuda.max_memory_allocated()}
    report(res, times, "HF_JSON ", a.json)


if __name__ == "__main__":
    main()
