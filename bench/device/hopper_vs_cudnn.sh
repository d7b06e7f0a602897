#!/usr/bin/env bash
# Issue 31's speed rows: cuDNN's fused attention against ours (the Hopper forward, variant 3, with the
# Hopper backward, variant 2: attention_bench --impl ours), in one run, causal, 32 query / 8 KV heads:
# d 128 at 4K, 32K and 128K, packed 8 x 4K documents (32K tokens), d 64 at 4K and 32K. Prints
# attention_bench's rows, then per row the ratios ours / cuDNN of forward, backward and forward +
# backward TFLOPS (7 S^2 H d convention). Every step has its own timeout.
#   bash bench/device/hopper_vs_cudnn.sh BUILD     (HOPPER_BWD=3: ours with backward variant 3)
set -uo pipefail
B=${1:-build-gpu}
A="$B/attention_bench"
[ -x "$A" ] || { echo "hopper_vs_cudnn: no $A"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/hopper_vs_cudnn: GPU /'
LOG=$(mktemp)
run() {  # label, then attention_bench arguments (without --impl)
  local label=$1; shift
  for impl in cudnn ours; do
    timeout 90 "$A" --impl $impl --hopper-bwd "${HOPPER_BWD:-2}" "$@" 2>&1 | tee -a "$LOG" | grep -v '^{' | sed "s/^/[$label] /"
    echo "hopper_vs_cudnn: $label $impl rc=${PIPESTATUS[0]}"
  done
}
run d128 4096 32768 131072
run packed8x4k --doc-len 4096 32768
run d64 --head-dim 64 4096 32768
python3 - "$LOG" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith('{"bench":"attention"'):
        r = json.loads(line)
        rows[(r["impl"], r["S"], r["d"], r["doc_len"])] = r
print("hopper_vs_cudnn: ours / cuDNN (TFLOPS ratios)")
print("%-8s %4s %8s %8s %8s %8s" % ("S", "d", "doc_len", "fwd", "bwd", "fwd+bwd"))
for (impl, S, d, doc), r in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][3] != kv[0][1], kv[0][1])):
    if impl != "ours" or ("cudnn", S, d, doc) not in rows:
        continue
    c = rows[("cudnn", S, d, doc)]
    ratio = lambda k: (r[k] / c[k]) if r.get(k) and c.get(k) else float("nan")
    print("%-8d %4d %8d %8.3f %8.3f %8.3f" % (S, d, doc, ratio("fwd_tflops"), ratio("bwd_tflops"),
                                             ratio("fwd_bwd_tflops")))
PY
rm -f "$LOG"
