#!/usr/bin/env bash
# One short device call (two to three minutes on an H100) for the Hopper attention kernels (issue 31):
# the forward's variant-3 and -4 tests and the engine's, the backward's tests of variants 2, 4-7, 9 and 11 and
# the engine's (a variant whose small cases fail or hang is left out of the rest), then timings next to
# cuDNN in the same call: the backward alone at d 128 (4K, 32K, 128K) and d 64 (4K, 32K); at 32K and
# 128K the backward's CTA orders (ULYSSES_HOPPER_CTA_ORDER heads-outer / heads-inside against the
# default); forward + backward (attention_bench --impl ours, the issue's measure) at 4K, 32K, packed
# 8 x 4K and 128K; with a sliding window of 4,096 against our FA2 kernels; memchecks of small cases.
#   bash bench/device/hopper_probe.sh BUILD    (through runner.py: case hopper_probe)
#   PROBE_VARS="6 9": only those backward variants (default all). PROBE_SHORT=1: without the forward's
#   variant 4 and the CTA-order runs. PROBE_RATE=1: also wgmma_rate_bench. PROBE_PROFILE=1: then
#   Nsight Compute's speed of light of backward variants 2 and 6 at 32K (skipped without ncu).
#   PROBE_LONG=0: without the 128K timings.
set -u
B=${1:-build-gpu}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
[ "${PROBE_RATE:-0}" = 1 ] && { echo "== rate"; timeout 60 $B/wgmma_rate_bench 2>&1 | tee $OUT/rate.txt; }
FV='Hopper/HopperAttentionVariant'
BV='Hopper/HopperAttentionBackwardVariant'
ok() { grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error|tests ran" | tail -25; }
echo "== fwd tests"; timeout 120 $B/tests/cuda_hopper_attention_test --gtest_color=no --gtest_filter="$FV.*/v3:HopperAttention.*" 2>&1 | ok
# Forward variant 4 (persistent): its small case first under a short timeout, then its sweeps.
F4=0
if [ "${PROBE_SHORT:-0}" = 1 ]; then
  echo "== forward variant 4: not run (PROBE_SHORT=1)"
elif timeout 30 $B/tests/cuda_hopper_attention_test --gtest_color=no --gtest_filter="$FV.D128Small/v4" > /tmp/probe_f4.log 2>&1; then
  F4=1; echo "== fwd tests v4"; timeout 120 $B/tests/cuda_hopper_attention_test --gtest_color=no --gtest_filter="$FV.*/v4" 2>&1 | ok
else
  echo "== forward variant 4: small case failed or hung (rc $?); left out"; tail -5 /tmp/probe_f4.log
fi
# Each backward variant's small cases first, under a short timeout; a failure or a hang leaves it out
# of everything after, so the call still returns the rest.
VARS=""
for v in ${PROBE_VARS:-2 4 5 6 7 9 11}; do
  if timeout 30 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no \
       --gtest_filter="$BV.D128Small/v$v:$BV.D64Small/v$v" > /tmp/probe_small_v$v.log 2>&1; then
    VARS="$VARS $v"
  else
    echo "== backward variant $v: small cases failed or hung (rc $?); left out"; tail -5 /tmp/probe_small_v$v.log
  fi
done
echo "== backward variants that passed their small cases:${VARS:- none}"
F="HopperAttentionBackward.*"
for v in $VARS; do F="$F:$BV.*/v$v"; done
case " $VARS " in *" 6 "*) ;; *) F="$F:-HopperAttentionBackward.BackendOptInPipelined" ;; esac
case " $VARS " in *" 7 "*) ;; *) F="$F:-HopperAttentionBackward.BackendOptInDqWriter" ;; esac
case " $VARS " in *" 9 "*) ;; *) F="$F:-HopperAttentionBackward.BackendOptInSplit" ;; esac
echo "== bwd tests"; timeout 240 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no --gtest_filter="$F" 2>&1 | ok
has() { case " $VARS " in *" $1 "*) return 0 ;; esac; return 1; }
bwd() { timeout 90 $B/hopper_bwd_bench --reps 5 --impl "$@" 2>&1 | grep -E 'backward|error'; }
fb() { timeout 120 $B/attention_bench --impl "$@" 2>&1 | grep -E "^(cudnn|own|ours) |error"; }
H128="cudnn"; H64="cudnn"
for v in 2 5 6 7 9 11; do has $v && H128="$H128 hopper$v"; done
for v in 4 5 6 7 9 11; do has $v && H64="$H64 hopper$v"; done
LENS="4096 32768"; [ "${PROBE_LONG:-1}" = 1 ] && LENS="$LENS 131072"
echo "== bwd bench d128 (default CTA order)"; for S in $LENS; do for i in $H128; do bwd $i $S; done; done
echo "== bwd bench d64"; for S in 4096 32768; do for i in $H64; do bwd $i --head-dim 64 $S; done; done
BEST=6; has 6 || BEST=2
echo "== backward CTA orders (variant $BEST; the default above)"
for S in $LENS; do
  [ "$S" = 4096 ] || [ "${PROBE_SHORT:-0}" = 1 ] && continue
  for o in heads-outer heads-inside; do echo "-- $o"; ULYSSES_HOPPER_CTA_ORDER=$o bwd hopper$BEST $S; done
done
FB="$BEST"; for v in 7 9 11; do has $v && FB="$FB $v"; done
if [ "$F4" = 1 ]; then
  echo "== forward variant 3 against 4 (persistent), cuDNN's forward in the fwd+bwd lines below"
  fwd() { timeout 60 $B/attention_bench --impl "$@" 2>&1 | grep -E "^(hopper3|hopper4) |error"; }
  for a in "4096" "32768" "--doc-len 4096 32768" "--doc-len 4096 32768" $([ "${PROBE_LONG:-1}" = 1 ] && echo 131072); do
    fwd hopper3 $a; fwd hopper4 $a
  done
fi
echo "== forward + backward (ours: forward variant 3, backward variants $FB)"
for a in "4096" "32768" "--doc-len 4096 32768" $([ "${PROBE_LONG:-1}" = 1 ] && echo 131072); do
  fb cudnn $a; for v in $FB; do fb ours --hopper-bwd $v $a; done
done
# Sliding windows (Mistral's 4,096): cuDNN does not take windowed rows, so the engine's alternative is
# our FA2 kernels (own).
echo "== sliding window 4096: own (FA2) against ours (forward variant 3, backward variants $FB)"
for S in 32768 $([ "${PROBE_LONG:-1}" = 1 ] && echo 131072); do
  fb own --window 4096 $S; for v in $FB; do fb ours --hopper-bwd $v --window 4096 $S; done
done
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== memcheck"
M=""
for v in $VARS; do M="$M:$BV.D128Small/v$v:$BV.D64Small/v$v"; done
timeout 120 $CS --tool memcheck --error-exitcode 9 $B/tests/cuda_hopper_attention_backward_test --gtest_color=no \
  --gtest_filter="${M#:}" 2>&1 | tail -4
[ "$F4" = 1 ] && timeout 60 $CS --tool memcheck --error-exitcode 9 $B/tests/cuda_hopper_attention_test --gtest_color=no \
  --gtest_filter="$FV.D128Small/v4" 2>&1 | tail -3
if [ "${PROBE_PROFILE:-0}" = 1 ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  if [ -x "$NCU" ]; then
    for v in 2 $(has 6 && echo 6); do
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
