#!/usr/bin/env bash
# TensorBoard event files beside metrics.jsonl: read back with the `tensorboard`
# package's EventAccumulator (which checks every record's CRC32C), the scalars equal
# metrics.jsonl's, a resumed run's rewritten steps supersede the killed run's, and
# tensorboard=false writes none. Skipped (exit 77) without the tensorboard package.
source "$(dirname "$0")/lib.sh" "$@"
skip_unless_python tensorboard
cd "$TMP"

"$ULYSSES" prepare --input "$ROOT/docs" --out data --val-fraction 0.2 --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
write_tiny_model model.json
cat > train.yaml <<'YAML'
model_config: model.json
data:
  train: data
  seq_len: 32
batch_size: 1
steps: 8
eval_every: 3
eval_batches: 1
checkpoint_every: 2
log_every: 4
YAML

"$ULYSSES" train train.yaml out_dir=run > run.log 2>&1 || { fail "train"; tail run.log; }
# Killed at step 5 (after the step-4 checkpoint), resumed: steps 5.. are written twice.
ULYSSES_TEST_KILL_AT_STEP=5 "$ULYSSES" train train.yaml out_dir=resumed > killed.log 2>&1
"$ULYSSES" train train.yaml out_dir=resumed resume=true > resumed.log 2>&1 || { fail "resume"; tail resumed.log; }
"$ULYSSES" train train.yaml out_dir=off tensorboard=false steps=2 > off.log 2>&1 || { fail "tensorboard=false"; tail off.log; }

if python3 - <<'PY'
import glob, json, math, struct
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

def check(run, files_expected):
    files = glob.glob(f"{run}/events.out.tfevents.*")
    assert len(files) == files_expected, (run, files)
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want_tags = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/tflops", "eval/loss"}
    assert want_tags <= tags, tags
    metrics = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    for tag, key in [("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"),
                     ("train/tokens_per_s", "tokens_per_s"), ("eval/loss", "eval_loss")]:
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = [(m["step"], m[key]) for m in metrics if key in m]
        assert [s for s, _ in got] == [s for s, _ in want], (run, tag, got, want)
        for (_, a), (_, b) in zip(got, want):
            assert a == struct.unpack("f", struct.pack("f", b))[0], (run, tag, a, b)  # float32 of the same value
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == list(range(1, 9)), steps
    assert [e.step for e in acc.Scalars("eval/loss")] == [3, 6, 8]
    print(f"     {run}: {len(files)} event file(s), {len(tags)} scalar tags, train/loss steps {steps[0]}..{steps[-1]}, "
          f"eval/loss at 3, 6, 8, all equal to metrics.jsonl (as float32)")

check("run", 1)
check("resumed", 2)
assert not glob.glob("off/events.out.tfevents.*"), "tensorboard=false wrote event files"
PY
then pass "event files read back by tensorboard equal metrics.jsonl (fresh and resumed runs; none when off)"
else fail "event files read back by tensorboard"; fi

# overwrite=true starts the folder's TensorBoard afresh.
"$ULYSSES" train train.yaml out_dir=run overwrite=true steps=2 eval_every=0 > over.log 2>&1 || { fail "overwrite"; tail over.log; }
n=$(ls run/events.out.tfevents.* | wc -l)
[ "$n" -eq 1 ] && pass "overwrite=true leaves only the new run's event file" || fail "overwrite=true: $n event files"
finish
