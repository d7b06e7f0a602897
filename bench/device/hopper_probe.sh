#!/usr/bin/env bash
# One short device call (under a minute on an H100) for the Hopper attention kernels (issue 31):
# wgmma_rate_bench (what the kernels' wgmma shapes reach alone), the forward's variant-3 tests and the
# engine's, the backward's variant 2 and 4 tests and the engine's, then timings next to cuDNN
# (forward at 4K, 32K, packed 8 x 4K; backward alone at d 128 4K/32K and d 64 4K/32K with variants
# 2 and 4), and memchecks of small cases (backward v3, v3det, v4; forward v3).
#   bash bench/device/hopper_probe.sh BUILD    (through runner.py: case hopper_probe)
set -u
B=${1:-build-gpu}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
echo "== rate"; timeout 60 $B/wgmma_rate_bench 2>&1 | tee $OUT/rate.txt
FV='Hopper/HopperAttentionVariant'
BV='Hopper/HopperAttentionBackwardVariant'
echo "== fwd tests"; timeout 120 $B/tests/cuda_hopper_attention_test --gtest_color=no --gtest_filter="$FV.*/v3:HopperAttention.*" 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error|tests ran" | tail -15
echo "== bwd tests"; timeout 200 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no --gtest_filter="$BV.*/v2:$BV.*/v4:HopperAttentionBackward.*" 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error|tests ran" | tail -25
echo "== fwd bench"; for a in "4096" "32768" "--doc-len 4096 32768"; do for i in cudnn hopper3; do timeout 60 $B/attention_bench --impl $i $a 2>&1 | grep -E "^(cudnn|hopper3) |error"; done; done
echo "== bwd bench d128"; for S in 4096 32768; do for i in cudnn hopper2; do timeout 60 $B/hopper_bwd_bench --reps 5 --impl $i $S 2>&1 | grep -E 'backward|error'; done; done
echo "== bwd bench d64"; for S in 4096 32768; do for i in cudnn hopper2 hopper4; do timeout 60 $B/hopper_bwd_bench --head-dim 64 --reps 5 --impl $i $S 2>&1 | grep -E 'backward|error'; done; done
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== memcheck"; timeout 70 $CS --tool memcheck --error-exitcode 9 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no --gtest_filter="$BV.D128Small/v3:$BV.D128Small/v3det:$BV.D64Small/v4" 2>&1 | tail -4
timeout 60 $CS --tool memcheck --error-exitcode 9 $B/tests/cuda_hopper_attention_test --gtest_color=no --gtest_filter='Hopper/HopperAttentionVariant.D128Small/v3' 2>&1 | tail -4
echo "== done"
