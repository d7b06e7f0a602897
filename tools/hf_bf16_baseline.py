#!/usr/bin/env python3
"""How close Hugging Face transformers itself gets to the float64 references of
fixtures/ when it runs in bf16 on the GPU (sdpa attention): the baseline for
judging the CUDA backend's bf16 errors on the same cases.

    python3 tools/hf_bf16_baseline.py --cases fixtures
"""
import argparse
import glob
import os

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file
from transformers import LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="fixtures")
    a = ap.parse_args()
    print(f"{'case':16s} {'loss rel':>10s} {'worst grad rel':>15s}  worst grad")
    for case in sorted(glob.glob(os.path.join(a.cases, "*", "reference.safetensors"))):
        d = os.path.dirname(case)
        ref = load_file(case)
        batch = load_file(os.path.join(d, "batch.safetensors"))
        model = LlamaForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").cuda()
        ids = torch.tensor(batch["input_ids"]).long().cuda()
        pos = torch.tensor(batch["position_ids"]).long().cuda() if "position_ids" in batch else None
        targets = torch.tensor(ref["targets"]).long().cuda()
        logits = model(input_ids=ids, position_ids=pos).logits.float()
        n = (targets != -100).sum()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100,
                               reduction="sum") / n
        loss.backward()
        ref_loss = float(ref["loss"][0])
        worst, worst_name = 0.0, ""
        for name, p in model.named_parameters():
            g = p.grad.float().cpu().numpy().astype(np.float64)
            r = ref["grad." + name]
            e = np.linalg.norm(g - r) / np.linalg.norm(r)
            if e > worst:
                worst, worst_name = e, name
        print(f"{os.path.basename(d):16s} {abs(loss.item() - ref_loss) / abs(ref_loss):10.2e} {worst:15.2e}  {worst_name}")


if __name__ == "__main__":
    main()
