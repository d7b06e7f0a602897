#!/usr/bin/env bash
# One short device call (about a minute on an H100) for the Hopper attention kernels (issue 31):
# wgmma_rate_bench (what the kernels' wgmma shapes reach alone), the forward's variant-3 tests and the
# engine's, the backward's tests of variants 2, 4, 5 and 6 and the engine's, then timings next to
# cuDNN: the forward at 4K, 32K and packed 8 x 4K; the backward alone at d 128 (variants 2, 5, 6) and
# d 64 (2, 4, 5, 6) at 4K and 32K; at 32K the CTA order A/B (ULYSSES_HOPPER_CTA_ORDER heads-outer /
# heads-inside) of the forward and of backward variant 2; memchecks of small cases.
#   bash bench/device/hopper_probe.sh BUILD    (through runner.py: case hopper_probe)
#   PROBE_RATE=0: without wgmma_rate_bench. PROBE_PROFILE=1: then Nsight Compute's speed of light and
#   warp stalls of backward variants 2 and 6 at 32K (hopper_profile.sh's sections; skipped without ncu).
#   PROBE_LONG=1: also the forward and backward (the variants above and 3) at 128K, d 128.
set -u
B=${1:-build-gpu}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
[ "${PROBE_RATE:-1}" = 1 ] && { echo "== rate"; timeout 60 $B/wgmma_rate_bench 2>&1 | tee $OUT/rate.txt; }
FV='Hopper/HopperAttentionVariant'
BV='Hopper/HopperAttentionBackwardVariant'
ok() { grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error|tests ran" | tail -25; }
echo "== fwd tests"; timeout 120 $B/tests/cuda_hopper_attention_test --gtest_color=no --gtest_filter="$FV.*/v3:HopperAttention.*" 2>&1 | ok
# Variants 5 and 6 (new): their small cases first, under a short timeout; a failure or a hang leaves
# them out of everything after, so the call still returns the rest.
NEW=""
for v in 5 6; do
  if timeout 30 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no \
       --gtest_filter="$BV.D128Small/v$v:$BV.D64Small/v$v" > /tmp/probe_small_v$v.log 2>&1; then
    NEW="$NEW $v"
  else
    echo "== backward variant $v: small cases failed or hung (rc $?); left out"; tail -5 /tmp/probe_small_v$v.log
  fi
done
echo "== new variants that passed their small cases:${NEW:- none}"
F="$BV.*/v2:$BV.*/v4:HopperAttentionBackward.*"
for v in $NEW; do F="$F:$BV.*/v$v"; done
case " $NEW " in *" 6 "*) ;; *) F="$F:-HopperAttentionBackward.BackendOptInPipelined" ;; esac
echo "== bwd tests"; timeout 240 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no --gtest_filter="$F" 2>&1 | ok
fwd() { timeout 60 $B/attention_bench --impl "$@" 2>&1 | grep -E "^(cudnn|hopper3) |error"; }
bwd() { timeout 60 $B/hopper_bwd_bench --reps 5 --impl "$@" 2>&1 | grep -E 'backward|error'; }
echo "== fwd bench"; for a in "4096" "32768" "--doc-len 4096 32768"; do fwd cudnn $a; fwd hopper3 $a; done
H128="cudnn hopper2"; H64="cudnn hopper2 hopper4"
for v in $NEW; do H128="$H128 hopper$v"; H64="$H64 hopper$v"; done
echo "== bwd bench d128"; for S in 4096 32768; do for i in $H128; do bwd $i $S; done; done
echo "== bwd bench d64"; for S in 4096 32768; do for i in $H64; do bwd $i --head-dim 64 $S; done; done
if [ "${PROBE_LONG:-0}" = 1 ]; then
  echo "== 128K (d128): forward, backward"; fwd cudnn 131072; fwd hopper3 131072
  for i in $H128 hopper3; do bwd $i 131072; done
fi
echo "== CTA order A/B at 32K (forward, backward variant 2)"
for o in heads-outer heads-inside heads-outer heads-inside; do
  echo "-- $o"; ULYSSES_HOPPER_CTA_ORDER=$o fwd hopper3 32768; ULYSSES_HOPPER_CTA_ORDER=$o bwd hopper2 32768
done
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== memcheck"
M="$BV.D64Small/v4"
for v in $NEW; do M="$M:$BV.D128Small/v$v:$BV.D64Small/v$v"; done
timeout 90 $CS --tool memcheck --error-exitcode 9 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no \
  --gtest_filter="$M" 2>&1 | tail -4
if [ "${PROBE_PROFILE:-0}" = 1 ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  if [ -x "$NCU" ]; then
    for v in 2 $(case " $NEW " in *" 6 "*) echo 6 ;; esac); do
      echo "== profile backward variant $v, 32K"
      timeout 150 "$NCU" --kernel-name regex:hopper_attention_backward_tma --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats "$B/hopper_bwd_bench" --impl hopper$v --reps 1 32768 2>&1 |
        grep -v '^==PROF==' | grep -E "Throughput|Pipe|Stall|Issued|Eligible|Duration|Frequency|Warp Cycles" | head -40
    done
  else
    echo "== profile: no ncu"
  fi
fi
echo "== done"
