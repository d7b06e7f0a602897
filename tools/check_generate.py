#!/usr/bin/env python3
"""Greedy `ulysses generate` against the fixtures' transformers tokens (float64 references).

Prints one line per prompt and a last line `GENERATE_JSON {...}`: prompts, how many equal
transformers' 32 tokens, and the shortest common prefix. On the CPU (float32) every prompt must be
equal (tests/cli/generate_test.sh asserts it); on CUDA the decoder runs in bf16, where a near-tie of
two logits may pick another token, so the device case reports the prefix and requires 32 tokens.
Exit status 1 when a run fails or gives fewer tokens than asked.
"""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ulysses", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--fixtures", nargs="+", default=["fixtures/generate", "fixtures/generate_dynamic"])
    a = ap.parse_args()
    total = equal = 0
    shortest = None
    ok = True
    for fx in a.fixtures:
        for case in json.load(open(f"{fx}/expected.json"))["cases"]:
            want = case["greedy_ids"]
            cmd = [a.ulysses, "generate", "--model", f"{fx}/model", "--prompt", case["prompt"], "--add-special-tokens",
                   "--max-new-tokens", str(len(want)), "--ignore-eos", "--ids", "--backend", a.backend]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            total += 1
            if r.returncode != 0:
                print(f"{fx}: {case['prompt']!r}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                ok = False
                continue
            got = [int(t) for t in r.stdout.strip().splitlines()[-1].strip("[] ").split(",") if t.strip()]
            prefix = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
            shortest = prefix if shortest is None else min(shortest, prefix)
            equal += got == want
            ok &= len(got) == len(want)
            print(f"{fx}: {case['prompt']!r}: {len(got)} tokens, {prefix} equal to transformers' before the first difference")
    print("GENERATE_JSON " + json.dumps({"prompts": total, "equal": equal, "common_prefix_min": shortest}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
