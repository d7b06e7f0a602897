#!/usr/bin/env python3
"""Does PEFT read an adapter folder as we do? Loads the base model folder and the adapter with
transformers + PEFT (PeftModel.from_pretrained) in float64, and compares the loss it gives on a
batch with `ulysses loss-grad --lora-adapter` on the same files.

  python3 tools/check_peft_adapter.py --ulysses build/ulysses --model BASE --adapter ADAPTER [--seq 32]
      [--merged DIR]

--merged: also a folder from `ulysses merge-lora` (float32): every weight equals PEFT's
merge_and_unload of the same base and adapter within --merge-tol, and transformers gives it the
adapter's loss.

The batch is random token ids (one document per row, every next token a target), written to a
temporary batch file. Exits 1 when the relative difference exceeds --tol,
or when the adapter moves PEFT's loss off the base's by less than 100 x --tol (then a misread
adapter would pass unseen).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from peft import PeftModel
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ulysses", required=True)
    ap.add_argument("--model", required=True, help="the base model folder")
    ap.add_argument("--adapter", required=True, help="the PEFT adapter folder")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--merged", help="a merged folder (ulysses merge-lora --dtype float32) to check too")
    ap.add_argument("--merge-tol", type=float, default=1e-6)
    args = ap.parse_args()

    base = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float64, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, args.adapter).to(torch.float64)
    model.eval()
    vocab = base.config.vocab_size
    ids = np.random.default_rng(args.seed).integers(0, vocab, size=(args.rows, args.seq), dtype=np.int64)
    peft_loss = lm_loss(model, ids)
    with model.disable_adapter():
        base_loss = lm_loss(model, ids)
    effect = abs(peft_loss - base_loss) / abs(base_loss)
    if effect < 100 * args.tol:
        print(f"the adapter moves the loss by {effect:.2e} only (base {base_loss:.10f}, with it {peft_loss:.10f}): "
              f"too little for a check at tol {args.tol:g}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        batch, out = os.path.join(tmp, "batch.safetensors"), os.path.join(tmp, "out.safetensors")
        save_file({"input_ids": ids}, batch)
        p = subprocess.run([args.ulysses, "loss-grad", "--model", args.model, "--lora-adapter", args.adapter,
                            "--batch", batch, "--out", out], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"ulysses loss-grad failed ({p.returncode}):\n{p.stdout}{p.stderr}", file=sys.stderr)
            return 1
        ours = float(load_file(out)["loss"][0])
    rel = abs(ours - peft_loss) / abs(peft_loss)
    print(f"PEFT loss {peft_loss:.10f}, ulysses {ours:.10f}: rel {rel:.2e} (tol {args.tol:g}); "
          f"the adapter moves the base's loss {base_loss:.10f} by {effect:.2e}")
    if rel > args.tol:
        return 1
    return check_merged(args, model, ids, peft_loss) if args.merged else 0


def lm_loss(model, ids):
    """Mean next-token loss in float64 (transformers' own loss rounds the logits to float32 first)."""
    t = torch.from_numpy(ids)
    with torch.no_grad():
        logits = model(input_ids=t).logits.double()
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1)).item()


def check_merged(args, model, ids, peft_loss):
    """The merged folder's weights against PEFT's merge, and its loss against the adapter's."""
    ours = AutoModelForCausalLM.from_pretrained(args.merged, dtype=torch.float64, attn_implementation="eager")
    theirs = dict(model.merge_and_unload().named_parameters())
    worst, worst_name = 0.0, ""
    for name, p in ours.named_parameters():
        r = ((p - theirs[name]).norm() / theirs[name].norm()).item()
        if r > worst:
            worst, worst_name = r, name
    merged = lm_loss(ours, ids)
    loss_rel = abs(merged - peft_loss) / abs(peft_loss)
    print(f"merged: worst weight rel {worst:.2e} ({worst_name}) against PEFT's merge_and_unload (tol "
          f"{args.merge_tol:g}); loss {merged:.10f}, rel {loss_rel:.2e} to the adapter's")
    return 0 if worst <= args.merge_tol and loss_rel <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
