#!/usr/bin/env bash
# Ring attention and the hybrid mesh from the command line (issue #12): loss-grad under
# mpirun with --sp-ring (pure ring, beyond the head count, zigzag; and Ulysses × ring)
# gives the float64 Hugging Face loss and gradients of the packed fixture; the plan
# names the scheme; bad degrees and zigzag lengths fail with one clear line on every rank.
# The same under ZeRO stages 2 and 3.
source "$(dirname "$0")/lib.sh" "$@"
skip_unless_python numpy safetensors
F=$ROOT/fixtures/packed   # 4 query heads, 2 kv heads, packed documents

run_case() {  # run_case NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  if timeout 300 $MPIRUN -np "$np" "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" \
       --out "$TMP/out.st" "$@" > "$TMP/log" 2>&1; then
    check_against_reference "$name" "$TMP/out.st"
  else
    fail "$name: exit non-zero"; sed 's/^/     /' "$TMP/log" | tail -5
  fi
}

run_case "pure ring 4, zigzag (-np 4 --sp-ring 4 --zigzag)" 4 --sp-ring 4 --zigzag
run_case "pure ring 8 on a 4-head model (-np 8 --sp-ring 8)" 8 --sp-ring 8
run_case "hybrid ulysses 2 x ring 2, zigzag (-np 4 --sp-ring 2 --zigzag)" 4 --sp-ring 2 --zigzag
# ZeRO 2 and 3 (issue #11): the gradients reduce-scattered into shards (and the weights gathered
# from shards) give the same reference; loss-grad writes the gradients gathered whole.
run_case "ZeRO-2 over dp 2 (-np 2 --sp 1 --zero 2)" 2 --sp 1 --zero 2
run_case "ZeRO-3 over dp 2 x sp 2 (-np 4 --sp 2 --zero 3)" 4 --sp 2 --zero 3
run_case "ZeRO-3 with the hybrid, zigzag (-np 4 --sp-ring 2 --zigzag --zero 3)" 4 --sp-ring 2 --zigzag --zero 3
expect_error "loss-grad --zero 2 with rows that do not deal evenly" "2 rows are not a multiple of dp = 3" \
  $MPIRUN -np 3 --oversubscribe "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --sp 1 --zero 2
expect_error "loss-grad --zero 1 has no optimizer to shard" "--zero 1 and --offload-optimizer place the optimizer" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --zero 1

if "$ULYSSES" plan --shape tiny --seq 4096 --sp 8 --sp-ring 4 --zigzag > "$TMP/plan" 2>&1 &&
   grep -q "sp 8 (ring 4, zigzag)" "$TMP/plan"; then pass "plan names the ring"
else fail "plan names the ring"; sed 's/^/     /' "$TMP/plan" | head -5; fi

expect_error "ring degree that does not divide sp" "ring degree 3 does not divide --sp 4" \
  $MPIRUN -np 4 "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --sp-ring 3
if [ "$(grep -o 'ring degree 3 does not divide' "$TMP/stderr" | wc -l)" -ge 4 ]; then
  pass "the message comes from every rank"
else fail "the message comes from every rank"; fi
expect_error "--zigzag without a ring" "--zigzag balances causal work over a ring of ranks; set --sp-ring" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --zigzag
expect_error "zigzag with a sequence not divisible by 2 x ring" "--seq 1000 is not a multiple of 16.*zigzag" \
  "$ULYSSES" plan --shape tiny --seq 1000 --sp 8 --sp-ring 8 --zigzag
expect_error "hybrid whose Ulysses degree the heads cannot take" "degree 8 does not divide num_attention_heads 4" \
  $MPIRUN -np 8 "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --sp-ring 1
finish
