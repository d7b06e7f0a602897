#!/usr/bin/env python3
"""Run `ulysses loss-grad` on every fixture case and compare with its float64 reference.

  python3 tools/check_loss_grad.py --ulysses build/ulysses --cases fixtures
  python3 tools/check_loss_grad.py --ulysses build/ulysses --cases fixtures \\
      --launcher "mpirun --allow-run-as-root --oversubscribe -np 2" --extra-args "--sp 2"

A case is a folder holding model/, batch.safetensors and reference.safetensors (made by
tools/make_fixtures.py), and adapter/ for a LoRA case (tools/make_lora_fixtures.py: run with
--lora-adapter, the reference holds the adapters' gradients); --cases may name one case or a
folder of cases. For each case:
  loss:  |loss - ref| / |ref|                   <= --loss-tol
  grads: ||g - ref|| / ||ref|| for every grad.* <= --grad-tol  (||g|| <= --grad-tol if ref is 0)
and the set of grad.* names must equal the reference's, shapes must match, and NaN/Inf
fails. Prints one row per case (with --verbose one row per gradient) and exits 1 on any
failure, 2 on bad arguments.
"""
import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from safetensors.numpy import load_file


def find_cases(root):
    def is_case(d):
        return os.path.isfile(os.path.join(d, "reference.safetensors"))
    if is_case(root):
        return [root]
    return [os.path.join(root, d) for d in sorted(os.listdir(root)) if is_case(os.path.join(root, d))]


def rel_err(got, ref):
    diff = float(np.linalg.norm((got - ref).ravel()))
    den = float(np.linalg.norm(ref.ravel()))
    return diff / den if den > 0 else diff


def compare(out, ref, loss_tol, grad_tol):
    """Returns (problems, loss_rel, rows) where rows = [(name, rel, ok)] for every reference gradient."""
    problems = []
    ref_loss = float(ref["loss"].reshape(-1)[0])
    loss_rel = math.nan
    if "loss" not in out:
        problems.append("no `loss` in output")
    elif out["loss"].size != 1:
        problems.append(f"`loss` has shape {list(out['loss'].shape)}, expected [1]")
    else:
        got = float(out["loss"].reshape(-1)[0])
        loss_rel = abs(got - ref_loss) / abs(ref_loss)
        if not loss_rel <= loss_tol:  # written so NaN fails
            problems.append(f"loss {got!r} vs reference {ref_loss!r}: rel err {loss_rel:.2e} > {loss_tol:g}")
    ref_names = {k for k in ref if k.startswith("grad.")}
    out_names = {k for k in out if k.startswith("grad.")}
    for k in sorted(ref_names - out_names):
        problems.append(f"missing {k}")
    for k in sorted(out_names - ref_names):
        problems.append(f"unexpected {k} (not a parameter of the reference"
                        f"{'; a tied lm_head has no own gradient' if k == 'grad.lm_head.weight' else ''})")
    rows = []
    for k in sorted(ref_names & out_names):
        g, r = out[k], ref[k]
        if g.shape != r.shape:
            problems.append(f"{k}: shape {list(g.shape)}, reference {list(r.shape)}")
            rows.append((k, math.nan, False))
            continue
        g = g.astype(np.float64)
        if not np.isfinite(g).all():
            problems.append(f"{k}: {int((~np.isfinite(g)).sum())} non-finite values")
            rows.append((k, math.nan, False))
            continue
        e = rel_err(g, r)
        ok = e <= grad_tol
        if not ok:
            problems.append(f"{k}: rel err {e:.2e} > {grad_tol:g}")
        rows.append((k, e, ok))
    return problems, loss_rel, ref_loss, rows


