#!/usr/bin/env bash
# A/B of the Hopper attention kernels' CTA order (ULYSSES_HOPPER_CTA_ORDER heads-outer against
# heads-inside; unset, the forward takes heads-inside and the backward picks by the longest
# document, docs/attention.md) in one call, next to cuDNN: the forward
# (attention_bench --impl hopper3) and the backward alone (hopper_bwd_bench --impl hopper2) at d 128,
# 32 / 8 heads; 32K twice in A B A B order to show the run-to-run spread. Tests of the kernels first.
#   bash bench/device/hopper_order_ab.sh BUILD
#   AB_QUICK=1: only the kernels' small test cases, and no 128K (about a minute).
set -uo pipefail
B=${1:-build-gpu}
FV='Hopper/HopperAttentionVariant'
BV='Hopper/HopperAttentionBackwardVariant'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/hopper_order_ab: GPU /'
rc=0
TF="$FV.*/v3:HopperAttention.*"
TB="$BV.*/v2:$BV.*/v3:$BV.*/v3det:$BV.*/v4:HopperAttentionBackward.*"
if [ "${AB_QUICK:-0}" = 1 ]; then TF="$FV.*Small*/v3"; TB="$BV.*Small*/v2:$BV.*Small*/v3det:$BV.*Small*/v4"; fi
timeout 120 "$B/tests/cuda_hopper_attention_test" --gtest_color=no --gtest_filter="$TF" 2>&1 |
  grep -E "^\[  (PASSED|FAILED)|Failure" | tail -12
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
timeout 240 "$B/tests/cuda_hopper_attention_backward_test" --gtest_color=no --gtest_filter="$TB" 2>&1 |
  grep -E "^\[  (PASSED|FAILED)|Failure" | tail -12
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
ab() {  # S, orders...
  local S=$1; shift
  timeout 90 "$B/attention_bench" --impl cudnn $S 2>&1 | grep -E "^cudnn |error"
  timeout 90 "$B/hopper_bwd_bench" --reps 5 --impl cudnn $S 2>&1 | grep -E "backward|error"
  for o in "$@"; do
    echo "-- ULYSSES_HOPPER_CTA_ORDER=$o"
    ULYSSES_HOPPER_CTA_ORDER=$o timeout 90 "$B/attention_bench" --impl hopper3 $S 2>&1 | grep -E "^hopper3 |error"
    ULYSSES_HOPPER_CTA_ORDER=$o timeout 90 "$B/hopper_bwd_bench" --reps 5 --impl hopper2 $S 2>&1 | grep -E "backward|error"
  done
}
echo "== 32K"; ab 32768 heads-outer heads-inside heads-outer heads-inside
echo "== 4K"; ab 4096 heads-outer heads-inside
echo "== packed 8 x 4K (forward)"
for o in heads-outer heads-inside; do
  ULYSSES_HOPPER_CTA_ORDER=$o timeout 90 "$B/attention_bench" --impl hopper3 --doc-len 4096 32768 2>&1 | grep -E "^hopper3 |error"
done
[ "${AB_QUICK:-0}" = 1 ] || { echo "== 128K"; ab 131072 heads-outer heads-inside; }
echo "hopper_order_ab: done rc=$rc"
exit $rc
