#!/usr/bin/env bash
# torchrun's launch contract without MPI (docs/launching.md "torchrun"): processes started with
# RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT meet over TCP.
# 2 and 4 ranks started from the shell: loss-grad gives the float64 reference's loss and gradients
# (and, on 2 ranks, mpirun's bit for bit); a short train run has mpirun's losses. The failures: a
# rank that never comes (one line per rank that came, naming MASTER_ADDR:MASTER_PORT, the missing
# rank and the seconds waited), a MASTER_PORT that is taken or no port, a rank killed mid-run (the
# other ends at once, non-zero). Under `torchrun --no-python` too where PyTorch is installed.
source "$(dirname "$0")/lib.sh" "$@"
skip_unless_python numpy safetensors
cd "$TMP"
F=$ROOT/fixtures/packed   # 4 query heads, 2 kv heads, packed documents
export OPENBLAS_NUM_THREADS=1

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

# ranks NAME N [RANKS] -- CMD...: starts the ranks of a world of N (all, or those listed) as
# torchrun would, each with its own log NAME.R.log, within 120 s; sets RCS to their exit codes.
ranks() {
  local name=$1 n=$2 list
  shift 2
  if [ "$1" = "--" ]; then list=$(seq 0 $((n - 1))); shift; else list=$1; shift 2; fi
  local port
  port=${PORT:-$(free_port)}
  local pids=() r
  for r in $list; do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 120 "$@" > "$name.$r.log" 2>&1 &
    pids+=($!)
  done
  RCS=""
  for p in "${pids[@]}"; do wait "$p"; RCS="$RCS $?"; done
  RCS=${RCS# }
}

lg="$ULYSSES loss-grad --model $F/model --batch $F/batch.safetensors"
for n in 2 4; do
  ranks lg$n $n -- $lg --out tcp$n.st
  if [ "$RCS" = "$(printf '0 %.0s' $(seq 1 $n) | sed 's/ $//')" ] && [ -s tcp$n.st ]; then
    check_against_reference "loss-grad on $n TCP ranks (sp $n): the float64 reference" tcp$n.st
  else fail "loss-grad on $n TCP ranks: exit codes $RCS"; tail -n 3 lg$n.*.log; fi
done
grep -q "2 ranks = dp 1 × sp 2" lg2.0.log && pass "rank 0 reports 2 ranks" || fail "rank 0 reports 2 ranks"
ranks lgdp 4 -- $lg --out tcpdp.st --sp 2
[ "$RCS" = "0 0 0 0" ] && check_against_reference "loss-grad on 4 TCP ranks as dp 2 × sp 2 (split groups)" tcpdp.st \
  || fail "loss-grad dp 2 x sp 2: exit codes $RCS"
ranks lgring 4 -- $lg --out tcpring.st --sp-ring 2 --zero 3
[ "$RCS" = "0 0 0 0" ] && check_against_reference "loss-grad on 4 TCP ranks, Ulysses 2 × ring 2 (sendrecv), ZeRO-3" tcpring.st \
  || { fail "loss-grad --sp-ring 2 --zero 3: exit codes $RCS"; tail -n 3 lgring.*.log; }
# Two ranks add in one order whatever the transport: the TCP world's output is mpirun's, bit for bit.
if timeout 120 $MPIRUN -np 2 $lg --out mpi2.st > mpi2.log 2>&1; then
  cmp -s <(python3 -c "
import sys
from safetensors.numpy import load_file
t = load_file(sys.argv[1]); print({k: v.tobytes().hex() for k, v in sorted(t.items())})" tcp2.st) \
    <(python3 -c "
import sys
from safetensors.numpy import load_file
t = load_file(sys.argv[1]); print({k: v.tobytes().hex() for k, v in sorted(t.items())})" mpi2.st) \
    && pass "loss-grad on 2 TCP ranks = mpirun -np 2, bit for bit" || fail "loss-grad: TCP and mpirun differ on 2 ranks"
else echo "skip the mpirun comparison: mpirun -np 2 failed"; tail -n 3 mpi2.log; fi

# A short train run on 2 ranks (sp 2, ZeRO-1: reduce-scatter, all-gather, all-reduce all used): mpirun's
# losses and gradient norms, exactly (two ranks add in one order whatever the transport).
"$ULYSSES" prepare --input "$ROOT/docs" --out data --quiet > /dev/null 2>&1
write_tiny_model model.json
common="model_config=model.json data.train=data data.seq_len=64 batch_size=2 steps=4 log_every=1 tensorboard=false sp=2 zero=1"
ranks train 2 -- "$ULYSSES" train $common out_dir=tcp_run
timeout 120 $MPIRUN -np 2 "$ULYSSES" train $common out_dir=mpi_run > mpi_run.log 2>&1
if [ "$RCS" = "0 0" ] && python3 - tcp_run/metrics.jsonl mpi_run/metrics.jsonl <<'PY'
import json, sys
def curve(path):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(path)) if "loss" in r}
a, b = curve(sys.argv[1]), curve(sys.argv[2])
assert sorted(a) == [1, 2, 3, 4] and sorted(b) == [1, 2, 3, 4], (sorted(a), sorted(b))
loss = max(abs(a[s][0] - b[s][0]) / abs(b[s][0]) for s in a)
norm = max(abs(a[s][1] - b[s][1]) / abs(b[s][1]) for s in a)
print(f"     worst relative differences to mpirun: loss {loss:.2e}, gradient norm {norm:.2e}")
assert a == b, (a, b)
PY
then pass "train on 2 TCP ranks (sp 2, zero 1): mpirun's losses and gradient norms, exactly"
else fail "train on 2 TCP ranks: exit codes $RCS"; tail -n 3 train.*.log; fi

