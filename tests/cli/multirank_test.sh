#!/usr/bin/env bash
# Several ranks: a rank killed mid-run ends the job on every rank with a clear
# message, never a hang; ZeRO stage 1 trains exactly as the unsharded optimizer; bfloat16
# gradient buffers train as float32 ones within their rounding;
# `comm-bench` measures the step's collectives on MPI ranks and refuses bad
# options with one clear line.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

"$ULYSSES" prepare --input "$ROOT/docs" --out data --val-fraction 0.2 --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
write_tiny_model model.json
cat > train.yaml <<'YAML'
model_config: model.json
data:
  train: data
  seq_len: 64
batch_size: 2
steps: 50
log_every: 1
YAML

# close_curves A B LOSS_TOL NORM_TOL: run B logged steps 1-4, and each step's loss and gradient
# norm is run A's within the given relative differences (printed).
close_curves() {
  python3 - "$@" <<'PY'
import json, sys
def curve(path):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(path)) if "loss" in r}
a, b = curve(sys.argv[1]), curve(sys.argv[2])
assert sorted(b) == [1, 2, 3, 4], sorted(b)
loss = max(abs(a[s][0] - b[s][0]) / abs(a[s][0]) for s in b)
norm = max(abs(a[s][1] - b[s][1]) / abs(a[s][1]) for s in b)
assert loss <= float(sys.argv[3]) and norm <= float(sys.argv[4]), (loss, norm)
print(f"     worst relative differences: loss {loss:.2e}, gradient norm {norm:.2e}")
PY
}

# resumed_losses_match A B...: runs B... (killed after step 3, resumed from step 2's checkpoint)
# have A's losses at steps 3 and 4 within 1e-5 relative.
resumed_losses_match() {
  python3 - "$@" <<'PY'
import json, sys
def curve(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
a = curve(sys.argv[1])
worst = 0.0
for path in sys.argv[2:]:
    b = curve(path)
    assert sorted(b) == [1, 2, 3, 4], (path, sorted(b))
    for step in (3, 4):
        worst = max(worst, abs(a[step] - b[step]) / abs(a[step]))
        assert abs(a[step] - b[step]) <= 1e-5 * abs(a[step]), (path, step, a[step], b[step])
print(f"     steps 3-4: worst relative loss difference {worst:.2e}")
PY
}

# Rank 1 of 2 SIGKILLs itself after step 3; rank 0 goes on into the next step's
# collectives. The job must end (mpirun ends rank 0) well within the limit, non-zero.
start=$SECONDS
ULYSSES_TEST_KILL_AT_STEP=3 ULYSSES_TEST_KILL_RANK=1 timeout 120 \
  $MPIRUN -np 2 -x ULYSSES_TEST_KILL_AT_STEP -x ULYSSES_TEST_KILL_RANK "$ULYSSES" train train.yaml out_dir=run sp=2 \
  > killed.log 2>&1
rc=$?
took=$((SECONDS - start))
if [ $rc -eq 124 ]; then fail "a killed rank: the job hung (killed after 120 s)"
elif [ $rc -eq 0 ]; then fail "a killed rank: the job exited 0"
else pass "a killed rank ends the job on every rank (exit $rc after ${took} s)"; fi
grep -q -i -E "rank 1.*(signal 9|killed)|signal 9 \(Killed\)" killed.log \
  && pass "the message names the killed rank and the signal" \
  || { fail "the message names the killed rank and the signal"; tail -12 killed.log | sed 's/^/     /'; }
# (this test's binary only: the machine may run other checkouts' tests)
if pgrep -f "$ULYSSES train train.yaml out_dir=run sp=2" > /dev/null; then fail "no rank left running"
  pkill -9 -f "$ULYSSES train train.yaml out_dir=run sp=2"
else pass "no rank left running"; fi

# ZeRO stage 1 on 3 data-parallel ranks (the AdamW state in thirds, blocks of unequal size):
# the same losses, gradient norms and checkpoint, byte for byte, as every rank holding all of it;
# stages 2 (the gradients in thirds too) and 3 (the weights too) within float32 rounding.
for z in 0 1 2 3; do
  timeout 300 $MPIRUN -np 3 --oversubscribe "$ULYSSES" train train.yaml out_dir=zero$z sp=1 batch_size=3 steps=4 \
    checkpoint_every=4 tensorboard=false zero=$z > zero$z.log 2>&1 || { fail "train zero=$z on 3 ranks"; tail -5 zero$z.log; }
done
if python3 - zero0/metrics.jsonl zero1/metrics.jsonl <<'PY'
import json, sys
def curve(path):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(path)) if "loss" in r]
a, b = curve(sys.argv[1]), curve(sys.argv[2])
assert len(a) == 4 and a == b, (a, b)
PY
then pass "zero=1 on 3 ranks: the same 4 losses and gradient norms as zero=0"; else fail "zero=1 losses differ from zero=0"; fi
# ZeRO stage 2: the gradients reduce-scattered layer by layer into each rank's third; the sums
# run in another order than the all-reduce's, so the losses agree to float32 rounding.
if close_curves zero0/metrics.jsonl zero2/metrics.jsonl 1e-6 1e-5
then pass "zero=2 on 3 ranks: the losses and gradient norms of zero=0"; else fail "zero=2 losses differ from zero=0"; fi
# ZeRO stage 3: each layer's weights gathered from the three ranks' thirds before use.
if close_curves zero0/metrics.jsonl zero3/metrics.jsonl 1e-6 1e-5
then pass "zero=3 on 3 ranks: the losses and gradient norms of zero=0"; else fail "zero=3 losses differ from zero=0"; fi
# Its checkpoint holds whole tensors: it resumes on 1 rank (zero 0) with zero=0's following losses.
ULYSSES_TEST_KILL_AT_STEP=3 timeout 300 $MPIRUN -np 3 --oversubscribe -x ULYSSES_TEST_KILL_AT_STEP "$ULYSSES" train \
  train.yaml out_dir=zero3_cut sp=1 batch_size=3 steps=4 checkpoint_every=2 tensorboard=false zero=3 > zero3_cut.log 2>&1
