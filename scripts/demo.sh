#!/usr/bin/env bash
# make demo: train a small byte-level Llama from scratch on CPU with 2
# sequence-parallel ranks, on text every fresh machine has (the licence texts
# under /usr/share/common-licenses, plus this repository's docs): prepare the
# corpus, train (about 2-5 minutes on 2 cores), show the loss falling, write a
# checkpoint (a Hugging Face folder) and the loss-curve picture.
set -euo pipefail
BUILD=${1:-build}
U=$BUILD/ulysses
OUT=runs/demo
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

inputs=README.md,docs
[ -d /usr/share/common-licenses ] && inputs=/usr/share/common-licenses,$inputs
rm -rf "$OUT"
echo "== preparing the corpus ($inputs)"
"$U" prepare --input "$inputs" --out "$OUT/data" --val-fraction 0.1 --quiet
echo "== training: configs/demo.yaml on 2 sequence-parallel ranks (CPU)"
"${MPIRUN[@]}" -np 2 "$U" train configs/demo.yaml
"$U" plot "$OUT/metrics.jsonl" -o "$OUT/loss.png" --title "ulysses demo: byte-level Llama, sp = 2"
python3 - "$OUT/metrics.jsonl" <<'PY' || true
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
evals = [r for r in rows if "eval_loss" in r]
print(f"== loss {train[0]['loss']:.3f} at step {train[0]['step']} -> {train[-1]['loss']:.3f} at step {train[-1]['step']}")
import collections, math, glob
counts = collections.Counter()
for p in glob.glob(sys.argv[1].rsplit("/", 1)[0] + "/data/val-*.tokens"):
    import numpy as np
    n = int(np.fromfile(p, np.uint64, 1, offset=16)[0])
    counts.update(np.fromfile(p, np.uint32, n, offset=256).tolist())
if counts:
    total = sum(counts.values())
    entropy = -sum(c / total * math.log(c / total) for c in counts.values())
    print(f"== the val text's byte-unigram entropy: {entropy:.3f} nats (a model that learned only letter frequencies)")
if evals:
    print("== eval loss: " + ", ".join(f"{e['eval_loss']:.3f} (step {e['step']})" for e in evals))
PY
CKPT="$OUT/checkpoints/$(cat $OUT/checkpoints/latest 2>/dev/null)/model"
echo "== a sample from the trained model (120 bytes after \"The \", temperature 0.8, top-k 40):"
"$U" generate --model "$CKPT" --prompt "The " --max-new-tokens 120 --temperature 0.8 --top-k 40 --seed 1 --ignore-eos | sed 's/^/   /' || true
echo "== checkpoint (Hugging Face folder): $(cat $OUT/checkpoints/latest 2>/dev/null | sed "s|^|$OUT/checkpoints/|")/model"
echo "== loss curve: $OUT/loss.png"
