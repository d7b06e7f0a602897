#!/usr/bin/env python3
"""A trained checkpoint's model/ folder loads in Hugging Face transformers as it
is, and gives the engine's loss on a batch.

    python3 tools/check_export.py --ulysses build/ulysses --model runs/demo/checkpoints/step-0000060/model \
        [--seq 256] [--device cpu|cuda]

Builds a batch of random in-vocabulary tokens (two packed documents, scored one by one in transformers), runs
`ulysses loss-grad` on it, loads the folder with LlamaForCausalLM.from_pretrained
(float32) and computes the same loss; exits non-zero when they differ by more
than --tol (relative, default 1e-4).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file, save_file
from transformers import LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ulysses", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()

    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager").to(a.device)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, size=(1, a.seq), dtype=np.int64)
    cut = a.seq // 3
    pos = np.concatenate([np.arange(cut), np.arange(a.seq - cut)]).reshape(1, a.seq).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        batch = os.path.join(tmp, "batch.safetensors")
        out = os.path.join(tmp, "out.safetensors")
        save_file({"input_ids": ids, "position_ids": pos}, batch)
        subprocess.run([a.ulysses, "loss-grad", "--model", a.model, "--batch", batch, "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
        ours = float(load_file(out)["loss"][0])

    # The engine's contract: labels = input_ids shifted, no target across a
    # document start. transformers runs each document on its own, so the check
    # does not depend on how its attention implementations treat packed positions.
    starts = [i for i in range(a.seq) if pos[0, i] == 0] + [a.seq]
    total, count = 0.0, 0
    with torch.no_grad():
        for b, e in zip(starts[:-1], starts[1:]):
            doc = torch.tensor(ids[:, b:e], device=a.device)
            logits = model(input_ids=doc).logits.float()
            total += F.cross_entropy(logits[0, :-1], doc[0, 1:], reduction="sum").item()
            count += e - b - 1
    ref = total / count
    rel = abs(ours - ref) / abs(ref)
    print(f"transformers loss {ref:.6f}, ulysses loss {ours:.6f}, relative difference {rel:.2e} "
          f"({'ok' if rel <= a.tol else 'FAIL'}; model {a.model})")
    sys.exit(0 if rel <= a.tol else 1)


if __name__ == "__main__":
    main()
