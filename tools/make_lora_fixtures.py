#!/usr/bin/env python3
"""Float64 transformers + PEFT reference fixtures for `ulysses loss-grad --lora-adapter`.

Each case is a tiny random decoder from tools/make_fixtures.py (its Case, weights and batch),
a LoRA adapter on it written by PEFT itself (save_pretrained: adapter_config.json +
adapter_model.safetensors, float32), and the float64 loss and the adapters' gradients that
PEFT's model gives under our loss contract (tools/make_fixtures.py's docstring), the base frozen:

  fixtures/lora/<case>/model/                 the base model folder
  fixtures/lora/<case>/adapter/               the PEFT adapter folder
  fixtures/lora/<case>/batch.safetensors
  fixtures/lora/<case>/reference.safetensors  loss F64 [1]; grad.<PEFT tensor name> F64 for every
                                              lora_A / lora_B (the names of adapter_model.safetensors)
  fixtures/lora/<case>/case.json

lora_B is drawn random (PEFT initialises it to zero), so that A's gradients are not zero and the
forward differs from the base's. The reference runs the stored weights upcast to float64 with
make_fixtures' float64 RMSNorm, RoPE and attention, each document as its own sequence; the
script asserts that PEFT's packed forward (position_ids) agrees.

  python3 tools/make_lora_fixtures.py --out fixtures/lora
"""
import argparse
import dataclasses
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
import peft
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclasses.dataclass
class LoraCase:
    base: mf.Case
    r: int = 8
    alpha: float = 16
    use_rslora: bool = False
    b_std: float = 0.05


def committed_cases():
    return [
        LoraCase(mf.Case("untied", "LoRA r 8 alpha 16 on all seven projections of an untied GQA Llama (4 heads, "
                         "2 kv heads), packed rows 5+13+19+11 and 17+1+23+7, labels with -100",
                         seed=3101, hidden=32, intermediate=64, heads=4, kv_heads=2, vocab=128, batch=2, seq=48,
                         docs=[[5, 13, 19, 11], [17, 1, 23, 7]], labels="labels", ignore_frac=0.15)),
        LoraCase(mf.Case("tied", "LoRA r 8 alpha 16 on all seven projections of a tied-embedding MHA Llama, "
                         "bf16 base weights, row 1 packed as 21+27",
                         seed=3202, hidden=32, intermediate=48, heads=4, kv_heads=4, vocab=96, batch=2, seq=48,
                         tie=True, storage="bfloat16", docs=[[48], [21, 27]])),
    ]


def lora_config(lc: LoraCase):
    return LoraConfig(r=lc.r, lora_alpha=lc.alpha, target_modules=TARGETS, lora_dropout=0.0, bias="none",
                      use_rslora=lc.use_rslora, task_type="CAUSAL_LM")


def write_adapter(lc: LoraCase, model_dir: str, adapter_dir: str):
    """PEFT's own files for an adapter with random A and B (float32)."""
    c = lc.base
    base = mf.ARCHS[c.arch][1].from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, lora_config(lc))
    g = torch.Generator().manual_seed(c.seed + 17)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if ".lora_A." in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            elif ".lora_B." in name:
                p.copy_(lc.b_std * torch.randn(p.shape, generator=g))
    model.save_pretrained(adapter_dir)
    readme = os.path.join(adapter_dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)  # PEFT's model card template: nothing a test reads
    assert sorted(os.listdir(adapter_dir)) == ["adapter_config.json", "adapter_model.safetensors"], \
        os.listdir(adapter_dir)


def saved_name(name: str) -> str:
    """PEFT's parameter name as its adapter file spells it (the adapter's name dropped)."""
    return name.replace(".default.", ".")


