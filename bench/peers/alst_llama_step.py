#!/usr/bin/env python3
"""The ALST peer for `ulysses bench`: Arctic Long Sequence Training's recipe on one GPU, one
training step (forward + backward) of a named shape on random weights and tokens, bf16. The
shapes are hf_llama_step.py's (the engine's): Llama (llama-3.1-8b, llama-3.2-1b), Qwen2
(qwen2.5-7b, qwen2.5-1.5b), Qwen3 (qwen3-8b) and Mistral (mistral-7b); the file keeps its first
family's name, by which other scripts and the docs know it.

The recipe, as ArcticTraining assembles it for a causal LM (its trainer with `tiled_mlp_compute`,
a Liger model, activation checkpointing with `activation_checkpoint_cpu_offload`):
  - Hugging Face transformers' causal LM of the family (LlamaForCausalLM, Qwen2ForCausalLM,
    Qwen3ForCausalLM, MistralForCausalLM), sdpa attention;
  - Liger-Kernel's RoPE, RMSNorm (Qwen3's per-head q/k norms too) and fused linear cross-entropy
    (the logits never materialised), through the family's apply_liger_kernel_to_<model_type>,
    Liger's SwiGLU left off because the tiled MLP replaces the MLP's forward;
  - DeepSpeed's TiledMLP (ulysses_sp.py) on every layer's MLP, ceil(seq / hidden) shards as
    ArcticTraining derives them;
  - gradient checkpointing of every layer, torch's reentrant CheckpointFunction replaced by
    ArcticTraining's CheckpointFunctionWithCPUOffload (each layer's input kept in host memory).
On one GPU the Ulysses all-to-alls are absent (sequence-parallel degree 1), as in our own bench.

The packages are not on the GPU machine: scripts/fetch-alst-wheels.sh downloads them here (PyPI)
into .deps/alst-wheels, bench/device/pack.sh carries them, and this script installs what is
missing into a private folder (--site) with pip's offline mode before importing them:

    python3 bench/peers/alst_llama_step.py --wheels .carry/alst-wheels --shape llama-3.1-8b --seq 131072

Prints and writes step time, tokens/s, peak GPU memory and peak host memory (resident set of the
process); an out-of-memory is reported as a result ("oom": true), not a crash.
"""
import argparse
import importlib.util
import math
import os
import resource
import subprocess
import sys

# The distributions the recipe needs, with the module each provides; installed only when absent.
PACKAGES = [("deepspeed", "deepspeed"), ("liger_kernel", "liger-kernel"), ("arctic_training", "arctic-training"),
            ("hjson", "hjson"), ("cpuinfo", "py-cpuinfo"), ("einops", "einops"), ("msgpack", "msgpack"),
            ("ninja", "ninja"), ("pydantic", "pydantic"), ("pydantic_core", "pydantic-core"),
            ("annotated_types", "annotated-types"), ("typing_inspection", "typing-inspection"),
            ("psutil", "psutil"), ("packaging", "packaging"), ("tqdm", "tqdm")]


def install_missing(wheels, site):
    os.makedirs(site, exist_ok=True)
    sys.path.insert(0, site)
    missing = [dist for mod, dist in PACKAGES if importlib.util.find_spec(mod) is None]
    if not missing:
        return
    if not wheels or not os.path.isdir(wheels):
        sys.exit(f"alst peer: {', '.join(missing)} not installed and no wheel folder given "
                 f"(run scripts/fetch-alst-wheels.sh here and pass --wheels)")
    print(f"alst peer: installing {' '.join(missing)} from {wheels} into {site}", flush=True)
    # --no-deps: the list above is the closure the recipe imports; torch, transformers and triton
    # are the machine's own.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--find-links", wheels, "--target", site] + missing, check=True)
    importlib.invalidate_caches()


def load_arctic_checkpoint_patch():
    # arctic_training/__init__.py imports the whole trainer (datasets, wandb, ...); the patch lives in a
    # module that needs torch alone, so load that file by itself.
    spec = importlib.util.find_spec("arctic_training")
    path = os.path.join(list(spec.submodule_search_locations)[0], "monkey_patches.py")
    s = importlib.util.spec_from_file_location("arctic_monkey_patches", path)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-3.1-8b")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--seq", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--wheels", default=".carry/alst-wheels")
    ap.add_argument("--site", default="/tmp/ulysses_alst_site")
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    install_missing(a.wheels, a.site)
    os.environ.setdefault("DS_ACCELERATOR", "cuda")
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_llama_step import SHAPES, family, make_model, report, time_steps

    if a.shape not in SHAPES:
        sys.exit(f"alst peer: unknown --shape {a.shape} (one of {', '.join(sorted(SHAPES))})")
    # The family's transformers module (modeling_llama, modeling_qwen2, ...), its MLP class and Liger's patch.
    fam = family(a.shape)
    modeling = importlib.import_module(f"transformers.models.{fam}.modeling_{fam}")
    mlp_class = getattr(modeling, {"llama": "LlamaMLP", "qwen2": "Qwen2MLP", "qwen3": "Qwen3MLP",
                                   "mistral": "MistralMLP"}[fam])
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP
    import liger_kernel.transformers
    import importlib.metadata as md

    apply_liger_kernel = getattr(liger_kernel.transformers, f"apply_liger_kernel_to_{fam}")

    versions = {d: md.version(d) for d in ("torch", "transformers", "deepspeed", "liger-kernel", "arctic-training")}
    print("alst peer: " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)

    # Liger: RoPE, RMSNorm, fused linear cross-entropy; its SwiGLU off (the tiled MLP owns the MLP).
    apply_liger_kernel(rope=True, rms_norm=True, swiglu=False, cross_entropy=False, fused_linear_cross_entropy=True)

    def tiled_mlp_forward(self, x):
        shards = math.ceil(x.shape[-2] / x.shape[-1])
        params = [self.down_proj.weight, self.gate_proj.weight, self.up_proj.weight]
        return TiledMLP.apply(lambda mlp, t: mlp.down_proj(mlp.act_fn(mlp.gate_proj(t)) * mlp.up_proj(t)),
                              self, x, shards, params)

    mlp_class.forward = tiled_mlp_forward
    load_arctic_checkpoint_patch().monkey_patch_checkpoint_function_with_cpu_offload()

    model = make_model(a.shape, a.layers)
    # The CPU-offload patch replaces the reentrant CheckpointFunction, so checkpoint reentrantly.
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    times, oom = time_steps(model, a.seq, a.warmup, a.steps, "alst")
    res = {"peer": "alst", "versions": versions, "shape": a.shape, "layers": model.config.num_hidden_layers,
           "seq_len": a.seq, "oom": oom, "peak_device_bytes": torch.cuda.max_memory_allocated(),
           "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    report(res, times, "ALST_JSON ", a.json)


if __name__ == "__main__":
    main()