timeout 300 "$ULYSSES" train train.yaml out_dir=zero3_cut sp=1 batch_size=3 steps=4 checkpoint_every=2 \
  tensorboard=false resume=true reshard=true > zero3_resume.log 2>&1 || { fail "zero=3: resume on 1 rank"; tail -5 zero3_resume.log; }
if close_curves zero0/metrics.jsonl zero3_cut/metrics.jsonl 1e-5 1e-4
then pass "zero=3: a checkpoint written on 3 ranks resumes on 1 with zero=0's losses"; else fail "zero=3: the resumed losses differ"; fi
for z in 2 3; do
  $MPIRUN -np 2 "$ULYSSES" bench --shape tiny --seq 256 --steps 1 --warmup 0 --sp 1 --batch 2 --zero $z \
    --offload-optimizer > bench_zero$z.log 2>&1 && grep -q "\"zero\":$z" bench_zero$z.log \
    && pass "bench --zero $z --offload-optimizer on 2 ranks" || { fail "bench --zero $z"; tail -3 bench_zero$z.log; }
done
expect_error "bench --zero 2 with fewer rows than dp" "--batch 1 is not a multiple of dp = 2" \
  $MPIRUN -np 2 "$ULYSSES" bench --shape tiny --seq 256 --steps 1 --warmup 0 --sp 1 --zero 2
# The sharded state is written by each rank (optimizer/rank-R-of-3): put together, the blocks are
# zero=0's whole state bit for bit; the model folder (gathered masters) is byte-identical.
if cmp -s zero0/checkpoints/step-0000004/model/model.safetensors zero1/checkpoints/step-0000004/model/model.safetensors \
   && [ ! -e zero1/checkpoints/step-0000004/optimizer.safetensors ] && python3 - zero0/checkpoints/step-0000004 zero1/checkpoints/step-0000004 <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
