#!/usr/bin/env bash
# Nsight Compute on one launch each of the Hopper attention kernels at S = 32K, d 128, 32 / 8 heads:
# the backward (variants 2 and 1) and the forward (variant 3, TMA):
# speed of light (tensor pipe, shared memory, L2, DRAM), warp stall reasons, shared
# memory and L2 traffic; text on stdout. Skips (rc 0) where ncu is absent.
#   bash bench/device/hopper_profile.sh BUILD
#   HOPPER_PROFILE_ONLY=REGEX: only the launches whose label matches (e.g. "variant 2").
set -uo pipefail
B=${1:-build-gpu}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "hopper_profile: no ncu, skipped"; exit 0; }
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy"
prof() {  # label, kernel-name regex, command...
  local label=$1 kernel=$2; shift 2
  [[ "$label" =~ ${HOPPER_PROFILE_ONLY:-.} ]] || return 0
  echo "== hopper_profile: $label"
  timeout 120 "$NCU" --kernel-name "regex:$kernel" --launch-skip 1 --launch-count 1 $SECTIONS "$@" 2>&1 |
    grep -v '^==PROF==' | sed 's/^/  /'
  echo "hopper_profile: $label rc=${PIPESTATUS[0]}"
}
prof "backward variant 2 (TMA), 32K" hopper_attention_backward_tma "$B/hopper_bwd_bench" --impl hopper2 --reps 1 32768
prof "backward variant 6, 32K" hopper_attention_backward_tma "$B/hopper_bwd_bench" --impl hopper6 --reps 1 32768
prof "forward variant 3 (TMA), 32K" hopper_attention_forward_tma "$B/attention_bench" --impl hopper3 --reps 1 32768
