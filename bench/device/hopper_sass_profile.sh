#!/usr/bin/env bash
# Where the Hopper backward (variant 2) spends its warps' time, per SASS instruction: Nsight Compute's
# source page (stall samples by reason for each instruction) of one launch at S = 32K, d 128, as CSV
# under $OUT (or /tmp), and a summary of the instructions with the most samples on stdout.
#   bash bench/device/hopper_sass_profile.sh BUILD [KERNEL_REGEX] [BENCH ARGS...]
set -uo pipefail
B=${1:-build-gpu}
K=${2:-hopper_attention_backward_tma}
shift 2 2>/dev/null || shift $#
ARGS=${*:-"--impl hopper2 --reps 1 32768"}
BENCH=$B/hopper_bwd_bench
case "$K" in *forward*) BENCH=$B/attention_bench ;; esac
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "hopper_sass_profile: no ncu, skipped"; exit 0; }
D=${OUT:-/tmp}
timeout 300 "$NCU" --kernel-name "regex:$K" --launch-skip 1 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --page source --print-source sass --csv $BENCH $ARGS > "$D/sass_$K.csv" 2> "$D/sass_$K.err"
echo "hopper_sass_profile: ncu rc=$? ($(wc -l < "$D/sass_$K.csv") lines)"
python3 - "$D/sass_$K.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = None
for i, r in enumerate(rows):
    if "Source" in r and any("Sampl" in c for c in r):
        hdr, body = r, rows[i + 1:]
        break
if hdr is None:
    print("hopper_sass_profile: no source table found; first lines:")
    for r in rows[:15]: print("  ", r[:8])
    sys.exit(0)
src = hdr.index("Source")
samp = [j for j, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All")] or \
       [j for j, c in enumerate(hdr) if "Sampl" in c]
s = samp[0]
reasons = [j for j, c in enumerate(hdr) if c.startswith("stall_") or c.startswith("smsp__pcsamp_warps_issue_stalled")]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[s]) for r in body if len(r) > s)
print("hopper_sass_profile: columns:", [hdr[j] for j in samp], "total samples", tot)
top = sorted(body, key=lambda r: -num(r[s]) if len(r) > s else 0)[:45]
addr = hdr.index("Address") if "Address" in hdr else None
for r in top:
    why = sorted(((num(r[j]), hdr[j]) for j in reasons if len(r) > j and num(r[j]) > 0), reverse=True)[:3]
    print("%6.2f%%  %-6s %-70s %s" % (100 * num(r[s]) / max(tot, 1), r[addr] if addr is not None else "",
                                       r[src][:70], ", ".join("%s %d" % (n.replace("smsp__pcsamp_warps_issue_stalled_", ""), v) for v, n in why)))
PY
