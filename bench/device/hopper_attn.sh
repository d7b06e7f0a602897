#!/usr/bin/env bash
# The Hopper (sm_90a, wgmma) attention forward on the GPU (issue 31, first step): its tests, a
# memcheck of one small case, then cuDNN against it at d = 128, 32 / 8 heads. Partial results are
# printed as they come; every step has its own timeout, the whole under about 5 minutes.
#   bash bench/device/hopper_attn.sh BUILD     (BUILD: the carried GPU build directory, e.g. build-gpu)
set -uo pipefail
B=${1:-build-gpu}
T="$B/tests/cuda_hopper_attention_test"
[ -x "$T" ] && [ -x "$B/attention_bench" ] || { echo "hopper_attn: no $T or $B/attention_bench"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/hopper_attn: GPU /'
rc=0

echo "== hopper_attn: small cases first (a hang or a fault shows here quickly)"
timeout 60 "$T" --gtest_color=no --gtest_filter='HopperAttention.D128Small:HopperAttention.RefusesUnsupported'
r=$?; echo "hopper_attn: small cases rc=$r"; [ $r -eq 0 ] || rc=1

echo "== hopper_attn: all Hopper tests"
timeout 120 "$T" --gtest_color=no --gtest_filter='HopperAttention.*'
r=$?; echo "hopper_attn: tests rc=$r"; [ $r -eq 0 ] || rc=1

echo "== hopper_attn: compute-sanitizer memcheck, one small case"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$CS" ]; then
  timeout 90 "$CS" --tool memcheck --error-exitcode 9 "$T" --gtest_color=no --gtest_filter='HopperAttention.D128Small'
  r=$?; echo "hopper_attn: memcheck rc=$r"; [ $r -eq 0 ] || rc=1
else
  echo "hopper_attn: compute-sanitizer not found, memcheck skipped"
fi

echo "== hopper_attn: attention_bench, d 128, H 32 / Hkv 8 (forward TFLOPS = 2*S^2*H*d / time)"
for S in 4096 32768 131072; do
  for impl in cudnn hopper; do
    timeout 45 "$B/attention_bench" --impl $impl --reps 5 $S 2>&1
    echo "hopper_attn: bench $impl S=$S rc=$?"
  done
done
echo "hopper_attn: done rc=$rc"
exit $rc