# comm-bench over the TCP world: every op and size reported, with positive bandwidths.
ranks cb 2 -- "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 65536 --iters 3
if [ "$RCS" = "0 0" ] && python3 - cb.0.log <<'PY'
import json, sys
rows = [json.loads(l.split("COMM_JSON ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("COMM_JSON ")]
assert {r["op"] for r in rows} == {"all_to_all", "all_gather", "reduce_scatter", "all_reduce", "sendrecv"}, rows
assert len(rows) == 15 and all(r["ranks"] == 2 and r["algbw_gbs"] > 0 for r in rows), rows
PY
then pass "comm-bench on 2 TCP ranks: 5 ops x 3 sizes"; else fail "comm-bench on 2 TCP ranks (exit $RCS)"; tail -n 3 cb.0.log; fi

# A rank killed mid-run: the other fails its next call naming it and exits non-zero at once.
start=$SECONDS
ULYSSES_TEST_KILL_AT_STEP=3 ULYSSES_TEST_KILL_RANK=1 ranks killed 2 -- "$ULYSSES" train $common steps=50 out_dir=killed
took=$((SECONDS - start))
rc0=${RCS%% *}
if [ "$rc0" = 1 ] && [ $took -lt 60 ]; then
  pass "a killed rank ends the other (exit $rc0 after $took s; rank 1: ${RCS##* })"
else fail "a killed rank: rank 0 exit $rc0 after $took s"; fi
one_error_line killed.0.log && grep -q "error: .*lost the connection to rank 1" killed.0.log \
  && pass "rank 0 prints one error line naming rank 1" || { fail "rank 0's error line"; tail -n 3 killed.0.log; }

# A rank that never comes: rank 0 and the ranks that came each print one line and exit non-zero.
PORT=$(free_port)
start=$SECONDS
ULYSSES_RENDEZVOUS_TIMEOUT=3 ranks missing 3 "0 1" -- $lg --out never.st
took=$((SECONDS - start))
ok=1
for r in 0 1; do
  one_error_line missing.$r.log \
    && grep -q -E "error: rendezvous at 127.0.0.1:$PORT \(MASTER_PORT=$PORT\): waited [0-9]+ s for 1 of 3 ranks that never came: rank 2 " missing.$r.log \
    || { ok=0; sed 's/^/     /' missing.$r.log; }
done
[ "$RCS" = "1 1" ] && [ $ok = 1 ] && [ $took -lt 30 ] \
  && pass "a missing rank: one line on each rank that came, naming the address, rank 2 and the seconds waited (exit $RCS after $took s)" \
  || fail "a missing rank (exit $RCS after $took s)"
unset PORT

# MASTER_PORT taken by another program: rank 0 cannot listen and says so; the other rank, which
# reaches that program instead of rank 0, gives up within its timeout.
python3 -c "
import socket, time
s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(8); print(s.getsockname()[1], flush=True); time.sleep(60)" > busy.port &
busy=$!
for _ in $(seq 1 50); do [ -s busy.port ] && break; sleep 0.1; done
PORT=$(cat busy.port) ULYSSES_RENDEZVOUS_TIMEOUT=3 ranks busy 2 -- $lg --out busy.st
kill $busy 2> /dev/null
one_error_line busy.0.log \
  && grep -q "error: rendezvous at 127.0.0.1:$(cat busy.port) (MASTER_PORT=$(cat busy.port)), rank 0: cannot listen on port $(cat busy.port): Address already in use" busy.0.log \
  && [ "$RCS" = "1 1" ] && pass "MASTER_PORT in use: rank 0 says it cannot listen there; both exit 1" \
  || { fail "MASTER_PORT in use (exit $RCS)"; cat busy.0.log busy.1.log | sed 's/^/     /'; }
expect_error "MASTER_PORT that is no port" "MASTER_PORT=http is not a TCP port" \
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=http $lg --out x.st
expect_error "RANK outside the world" "RANK=2 is outside \[0, 2\)" \
  env RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 $lg --out x.st

# torchrun itself, where PyTorch is installed.
if command -v torchrun > /dev/null 2>&1 && python3 -c "import torch" > /dev/null 2>&1; then
  for n in 2 4; do
    if timeout 120 torchrun --standalone --nproc-per-node $n --no-python $lg --out torchrun$n.st > torchrun$n.log 2>&1; then
      check_against_reference "torchrun --no-python --nproc-per-node $n: the float64 reference" torchrun$n.st
    else fail "torchrun --nproc-per-node $n"; tail -n 5 torchrun$n.log; fi
  done
else
  echo "skip torchrun --no-python: torchrun or PyTorch is not installed (the same environment was set by hand above)"
fi
finish