whole = load_file(sys.argv[1] + "/optimizer.safetensors")
shards = [load_file(f"{sys.argv[2]}/optimizer/rank-{r:05d}-of-00003.safetensors") for r in range(3)]
assert sorted(whole) == sorted(shards[0]), "names differ"
for name, t in whole.items():
    joined = np.concatenate([s[name] for s in shards])
    assert joined.shape == (t.size,) and np.array_equal(joined.view(np.uint32), t.reshape(-1).view(np.uint32)), name
PY
then pass "zero=1: the ranks' optimizer shards are zero=0's state bit for bit, the model byte-identical"
else fail "zero=1: the checkpoint differs from zero=0's"; ls zero1/checkpoints/step-0000004 zero1/checkpoints/step-0000004/model; fi
# Resharding: run B is killed after step 3 (checkpoint at 2) on 2 ranks (dp 2); it resumes on
# 4 ranks (dp 2 x sp 2, ZeRO-1 over 4) and, from another copy, on 1 rank: steps 3 and 4 match the
# uninterrupted run A within float32's order-of-sums differences. Without reshard=true: refused.
common="train.yaml sp=1 batch_size=2 steps=4 checkpoint_every=2 tensorboard=false"
timeout 300 $MPIRUN -np 2 "$ULYSSES" train $common out_dir=reshard_a > reshard_a.log 2>&1 \
  || { fail "reshard: the uninterrupted run"; tail -5 reshard_a.log; }
ULYSSES_TEST_KILL_AT_STEP=3 timeout 300 $MPIRUN -np 2 -x ULYSSES_TEST_KILL_AT_STEP "$ULYSSES" train $common \
  out_dir=reshard_b > reshard_b.log 2>&1
cp -r reshard_b reshard_c
expect_error "resume on another mesh needs reshard=true" "add reshard=true" \
  $MPIRUN -np 4 --oversubscribe "$ULYSSES" train $common out_dir=reshard_b sp=2 resume=true
timeout 300 $MPIRUN -np 4 --oversubscribe "$ULYSSES" train $common out_dir=reshard_b sp=2 zero=1 resume=true \
  reshard=true > reshard_b2.log 2>&1 || { fail "reshard: resume on 4 ranks"; tail -5 reshard_b2.log; }
timeout 300 "$ULYSSES" train $common out_dir=reshard_c resume=true reshard=true > reshard_c2.log 2>&1 \
  || { fail "reshard: resume on 1 rank"; tail -5 reshard_c2.log; }
if resumed_losses_match reshard_a/metrics.jsonl reshard_b/metrics.jsonl reshard_c/metrics.jsonl
then pass "reshard: resumed on 4 ranks and on 1 rank, steps 3-4 match the uninterrupted run"
else fail "reshard: the resumed losses differ"; fi
# ZeRO-3 on 4 ranks (dp 2 x sp 2) writes its state in 4 shards; killed after step 3, it resumes
# on 2 ranks (sp 2, zero=3: each new rank reads the two old files its half spans) and on 1 rank:
# steps 3 and 4 match the uninterrupted run A.
ULYSSES_TEST_KILL_AT_STEP=3 timeout 300 $MPIRUN -np 4 --oversubscribe -x ULYSSES_TEST_KILL_AT_STEP "$ULYSSES" train \
  $common out_dir=reshard_d sp=2 zero=3 > reshard_d.log 2>&1
[ -e reshard_d/checkpoints/step-0000002/optimizer/rank-00003-of-00004.safetensors ] \
  && pass "zero=3 on 4 ranks: each rank wrote its optimizer shard" || { fail "zero=3: no shard files"; tail -3 reshard_d.log; }
