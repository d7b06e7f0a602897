#!/usr/bin/env bash
# ulysses prepare + train end to end on CPU: sp = 2 gives sp = 1's loss curve,
# a SIGKILLed run resumes bit for bit, a checkpoint interrupted mid-write never
# replaces the last good one, and bad input fails with one clear line.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

"$ULYSSES" prepare --input "$ROOT/docs,$ROOT/README.md" --out data --val-fraction 0.2 --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
write_tiny_model model.json
cat > train.yaml <<'YAML'
model_config: model.json
data:
  train: data
  seq_len: 64
batch_size: 2
steps: 20
optimizer:
  lr: 1.0e-3
  warmup_steps: 3
log_every: 5
YAML

losses() { python3 -c "
import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if 'loss' in j: print(j['step'], repr(j['loss']))" "$1"; }

"$ULYSSES" train train.yaml out_dir=sp1 > sp1.log 2>&1 || { fail "train sp=1"; cat sp1.log; }
$MPIRUN -np 2 "$ULYSSES" train train.yaml out_dir=sp2 sp=2 > sp2.log 2>&1 || { fail "train sp=2"; tail sp2.log; }
if python3 - sp1/metrics.jsonl sp2/metrics.jsonl <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if "loss" in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if "loss" in l]
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"     sp=2 vs sp=1 over 20 steps: worst relative difference {worst:.2e}; loss {a[0]:.4f} -> {a[-1]:.4f}")
assert worst <= 1e-5, worst
assert a[-1] < a[0] - 0.5, "the loss did not fall"
PY
then pass "sp=2 loss curve equals sp=1 (<= 1e-5 per step) and falls"; else fail "sp=2 loss curve equals sp=1"; fi
# Ring attention with zigzag sharding (the loader reads each rank's two chunks): the same curve.
$MPIRUN -np 2 "$ULYSSES" train train.yaml out_dir=ring2 sp=2 sp_ring=2 zigzag=true > ring2.log 2>&1 \
  || { fail "train sp_ring=2 zigzag"; tail ring2.log; }
if python3 - sp1/metrics.jsonl ring2/metrics.jsonl <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if "loss" in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if "loss" in l]
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
assert worst <= 1e-5, worst
PY
then pass "sp_ring=2 zigzag loss curve equals sp=1 (20 steps)"; else fail "sp_ring=2 zigzag loss curve equals sp=1"; fi
[ -f sp1/checkpoints/step-0000020/model/model.safetensors ] && [ -f sp1/checkpoints/step-0000020/COMPLETE ] \
  && pass "final checkpoint written" || fail "final checkpoint written"

# Uninterrupted reference, then a run killed (SIGKILL) at step 7 and resumed from step 5.
"$ULYSSES" train train.yaml out_dir=full checkpoint_every=5 steps=12 > full.log 2>&1
ULYSSES_TEST_KILL_AT_STEP=7 "$ULYSSES" train train.yaml out_dir=killed checkpoint_every=5 steps=12 > killed.log 2>&1
rc=$?
[ $rc -eq 137 ] && pass "SIGKILL mid-run (exit $rc)" || fail "SIGKILL mid-run (exit $rc)"
grep -q step-0000005 killed/checkpoints/latest && pass "latest checkpoint is step 5" || fail "latest checkpoint is step 5"
"$ULYSSES" train train.yaml out_dir=killed checkpoint_every=5 steps=12 resume=true > resumed.log 2>&1 \
  || { fail "resume"; tail resumed.log; }
if diff <(losses full/metrics.jsonl) <(losses killed/metrics.jsonl) > diff.txt; then
  pass "resumed run equals the uninterrupted one bit for bit (12 steps)"
else fail "resumed losses differ:"; head diff.txt; fi

# Killed while writing the step-10 checkpoint: step 5 stays the latest good one.
ULYSSES_TEST_KILL_DURING_SAVE=10 "$ULYSSES" train train.yaml out_dir=midsave checkpoint_every=5 steps=12 \
  > midsave.log 2>&1
grep -q step-0000005 midsave/checkpoints/latest && [ ! -e midsave/checkpoints/step-0000010 ] \
  && pass "a checkpoint being written when the process dies does not replace the last good one" \
  || fail "interrupted checkpoint replaced the last good one"
"$ULYSSES" train train.yaml out_dir=midsave checkpoint_every=5 steps=12 resume=true > midsave2.log 2>&1
diff <(losses full/metrics.jsonl) <(losses midsave/metrics.jsonl) > /dev/null \
  && pass "resume after an interrupted save equals the uninterrupted run" || fail "resume after an interrupted save"

# A full disk while saving: the save fails with a clear error, the last checkpoint survives.
( trap '' XFSZ; ulimit -f 200; "$ULYSSES" train train.yaml out_dir=full checkpoint_every=5 steps=14 resume=true \
    > disk.log 2>&1 ); rc=$?
if [ $rc -ne 0 ] && grep -q "saving checkpoint.*failed.*untouched" disk.log && grep -q step-0000012 full/checkpoints/latest \
   && [ -f full/checkpoints/step-0000012/COMPLETE ]; then pass "disk full while saving: clear error, last checkpoint kept"
else fail "disk full while saving (exit $rc)"; tail -3 disk.log; fi

# SIGTERM (as a scheduler sends before killing a job): checkpoint at the step boundary, exit 130, resumable.
"$ULYSSES" train train.yaml out_dir=term steps=100000 log_every=1000 > term.log 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s term/metrics.jsonl ] && break; sleep 0.1; done
# Meanwhile a second run on the same folder is refused, naming the holder.
expect_error "a second run on a folder in use" "out_dir term is in use by another run \(pid $pid on " \
  "$ULYSSES" train train.yaml out_dir=term resume=true steps=3
