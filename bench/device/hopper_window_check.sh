#!/usr/bin/env bash
# One short device call for the engine's choice with sliding windows (cuDNN does not take windowed rows,
# so under ULYSSES_ATTENTION=auto the alternative to our Hopper kernels is our FA2 kernels): the CUDA
# backend's tests (its windowed dispatch cases against the CPU under auto, then forced onto the Hopper
# backward's variants 6 and 7), the window tests of backward variant 3, windowed timings at d 64
# (own against ours) and forward variant 4 with a window, and d 64 backward at 4K against cuDNN
# alternated three times (backward variant 7's margin).
#   bash bench/device/hopper_window_check.sh BUILD
set -u
B=${1:-build-gpu}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
ok() { grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error|tests ran|attention (forward|backward):" | sort | uniq -c | tail -30; }
BV='Hopper/HopperAttentionBackwardVariant'
echo "== cuda_backend_test (auto)"; timeout 150 $B/tests/cuda_backend_test --gtest_color=no 2>&1 | ok
for v in 6 7; do
  echo "== windowed dispatch, ULYSSES_ATTENTION=hopper ULYSSES_HOPPER_BWD=$v"
  ULYSSES_ATTENTION=hopper ULYSSES_HOPPER_BWD=$v timeout 60 $B/tests/cuda_backend_test --gtest_color=no \
    --gtest_filter='*CudaAttentionDispatch*' 2>&1 | ok
done
echo "== backward variant 3: window tests"
timeout 60 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no \
  --gtest_filter="$BV.*SlidingWindow/v3:$BV.*SlidingWindow/v3det" 2>&1 | ok
fb() { timeout 90 $B/attention_bench --impl "$@" 2>&1 | grep -E "^(cudnn|own|ours|hopper[0-9]) |error"; }
echo "== windowed 4096, d 64 and 128"
for a in "--head-dim 64 --window 4096 32768" "--window 4096 32768"; do
  fb own $a; for v in 4 6 7; do fb ours --hopper-bwd $v $a; done; fb hopper3 $a; fb hopper4 $a
done
echo "== d 64 backward at 4K, three rounds"
for r in 1 2 3; do
  for i in cudnn hopper7 hopper4; do timeout 60 $B/hopper_bwd_bench --reps 10 --impl $i --head-dim 64 4096 2>&1 | grep -E 'backward|error'; done
done
echo "== done"
