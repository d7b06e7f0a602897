#!/usr/bin/env bash
# ulysses plan --seq plans for the target machine: the device (--memory-limit) and host
# (--host-mem-limit) budgets default to an H200's (139 GiB, 120 GiB), never the planning
# machine's memory unless asked (auto); the output ends with a one-line verdict, exit 0
# when the step fits and 1 when it does not, and the advice names only options plan takes.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

# verdict NAME WANT_RC LINE_PATTERN ARGS...: plan's last stdout line and exit status.
verdict() {
  local name=$1 want_rc=$2 pattern=$3
  shift 3
  "$ULYSSES" plan "$@" > out.txt 2> err.txt
  local rc=$?
  local last
  last=$(tail -n 1 out.txt)
  if [ $rc -eq "$want_rc" ] && echo "$last" | grep -q -E -- "$pattern" && [ ! -s err.txt ]; then
    pass "$name (exit $rc)"
  else
    fail "$name (exit $rc, want $want_rc): last line '$last'"; sed 's/^/     /' err.txt | head -3
  fi
}

tiny=(--shape tiny --seq 4096)
verdict "fits a budget" 0 \
  "^fits: device peak [0-9.]+ MiB of 51.2 MiB \(--memory-limit\), host peak 0 B of 1.00 GiB \(--host-mem-limit\)$" \
  "${tiny[@]}" --memory-limit 0.05 --host-mem-limit 1
verdict "over the device budget" 1 \
  "^does not fit: the step needs [0-9.]+ MiB of device memory but 30.7 MiB is available: over by [0-9.]+ MiB .*It fits with --checkpoint " \
  "${tiny[@]}" --memory-limit 0.03
# The host budget counts for --seq too (it used to be this machine's memory whatever was given).
verdict "over the host budget" 1 \
  "^does not fit: the step needs [0-9.]+ MiB of host memory \([0-9.]+ MiB of offloaded checkpoints.* over by " \
  "${tiny[@]}" --offload-checkpoints --memory-limit 0.05 --host-mem-limit 0.001
verdict "no single option fits" 1 "^does not fit: .*No memory option alone makes it fit" "${tiny[@]}" --memory-limit 0.01

# Every option the advice names is one plan takes (it used to recommend --dry-run, which plan rejects).
"$ULYSSES" plan --help > help.txt
for limit in 0.03 0.02 0.01; do
  "$ULYSSES" plan "${tiny[@]}" --memory-limit $limit > out.txt 2>&1
  for flag in $(tail -n 1 out.txt | grep -o -E -- "--[a-z][a-z-]*" | sort -u); do
    grep -q -E -- "^  $flag( |\[|$)" help.txt && pass "advice at $limit GiB: plan takes $flag" \
      || fail "advice at $limit GiB names $flag, which plan rejects"
  done
done
grep -q -- "--dry-run" out.txt && fail "the verdict recommends --dry-run" || pass "no --dry-run in the verdict"

# Defaults: the H200 target, whatever this machine has. The 8B step at 256K tokens with offloaded
# checkpoints fits one H200 (device ~63 GiB, host 64 GiB of checkpoints), on any planning machine.
verdict "default budgets are the H200 target's" 0 \
  "^fits: device peak [0-9.]+ GiB of 139.00 GiB \(default: H200 target\), host peak 64.00 GiB of 120.00 GiB \(default: H200 target\)$" \
  --backend cuda --shape llama-3.1-8b --seq 262144 --no-optimizer --offload-checkpoints --tiled-loss --tiled-mlp
verdict "with AdamW offloaded too it does not, and says which option fits" 1 \
  "^does not fit: the step needs [0-9.]+ GiB of host memory .* It fits with --offload-checkpoints=all --checkpoint-segment 4 " \
  --backend cuda --shape llama-3.1-8b --seq 262144 --offload-optimizer --offload-checkpoints --tiled-loss --tiled-mlp
verdict "cpu backend: the device is the host" 0 "of 120.00 GiB \(cpu backend: the host budget\)" "${tiny[@]}"
verdict "--host-mem-limit auto asks this machine" 0 "host peak 0 B of .* \(auto: this machine's\)$" \
  "${tiny[@]}" --host-mem-limit auto
expect_error "--memory-limit auto without a GPU here" "memory-limit auto asks the GPU here, and there is none" \
  env CUDA_VISIBLE_DEVICES= "$ULYSSES" plan --backend cuda "${tiny[@]}" --memory-limit auto
expect_error "a budget that is no number" "--memory-limit expects a finite number of GiB, got 'lots'" \
  "$ULYSSES" plan "${tiny[@]}" --memory-limit lots

# --max-seq searches the same budgets and says where they come from.
"$ULYSSES" plan --shape tiny --layers 2 --max-seq --memory-limit 0.25 > max.txt 2>&1
grep -q -E "^budgets: device 256.0 MiB \(--memory-limit\), host 120.00 GiB \(default: H200 target\)$" max.txt \
  && pass "--max-seq states its budgets" || { fail "--max-seq states its budgets"; head -3 max.txt; }

finish
