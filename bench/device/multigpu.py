#!/usr/bin/env python3
"""The several-GPU measurements of the multi-GPU issue, for the runner's multigpu cases:

    multigpu.py weak    --build B [--per-gpu 65536] [--layers 8]   weak scaling, 1 -> 2 -> 4 -> 8 GPUs
    multigpu.py longest --build B [--layers 2]                    plan --max-seq at sp = GPUs, then that step

weak: the Llama-3.1-8B shape at a fixed number of tokens per GPU over 1, 2, 4, ... up to the GPUs
here (one rank per GPU, NCCL), one WEAK_JSON line per count and a WEAK_SUMMARY line with the
efficiency of the largest count (tokens/s per GPU against one GPU's; the ALST-formula TFLOPS per
GPU too, since a sequence-parallel step's attention work per GPU grows with the count).
longest: `ulysses plan --max-seq` for the 8B shape at sp = GPUs with the node's host memory split
over the ranks (less 10%), then a dry run and a measured step at that length and options with
--layers layers; LONGEST_JSON with the planned and measured peaks and their ratio.
"""
import argparse
import json
import os
import re
import subprocess
import sys

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "LD_LIBRARY_PATH", "-x", "NCCL_NVLS_ENABLE"]


def gpu_count():
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return max(1, sum(1 for line in out.splitlines() if line.startswith("GPU ")))


def run(cmd, timeout):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(p.stdout[-4000:])
    sys.stderr.write(p.stderr[-4000:])
    if p.returncode != 0:
        raise SystemExit(f"multigpu: command failed with exit {p.returncode}: {' '.join(cmd)}")
    return p.stdout + p.stderr


def bench_json(text):
    for line in text.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    raise SystemExit("multigpu: no BENCH_JSON line in the output")


def weak(args):
    counts, n = [], 1
    while n <= gpu_count():
        counts.append(n)
        n *= 2
    rows = []
    for n in counts:
        cmd = MPIRUN + ["-np", str(n), f"{args.build}/ulysses", "bench", "--backend", "cuda", "--comm", "nccl",
                        "--shape", "llama-3.1-8b", "--layers", str(args.layers), "--seq", str(args.per_gpu * n),
                        "--no-optimizer", "--checkpoint", "--tiled-loss", "--tiled-mlp", "--warmup", "1", "--steps", "2"]
        j = bench_json(run(cmd, args.timeout))
        row = {"gpus": n, "seq_len": j["seq_len"], "step_time_s": j["step_time_s"],
               "tokens_per_s_per_gpu": j["tokens_per_s"] / n, "alst_tflops_per_gpu": j["alst_tflops_per_gpu"]}
        rows.append(row)
        print("WEAK_JSON " + json.dumps(row), flush=True)
    last, first = rows[-1], rows[0]
    print("WEAK_SUMMARY " + json.dumps({
        "gpus": last["gpus"],
        "tokens_per_gpu_efficiency": last["tokens_per_s_per_gpu"] / first["tokens_per_s_per_gpu"],
        "tflops_per_gpu_efficiency": last["alst_tflops_per_gpu"] / first["alst_tflops_per_gpu"]}), flush=True)


def host_gib_per_rank(ranks):
    with open("/proc/meminfo") as f:
        total_kib = next(int(l.split()[1]) for l in f if l.startswith("MemTotal:"))
    return 0.9 * total_kib / 2**20 / ranks


def longest(args):
    n = gpu_count()
    common = ["--backend", "cuda", "--shape", "llama-3.1-8b", "--sp", str(n)]
    # The GPU here (--memory-limit auto), which then runs the step, not plan's default H200 target.
    plan = run([f"{args.build}/ulysses", "plan", "--max-seq", "--memory-limit", "auto",
                "--host-mem-limit", f"{host_gib_per_rank(n):.1f}"]
               + common, args.timeout)
    m = re.search(r"^max seq: (\d+) tokens with (.*)$", plan, re.M)
    if not m:
        raise SystemExit("multigpu: plan --max-seq printed no 'max seq:' line")
    seq, options = int(m.group(1)), m.group(2).split()
    step = MPIRUN + ["-np", str(n), f"{args.build}/ulysses", "bench", "--comm", "nccl", "--layers",
                     str(args.layers), "--seq", str(seq), "--no-optimizer"] + common[:-2] + options
    dry = run(step + ["--dry-run"], args.timeout)
    planned = int(re.search(r"peak\s+device\s.*\((\d+) bytes\)", dry).group(1))
    j = bench_json(run(step + ["--warmup", "0", "--steps", "1"], args.timeout))
    print("LONGEST_JSON " + json.dumps({
        "gpus": n, "max_seq": seq, "options": " ".join(options), "layers": args.layers,
        "step_time_s": j["step_time_s"], "planned_peak_device_bytes": planned,
        "peak_device_bytes": j["peak_device_bytes"], "peak_ratio": j["peak_device_bytes"] / planned}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["weak", "longest"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--per-gpu", type=int, default=65536, help="tokens per GPU (weak)")
    ap.add_argument("--layers", type=int, default=None, help="layers of the 8B shape (weak: 8, longest: 2)")
    ap.add_argument("--timeout", type=int, default=540, help="seconds per command")
    args = ap.parse_args()
    if args.layers is None:
        args.layers = 8 if args.what == "weak" else 2
    weak(args) if args.what == "weak" else longest(args)


if __name__ == "__main__":
    main()