kill -TERM $pid
wait $pid
rc=$?
last=$(python3 -c "import json; print(max(json.loads(l)['step'] for l in open('term/metrics.jsonl') if 'loss' in l))")
if [ $rc -eq 130 ] && [ -f "term/checkpoints/$(cat term/checkpoints/latest 2>/dev/null)/COMPLETE" ] &&
   grep -q "step-$(printf %07d "$last")" term/checkpoints/latest; then
  pass "SIGTERM: checkpoint at step $last, exit 130"
else fail "SIGTERM handling (exit $rc)"; tail -3 term.log; fi

# Bad input.
mkdir -p empty
expect_error "empty corpus" "(empty|no document|no text|no files)" "$ULYSSES" prepare --input empty --out d2
expect_error "missing tokenizer" "missing-tokenizer.json" \
  "$ULYSSES" prepare --input "$ROOT/README.md" --out d3 --tokenizer missing-tokenizer.json
printf 'steps: [1, 2\nmodel: x\n' > bad.yaml
expect_error "invalid YAML" "bad.yaml: invalid YAML at line" "$ULYSSES" train bad.yaml
expect_error "unknown key suggests the nearest" "unknown key 'optimizer.learning_rate' \(did you mean 'optimizer.lr'" \
  "$ULYSSES" train train.yaml optimizer.learning_rate=1
expect_error "unknown top-level key" "unknown key 'stepz' \(did you mean 'steps'" "$ULYSSES" train train.yaml stepz=3
expect_error "seq_len not divisible by the sp degree" "seq_len 63 is not divisible by the sequence-parallel degree 2" \
  $MPIRUN -np 2 "$ULYSSES" train train.yaml data.seq_len=63 sp=2 out_dir=bad
expect_error "a NaN learning rate" "key 'optimizer.lr' expects a number, got \"nan\"" \
  "$ULYSSES" train train.yaml optimizer.lr=nan out_dir=bad
"$ULYSSES" train train.yaml out_dir=nan steps=1 > nandir.log 2>&1 && [ -f nan/metrics.jsonl ] \
  && pass "out_dir=nan is a folder called nan" || { fail "out_dir=nan is a folder called nan"; tail -2 nandir.log; }
expect_error "zigzag with a length the chunks do not divide" "data.seq_len 66 is not a multiple of 4.*zigzag" \
  $MPIRUN -np 2 "$ULYSSES" train train.yaml data.seq_len=66 sp=2 sp_ring=2 zigzag=true out_dir=bad
expect_error "unknown dtype" "'dtype' takes auto, bf16 or fp32, got 'fp8'" "$ULYSSES" train train.yaml dtype=fp8 out_dir=bad
expect_error "nccl on the cpu backend" "comm nccl.*needs the cuda backend" "$ULYSSES" train train.yaml comm=nccl out_dir=bad
# A fresh run into a finished run's folder is refused unless told to overwrite.
expect_error "a fresh run over another run's results" "out_dir sp1 already holds a run \(metrics.jsonl, checkpoints/\); continue it with resume=true, start over in it with overwrite=true" \
  "$ULYSSES" train train.yaml out_dir=sp1 steps=2
"$ULYSSES" train train.yaml out_dir=sp1 steps=2 overwrite=true > over.log 2>&1 \
  && [ "$(grep -c '"loss"' sp1/metrics.jsonl)" -eq 2 ] && pass "overwrite=true starts over in the folder" \
  || { fail "overwrite=true starts over in the folder"; tail -3 over.log; }

# A non-finite gradient (fault injection at step 7): the run stops with the step, the
# gradient and the last good checkpoint named, and writes no checkpoint past it; with
# skip_nonfinite: 1 the step is skipped (no update) and the run goes on to the end.
ULYSSES_TEST_NONFINITE_AT_STEP=7 "$ULYSSES" train train.yaml out_dir=diverged checkpoint_every=5 steps=12 > nan.log 2>&1
rc=$?
if [ $rc -ne 0 ] && one_error_line nan.log && grep -q "error: step 7: the gradient norm is NaN (non-finite gradients: model.embed_tokens.weight).*last good checkpoint is .*step-0000005" nan.log \
   && grep -q step-0000005 diverged/checkpoints/latest && [ ! -e diverged/checkpoints/step-0000010 ]; then
  pass "non-finite gradients stop the run, naming the step, the tensor and the last good checkpoint"
else fail "non-finite gradients stop the run (exit $rc)"; tail -3 nan.log; fi
ULYSSES_TEST_NONFINITE_AT_STEP=7 "$ULYSSES" train train.yaml out_dir=skip skip_nonfinite=1 steps=12 > skip.log 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "step 7: the gradient norm is NaN.*the update is skipped (1 of skip_nonfinite 1)" skip.log \
   && python3 - skip/metrics.jsonl <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == 12, len(rows)
assert rows[6].get("skipped_nonfinite") is True and rows[6]["grad_norm"] is None, rows[6]
assert all(math.isfinite(r["loss"]) for r in rows), "a loss after the skipped step is not finite"
assert not any(r.get("skipped_nonfinite") for r in rows[:6] + rows[7:])
PY
then pass "skip_nonfinite: 1 skips the step and finishes with finite losses"
else fail "skip_nonfinite: 1 (exit $rc)"; tail -3 skip.log; fi

finish
