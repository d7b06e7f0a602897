#!/usr/bin/env bash
# Several ranks: a rank killed mid-run ends the job on every rank with a clear
# message, never a hang; `comm-bench` measures the step's collectives on MPI
# ranks and refuses bad options with one clear line.
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
if pgrep -f "out_dir=run sp=2" > /dev/null; then fail "no rank left running"; pkill -9 -f "out_dir=run sp=2"
else pass "no rank left running"; fi

# comm-bench on 2 MPI ranks (host buffers): every op and size reported with positive bandwidths.
timeout 120 $MPIRUN -np 2 "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 65536 --iters 3 > comm.log 2>&1 \
  || { fail "comm-bench on 2 ranks"; tail -5 comm.log; }
if python3 - comm.log <<'PY'
import json, sys
rows = [json.loads(l.split("COMM_JSON ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("COMM_JSON ")]
ops = {r["op"] for r in rows}
assert ops == {"all_to_all", "all_gather", "reduce_scatter", "all_reduce"}, ops
assert len(rows) == 4 * 3, len(rows)  # 4 KiB, 16 KiB, 64 KiB
for r in rows:
    assert r["ranks"] == 2 and r["time_us"] > 0 and r["algbw_gbs"] > 0, r
    factor = 2 * (2 - 1) / 2 if r["op"] == "all_reduce" else (2 - 1) / 2
    assert abs(r["busbw_gbs"] - r["algbw_gbs"] * factor) <= 1e-4 * r["algbw_gbs"], r
PY
then pass "comm-bench: 4 ops x 3 sizes, bus bandwidth = algbw x nccl-tests' factor"; else fail "comm-bench output"; fi

expect_error "comm-bench: unknown op" "unknown --ops entry 'allreduce'.*all_reduce" "$ULYSSES" comm-bench --ops allreduce
expect_error "comm-bench: min above max" "--min-bytes 4096 is above --max-bytes 1024" \
  "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 1024
expect_error "comm-bench: nccl on cpu" "nccl.*needs the cuda backend" "$ULYSSES" comm-bench --comm nccl
finish