def loss_and_lora_grads(model, batch, tgt, per_doc: bool):
    model.zero_grad(set_to_none=True)
    ids = batch["input_ids"].long()
    B, S = ids.shape
    pos = batch.get("position_ids")
    count = int((tgt != mf.IGNORE).sum())
    if per_doc:
        token_loss = torch.zeros(B, S, dtype=torch.float64)
        for b, docs in enumerate(mf.documents(batch)):
            for s, e in docs:
                logits = model(input_ids=ids[b:b + 1, s:e], position_ids=torch.arange(e - s)[None],
                               use_cache=False).logits[0]
                token_loss[b, s:e] = F.cross_entropy(logits.double(), tgt[b, s:e], ignore_index=mf.IGNORE,
                                                     reduction="none")
    else:
        kw = {} if pos is None else {"position_ids": pos.long()}
        logits = model(input_ids=ids, use_cache=False, **kw).logits
        token_loss = F.cross_entropy(logits.double().reshape(B * S, -1), tgt.reshape(-1), ignore_index=mf.IGNORE,
                                     reduction="none").reshape(B, S)
    loss = token_loss.sum() / count
    loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert ".lora_" in n, f"{n} is trainable: only the adapters may be"
            grads[saved_name(n)] = p.grad.detach().double().clone()
        else:
            assert p.grad is None, f"frozen {n} got a gradient"
    return loss.detach(), grads


def make_case(lc: LoraCase, out_root: str):
    c = lc.base
    case_dir = os.path.join(out_root, c.name)
    if os.path.exists(case_dir):
        shutil.rmtree(case_dir)
    model_dir, adapter_dir = os.path.join(case_dir, "model"), os.path.join(case_dir, "adapter")
    os.makedirs(model_dir)
    mf.build_and_save(c, model_dir)
    write_adapter(lc, model_dir, adapter_dir)
    batch = mf.make_batch(c)
    tgt = mf.contract_targets(batch)
    with mf.Float64Attention():
        base = mf.load_fp64(c, model_dir, exact=True)
        model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=True).to(torch.float64)
        model.eval()  # dropout is 0 anyway; eval keeps any other module deterministic
        loss, grads = loss_and_lora_grads(model, batch, tgt, per_doc=True)
        packed_loss, packed_grads = loss_and_lora_grads(model, batch, tgt, per_doc=False)
    loss_rel = abs(packed_loss.item() - loss.item()) / loss.item()
    grad_rel = max(((packed_grads[n] - grads[n]).norm() / grads[n].norm()).item() for n in grads)
    assert loss_rel < 1e-12 and grad_rel < 1e-10, f"{c.name}: PEFT packed != per document: {loss_rel} {grad_rel}"
    names = sorted(grads)
    assert len(names) == 2 * len(TARGETS) * c.layers, names
    assert all(grads[n].norm() > 0 for n in names), "every adapter gradient must be nonzero (B is random)"
    tensors = {"loss": loss.reshape(1).numpy(), "targets": tgt.numpy().astype(np.int64)}
    for n in names:
        tensors[f"grad.{n}"] = grads[n].numpy()
    save_file(tensors, os.path.join(case_dir, "reference.safetensors"), metadata={"case": c.name})
    save_file({k: v.numpy().astype(c.ids_dtype) for k, v in batch.items()},
              os.path.join(case_dir, "batch.safetensors"))
    info = {"name": c.name, "description": c.description,
            "base": {k: v for k, v in dataclasses.asdict(c).items() if not (k == "act" and v == "silu")},
            "lora": {"r": lc.r, "alpha": lc.alpha, "use_rslora": lc.use_rslora, "target_modules": TARGETS,
                     "b_std": lc.b_std},
            "n_targets": int((tgt != mf.IGNORE).sum()), "reference_loss": loss.item(),
            "checks": {"peft_packed_vs_per_doc": {"loss_rel": loss_rel, "grad_rel_max": grad_rel}},
            "made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                          "peft": peft.__version__}}
    mf.write_json(os.path.join(case_dir, "case.json"), info)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (one sub-folder per case)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    mf.hf_logging.set_verbosity_error()
    os.makedirs(args.out, exist_ok=True)
    for lc in committed_cases():
        info = make_case(lc, args.out)
        print(f"{lc.base.name:<8} loss {info['reference_loss']:.15f}  targets {info['n_targets']}  "
              f"packed vs per-doc grad {info['checks']['peft_packed_vs_per_doc']['grad_rel_max']:.1e}", flush=True)


if __name__ == "__main__":
    main()
