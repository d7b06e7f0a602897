#!/usr/bin/env bash
# The Hopper (sm_90a, wgmma) attention kernels in one device call of under ten minutes (issue 31):
# the forward's tests of variant 3 (the default) and the engine's opt-ins, the backward's tests of
# variants 3, 3 deterministic and 4, a memcheck of the newest variants' small cases, then the
# timings against cuDNN in the same call: forward (attention_bench: cudnn, hopper3) and backward
# alone (hopper_bwd_bench: cudnn, hopper2, hopper3, hopper3d; at 128K cudnn, hopper3) at d 128,
# 32 / 8 heads, S 32K and 128K (QUICK_SIZES="4096 32768 131072" to add 4K). Partial results are printed as they
# come; every step has its own timeout; a hang in a small case skips that kernel's later steps.
#   bash bench/device/hopper_quick.sh BUILD     (BUILD: the carried GPU build directory)
#   QUICK_SIZES="32768": the timings at these lengths only; QUICK_MEMCHECK=0: no memcheck.
set -uo pipefail
B=${1:-build-gpu}
TF="$B/tests/cuda_hopper_attention_test"
TB="$B/tests/cuda_hopper_attention_backward_test"
for x in "$TF" "$TB" "$B/attention_bench" "$B/hopper_bwd_bench"; do
  [ -x "$x" ] || { echo "hopper_quick: no $x"; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/hopper_quick: GPU /'
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
rc=0
step() {  # label, timeout, command...: runs it, prints and returns its status
  local label=$1 limit=$2; shift 2
  echo "== hopper_quick: $label"
  timeout "$limit" "$@"
  local r=$?
  echo "hopper_quick: $label rc=$r"
  [ $r -eq 0 ] || rc=1
  return $r
}
FV='Hopper/HopperAttentionVariant'
BV='Hopper/HopperAttentionBackwardVariant'

fwd_ok=1
step "forward small case v3" 30 "$TF" --gtest_color=no --gtest_filter="$FV.D128Small/v3" || fwd_ok=0
if [ $fwd_ok -eq 1 ]; then
  step "forward tests v3 and the engine's" 120 "$TF" --gtest_color=no --gtest_filter="$FV.*/v3:HopperAttention.*"
fi
bwd_ok=1
step "backward small cases v3, v3det, v4" 45 "$TB" --gtest_color=no --gtest_filter="$BV.D128Small/v3:$BV.D128Small/v3det:$BV.D64Small/v3:$BV.D64Small/v4" || bwd_ok=0
if [ $bwd_ok -eq 1 ]; then
  # (variants 1 and 2, tested on a GPU before, are left to hopper_bwd.sh)
  step "backward tests, variants 3, 3det, 4, and the engine's" 180 "$TB" --gtest_color=no \
    --gtest_filter="$BV.*/v3:$BV.*/v3det:$BV.*/v4:HopperAttentionBackward.*"
fi
if [ -x "$CS" ] && [ "${QUICK_MEMCHECK:-1}" = 1 ]; then
  [ $fwd_ok -eq 1 ] && step "memcheck forward v3" 60 "$CS" --tool memcheck --error-exitcode 9 "$TF" --gtest_color=no --gtest_filter="$FV.D128Small/v3"
  [ $bwd_ok -eq 1 ] && step "memcheck backward v3, v3det, v4" 60 "$CS" --tool memcheck --error-exitcode 9 "$TB" --gtest_color=no --gtest_filter="$BV.D128Small/v3:$BV.D128Small/v3det:$BV.D64Small/v4"
fi

echo "== hopper_quick: timings, d 128, H 32 / Hkv 8"
for S in ${QUICK_SIZES:-32768 131072}; do
  fi_impls="cudnn"; [ $fwd_ok -eq 1 ] && fi_impls="cudnn hopper3"
  for impl in $fi_impls; do
    timeout 60 "$B/attention_bench" --impl $impl $S 2>&1 | grep -v '^{'
  done
  bi="cudnn hopper2"; [ $bwd_ok -eq 1 ] && bi="$bi hopper3 hopper3d"
  [ $S -eq 131072 ] && { bi="cudnn"; [ $bwd_ok -eq 1 ] && bi="cudnn hopper3"; }
  for impl in $bi; do
    timeout 60 "$B/hopper_bwd_bench" --reps 5 --impl $impl $S 2>&1 | grep -E 'backward|checking|supported|error'
  done
done
echo "hopper_quick: done rc=$rc"
exit $rc
