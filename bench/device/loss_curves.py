#!/usr/bin/env python3
"""Two training runs' loss curves side by side (the `train` cases: sp = 2 against sp = 1).

    python3 bench/device/loss_curves.py A/metrics.jsonl B/metrics.jsonl

Prints a sentence and a `LOSS_JSON {...}` line (worst relative difference per step, first and last
loss of A) for the runner; exits 1 when the curves have different lengths or are empty.
"""
import json
import sys


def losses(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["loss"] for r in rows if "loss" in r]  # eval lines hold eval_loss only


def main():
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    if not a or len(a) != len(b):
        print(f"loss curves of {len(a)} and {len(b)} steps: cannot compare")
        return 1
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print(f"{len(a)} steps: worst relative loss difference {worst:.2e}; loss {a[0]:.4f} -> {a[-1]:.4f}")
    print("LOSS_JSON " + json.dumps({"steps": len(a), "worst_rel_diff": worst, "loss_first": a[0], "loss_last": a[-1]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