def run_case(case, args, out_path):
    cmd = (shlex.split(args.launcher) if args.launcher else []) + [
        args.ulysses, "loss-grad", "--model", os.path.join(case, "model"),
        "--batch", os.path.join(case, "batch.safetensors"), "--out", out_path] + shlex.split(args.extra_args)
    adapter = os.path.join(case, "adapter")
    if os.path.isdir(adapter):  # a LoRA case (tools/make_lora_fixtures.py): the adapters' gradients
        cmd += ["--lora-adapter", adapter]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        rc, log = p.returncode, (p.stdout + p.stderr)
    except subprocess.TimeoutExpired as e:
        rc, log = "timeout", f"{e.stdout or ''}{e.stderr or ''}"
    except OSError as e:
        rc, log = "exec", str(e)
    return cmd, rc, log, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ulysses", required=True, help="path of the ulysses binary")
    ap.add_argument("--cases", required=True, help="a case folder, or a folder of case folders")
    ap.add_argument("--launcher", default="", help='e.g. "mpirun --allow-run-as-root --oversubscribe -np 2"')
    ap.add_argument("--extra-args", default="", help="appended to every loss-grad command")
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--floor", help="JSON from tools/bf16_floor.py --json: a case's gradient tolerance becomes "
                    "max(--grad-tol, --floor-factor x its bf16 floor) (checks bf16 against what bf16 storage allows)")
    ap.add_argument("--floor-factor", type=float, default=1.25)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per case")
    ap.add_argument("--keep", help="folder to keep each case's output in (default: a temporary folder)")
    ap.add_argument("--only", nargs="*", help="case names to run")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every gradient's error")
    args = ap.parse_args()

    if not os.path.isdir(args.cases):
        print(f"--cases {args.cases}: no such folder", file=sys.stderr)
        return 2
    cases = find_cases(args.cases)
    if args.only:
        cases = [c for c in cases if os.path.basename(os.path.normpath(c)) in args.only]
    if not cases:
        print(f"--cases {args.cases}: no case folders (with reference.safetensors) found", file=sys.stderr)
        return 2
    if not os.path.isfile(args.ulysses) and not shutil.which(args.ulysses):
        print(f"--ulysses {args.ulysses}: no such file (build it first)", file=sys.stderr)
        return 2

    tmp = None
    out_root = args.keep
    if out_root:
        os.makedirs(out_root, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="ulysses_check_")
        out_root = tmp.name

    floors = {}
    if args.floor:
        try:
            with open(args.floor) as f:
                floors = {k: float(v["worst"]) for k, v in json.load(f)["cases"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"--floor {args.floor}: not a tools/bf16_floor.py --json file ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return 2

    print(f"{'case':<14} {'ref loss':>12} {'got loss':>12} {'loss rel':>9} {'grads':>5} {'worst grad rel':>14}"
          f"  {'worst grad':<48} {'time':>6}  result")
    failed = []
    for case in cases:
        name = os.path.basename(os.path.normpath(case))
        out_path = os.path.join(out_root, f"{name}.safetensors")
        if os.path.exists(out_path):
            os.remove(out_path)  # never judge a stale output
        cmd, rc, log, secs = run_case(case, args, out_path)
        ref = load_file(os.path.join(case, "reference.safetensors"))
        ref_loss = float(ref["loss"].reshape(-1)[0])
        if rc != 0 or not os.path.isfile(out_path):
            why = f"exit {rc}" if rc != 0 else "no output file"
            print(f"{name:<14} {ref_loss:>12.8f} {'-':>12} {'-':>9} {'-':>5} {'-':>14}  {'-':<48} {secs:>5.1f}s  "
                  f"FAIL ({why})")
            print("    command: " + " ".join(shlex.quote(c) for c in cmd))
            for line in log.strip().splitlines()[-15:]:
                print("    | " + line)
            failed.append(name)
            continue
        try:
            out = load_file(out_path)
        except Exception as e:  # a truncated or malformed file is a failure of the engine, not of this script
            print(f"{name:<14} FAIL (cannot read {out_path}: {e})")
            failed.append(name)
            continue
        grad_tol = args.grad_tol
        if args.floor:
            if name not in floors:
                print(f"{name:<14} FAIL (no bf16 floor for this case in {args.floor}; rerun tools/bf16_floor.py --json)")
                failed.append(name)
                continue
            grad_tol = max(grad_tol, args.floor_factor * floors[name])
        problems, loss_rel, ref_loss, rows = compare(out, ref, args.loss_tol, grad_tol)
        got = float(out["loss"].reshape(-1)[0]) if "loss" in out and out["loss"].size == 1 else math.nan
        worst = max(rows, key=lambda r: math.inf if math.isnan(r[1]) else r[1], default=("-", math.nan, True))
        status = "ok" if not problems else "FAIL"
        print(f"{name:<14} {ref_loss:>12.8f} {got:>12.8f} {loss_rel:>9.1e} {len(rows):>5} {worst[1]:>14.2e}"
              f"  {worst[0][5:] if worst[0] != '-' else '-':<48} {secs:>5.1f}s  {status}")
        if args.verbose:
            for k, e, ok in rows:
                print(f"    {k:<60} {e:>10.2e}  {'ok' if ok else 'FAIL'}")
        for p in problems[:20]:
            print("    " + p)
        if len(problems) > 20:
            print(f"    ... and {len(problems) - 20} more")
        if problems:
            failed.append(name)

    print(f"{len(cases) - len(failed)}/{len(cases)} cases passed"
          f" (loss tol {args.loss_tol:g}, grad tol {args.grad_tol:g}"
          + (f" or {args.floor_factor:g} x the case's bf16 floor" if args.floor else "") + ")"
          + (f"; failed: {' '.join(failed)}" if failed else ""))
    if tmp:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
