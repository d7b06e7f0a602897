#!/usr/bin/env bash
# The Hopper (sm_90a, wgmma) attention backward on the GPU, all variants (2: TMA loads, TMA-reduced dQ;
# 3: 2 with the consumers coupled one pair late; 4-7 built on 2): their tests, a memcheck of one small case each, then
# the backward alone for cuDNN, our FA2 kernel and the Hopper variants at d = 128, 32 / 8 heads.
# Partial results are printed as they come; every step has its own timeout, the whole under about
# 5 minutes.
#   bash bench/device/hopper_bwd.sh BUILD     (BUILD: the carried GPU build directory, e.g. build-gpu)
set -uo pipefail
B=${1:-build-gpu}
T="$B/tests/cuda_hopper_attention_backward_test"
[ -x "$T" ] && [ -x "$B/hopper_bwd_bench" ] || { echo "hopper_bwd: no $T or $B/hopper_bwd_bench"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/hopper_bwd: GPU /'
rc=0
V='Hopper/HopperAttentionBackwardVariant'

echo "== hopper_bwd: small cases first (a hang or a fault shows here quickly)"
timeout 45 "$T" --gtest_color=no \
  --gtest_filter="$V.D128Small/*:$V.D64Small/*:HopperAttentionBackward.RefusesUnsupported"
r=$?; echo "hopper_bwd: small cases rc=$r"; [ $r -eq 0 ] || rc=1
if [ $r -eq 124 ]; then  # a hang: the longer steps would only hang too
  echo "hopper_bwd: the small cases timed out; the rest skipped"
  exit 1
fi

echo "== hopper_bwd: all Hopper backward tests"
timeout 240 "$T" --gtest_color=no
r=$?; echo "hopper_bwd: tests rc=$r"; [ $r -eq 0 ] || rc=1

echo "== hopper_bwd: compute-sanitizer memcheck, one small case per variant"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$CS" ]; then
  for v in v2 v3 v3det v4 v5 v6 v7; do
    timeout 60 "$CS" --tool memcheck --error-exitcode 9 "$T" --gtest_color=no --gtest_filter="$V.D128Small/$v"
    r=$?; echo "hopper_bwd: memcheck $v rc=$r"; [ $r -eq 0 ] || rc=1
  done
else
  echo "hopper_bwd: compute-sanitizer not found, memcheck skipped"
fi

echo "== hopper_bwd: hopper_bwd_bench, d 128, H 32 / Hkv 8 (backward TFLOPS = 5*S^2*H*d / time)"
for S in 4096 32768 131072; do
  timeout 60 "$B/hopper_bwd_bench" --reps 5 $S 2>&1
  echo "hopper_bwd: bench S=$S rc=$?"
done
echo "hopper_bwd: done rc=$rc"
exit $rc
