#!/usr/bin/env bash
# ulysses plan --max-seq: the longest sequence for a budget, and that sequence's plan fits the
# budget while one step more does not (checked with plan --seq ... --memory-limit).
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

"$ULYSSES" plan --shape tiny --layers 2 --max-seq --memory-limit 0.25 --checkpoint --tiled-mlp > out.txt 2> err.txt \
  && pass "plan --max-seq runs" || { fail "plan --max-seq runs"; sed 's/^/     /' err.txt | tail -5; }
n=$(sed -n 's/^max seq: \([0-9]*\) tokens with .*/\1/p' out.txt)
opts=$(sed -n 's/^max seq: [0-9]* tokens with \(.*\)/\1/p' out.txt)
[ -n "$n" ] && [ "$n" -gt 0 ] && pass "max seq line ($n tokens, $opts)" || { fail "max seq line"; cat out.txt | head -12; }
grep -q -E "^  --offload-checkpoints --tiled-loss --tiled-mlp +[0-9]+$" out.txt \
  && pass "the ladder lists offloaded checkpoints" || fail "the ladder lists offloaded checkpoints"
if [ -n "$n" ] && [ "$opts" != "(none)" ]; then
  # shellcheck disable=SC2086
  "$ULYSSES" plan --shape tiny --layers 2 --seq "$n" --memory-limit 0.25 $opts > fit.txt 2>&1 \
    && pass "the plan of $n tokens fits" || { fail "the plan of $n tokens fits"; tail -3 fit.txt; }
  # shellcheck disable=SC2086
  "$ULYSSES" plan --shape tiny --layers 2 --seq $((n + 1024)) --memory-limit 0.25 $opts > over.txt 2>&1 \
    && fail "$((n + 1024)) tokens must not fit" || pass "$((n + 1024)) tokens do not fit"
fi
# bench --find-max-seq: the same search, then a measured step at that length whose pools equal its plan.
"$ULYSSES" bench --shape tiny --layers 1 --find-max-seq --memory-limit 0.01 --steps 1 --warmup 0 --no-optimizer \
  --tiled-mlp --tiled-loss --checkpoint > bench.txt 2> bench_err.txt \
  && pass "bench --find-max-seq runs" || { fail "bench --find-max-seq runs"; tail -5 bench_err.txt; }
grep -q -E "^find-max-seq confirmed +[0-9]+ tokens: planned device peak [0-9]+ bytes, measured [0-9]+ \(equal\); host [0-9]+, [0-9]+ \(equal\)" bench.txt \
  && pass "bench --find-max-seq: measured peaks equal the plan" || { fail "bench --find-max-seq: measured = plan"; grep find-max bench.txt; }
# plan resolves --keep-attention auto as bench and train do (on where the step with it fits), so a
# checkpointed step's plan is the peak bench measures (until 2026-12-07 plan took auto as off: 2 layers,
# 1,024 tokens planned 6,400,552 bytes against the 6,679,080 measured).
"$ULYSSES" plan --shape tiny --layers 2 --seq 1024 --checkpoint --no-optimizer > keep_plan.txt 2>&1 \
  && grep -q -- "^--keep-attention auto: on" keep_plan.txt \
  && pass "plan --checkpoint: keep-attention auto resolved (on)" || { fail "plan resolves keep-attention auto"; head -3 keep_plan.txt; }
planned=$(sed -n 's/^  peak  *device .*(\([0-9]*\) bytes)$/\1/p' keep_plan.txt)
"$ULYSSES" bench --shape tiny --layers 2 --seq 1024 --checkpoint --no-optimizer --steps 1 --warmup 0 > keep_bench.txt 2>&1
measured=$(sed -n 's/.*"peak_device_bytes":\([0-9]*\).*/\1/p' keep_bench.txt)
[ -n "$planned" ] && [ "$planned" = "$measured" ] \
  && pass "plan --checkpoint = bench's measured peak ($planned bytes)" \
  || fail "plan --checkpoint ($planned bytes) = bench's measured peak ($measured)"
expect_error "bench --find-max-seq with --seq" "leave out --seq" \
  "$ULYSSES" bench --shape tiny --find-max-seq --seq 1024 --memory-limit 0.01
# Without --memory-limit the search is for an H200 (plan_verdict_test.sh); auto asks the GPU here.
expect_error "cuda --max-seq asking for a GPU there is not" "memory-limit auto asks the GPU here" \
  env CUDA_VISIBLE_DEVICES= "$ULYSSES" plan --shape tiny --backend cuda --max-seq --memory-limit auto

finish