cp -r reshard_d reshard_e
timeout 300 $MPIRUN -np 2 "$ULYSSES" train $common out_dir=reshard_d sp=2 zero=3 resume=true reshard=true \
  > reshard_d2.log 2>&1 || { fail "reshard: zero=3 resume on 2 ranks"; tail -5 reshard_d2.log; }
timeout 300 "$ULYSSES" train $common out_dir=reshard_e resume=true reshard=true > reshard_e2.log 2>&1 \
  || { fail "reshard: zero=3 resume on 1 rank"; tail -5 reshard_e2.log; }
if resumed_losses_match reshard_a/metrics.jsonl reshard_d/metrics.jsonl reshard_e/metrics.jsonl
then pass "reshard: a zero=3 checkpoint of 4 ranks resumed on 2 and on 1, steps 3-4 match run A"
else fail "reshard: the zero=3 resumed losses differ"; fi
grep -q "not bit for bit" reshard_c2.log && pass "reshard: the resume says it is not bit for bit" \
  || fail "reshard: no warning"

# bfloat16 gradient buffers on 2 ranks as sp 2 (each layer's gradients summed over the Ulysses
# ranks in float32, one layer in flight) with ZeRO-1 over both: the 4 losses of run A (float32
# buffers, dp 2) within 1e-4 and their gradient norms within bfloat16's rounding (2^-8).
timeout 300 $MPIRUN -np 2 "$ULYSSES" train $common out_dir=bf16_grads sp=2 zero=1 grad_dtype=bfloat16 \
  > bf16_grads.log 2>&1 || { fail "train grad_dtype=bfloat16 on 2 ranks"; tail -5 bf16_grads.log; }
if close_curves reshard_a/metrics.jsonl bf16_grads/metrics.jsonl 1e-4 0.00390625
then pass "grad_dtype=bfloat16 on 2 ranks (sp 2, zero 1): the float32 buffers' losses and gradient norms"
else fail "grad_dtype=bfloat16 losses"; fi
expect_error "train: an unknown grad_dtype" "'grad_dtype' takes float32 or bfloat16, got 'float16'" \
  "$ULYSSES" train train.yaml grad_dtype=float16

expect_error "train: zero=4 is refused" "'zero'.*\[0, 3\]" "$ULYSSES" train train.yaml zero=4

# comm-bench on 2 MPI ranks (host buffers): every op and size reported with positive bandwidths.
timeout 120 $MPIRUN -np 2 "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 65536 --iters 3 > comm.log 2>&1 \
  || { fail "comm-bench on 2 ranks"; tail -5 comm.log; }
if python3 - comm.log <<'PY'
import json, sys
rows = [json.loads(l.split("COMM_JSON ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("COMM_JSON ")]
ops = {r["op"] for r in rows}
assert ops == {"all_to_all", "all_gather", "reduce_scatter", "all_reduce", "sendrecv"}, ops
assert len(rows) == 5 * 3, len(rows)  # 4 KiB, 16 KiB, 64 KiB
for r in rows:
    assert r["ranks"] == 2 and r["time_us"] > 0 and r["algbw_gbs"] > 0, r
    factor = {"all_reduce": 2 * (2 - 1) / 2, "sendrecv": 1}.get(r["op"], (2 - 1) / 2)
    assert abs(r["busbw_gbs"] - r["algbw_gbs"] * factor) <= 1e-4 * r["algbw_gbs"], r
PY
then pass "comm-bench: 5 ops x 3 sizes, bus bandwidth = algbw x nccl-tests' factor"; else fail "comm-bench output"; fi

expect_error "comm-bench: unknown op" "unknown --ops entry 'allreduce'.*all_reduce" "$ULYSSES" comm-bench --ops allreduce
expect_error "comm-bench: min above max" "--min-bytes 4096 is above --max-bytes 1024" \
  "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 1024
expect_error "comm-bench: nccl on cpu" "nccl.*needs the cuda backend" "$ULYSSES" comm-bench --comm nccl
finish
