#!/usr/bin/env bash
# The Hopper (sm_90a, wgmma) attention forward on the GPU (issue 31): its tests for the two kernel
# variants (3: intra-warpgroup overlap, ping-pong, 3 stages, a TMA producer; 4: variant 3
# persistent), a memcheck of one small case of each, then cuDNN against them at d = 128, 32 / 8 heads.
# Partial results are printed as they come; every step has its own timeout (a variant whose small
# case hung is skipped afterwards, so a hang costs its small-case step only).
#   bash bench/device/hopper_attn.sh BUILD     (BUILD: the carried GPU build directory, e.g. build-gpu)
set -uo pipefail
B=${1:-build-gpu}
T="$B/tests/cuda_hopper_attention_test"
[ -x "$T" ] && [ -x "$B/attention_bench" ] || { echo "hopper_attn: no $T or $B/attention_bench"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/hopper_attn: GPU /'
rc=0
V='Hopper/HopperAttentionVariant'
OK=""
for v in 3 4; do
  echo "== hopper_attn: variant $v: its small case (a hang or a fault shows here quickly), then all its tests"
  timeout 30 "$T" --gtest_color=no --gtest_filter="$V.D128Small/v$v"
  r=$?; echo "hopper_attn: small case v$v rc=$r"; [ $r -eq 0 ] || rc=1
  if [ $r -eq 124 ]; then
    echo "hopper_attn: variant $v's small case timed out; its tests, memcheck and bench skipped"
    continue
  fi
  OK="$OK $v"
  timeout 120 "$T" --gtest_color=no --gtest_filter="$V.*/v$v"
  r=$?; echo "hopper_attn: tests v$v rc=$r"; [ $r -eq 0 ] || rc=1
done
echo "== hopper_attn: the engine's opt-in and the refusals"
timeout 60 "$T" --gtest_color=no --gtest_filter='HopperAttention.*'
r=$?; echo "hopper_attn: engine tests rc=$r"; [ $r -eq 0 ] || rc=1

echo "== hopper_attn: compute-sanitizer memcheck, one small case per variant"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
MF=""
for v in $OK; do MF="$MF:$V.D128Small/v$v"; done
if [ -x "$CS" ] && [ -n "$MF" ]; then
  timeout 75 "$CS" --tool memcheck --error-exitcode 9 "$T" --gtest_color=no --gtest_filter="${MF#:}"
  r=$?; echo "hopper_attn: memcheck rc=$r"; [ $r -eq 0 ] || rc=1
else
  echo "hopper_attn: compute-sanitizer not found or no variant left, memcheck skipped"
fi

echo "== hopper_attn: attention_bench, d 128, H 32 / Hkv 8 (forward TFLOPS = 2*S^2*H*d / time)"
for S in 4096 32768 131072; do
  for impl in cudnn $(for v in $OK; do echo hopper$v; done); do
    timeout 40 "$B/attention_bench" --impl $impl --reps 5 $S 2>&1
    echo "hopper_attn: bench $impl S=$S rc=$?"
  done
done
echo "hopper_attn: done rc=$rc"
exit $rc
