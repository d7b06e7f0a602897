#!/usr/bin/env bash
# The step-time model's shared-GPU mode against this GPU (issue 32 without several GPUs,
# docs/step-time-model.md): records one rank's per-family rates of the 8B shape with 4 layers at
# 16K and 32K (a mesh's ranks hold 16K or 8K tokens each; the rates but attention's are taken at
# the nearest tokens per rank) and the host-staged bus bandwidths of 2 MPI ranks on this GPU
# (comm-bench --comm mpi), then for each mesh runs `mpirun -np P ulysses bench --comm mpi` with
# all P ranks on this one GPU and `plan --time --ranks-share-gpu` of the same step, and prints
#   PREDICT name predicted_s measured_s ratio
# (ratio = predicted / measured; the case checks it within 10%) and the prediction's TIME_JSON.
#   bash bench/device/time_model_shared_gpu.sh BUILD [RATES]
# The environment can point it elsewhere (tests/cli/step_time_test.sh runs it on the cpu backend):
# SHARED_GPU_BACKEND, SHARED_GPU_SHAPE, SHARED_GPU_SEQ, SHARED_GPU_RATE_SEQS, SHARED_GPU_MPIRUN,
# SHARED_GPU_MIN_BYTES, SHARED_GPU_MAX_BYTES.
set -uo pipefail
B=${1:-.carry/build}
W=${OUT:-/tmp}
R=${2:-$W/rates_shared_gpu.json}
rm -f "$R"
BACKEND=${SHARED_GPU_BACKEND:-"--backend cuda"}
SHAPE=${SHARED_GPU_SHAPE:-"--shape llama-3.1-8b --layers 4"}
SEQ=${SHARED_GPU_SEQ:-32768}
RATE_SEQS=${SHARED_GPU_RATE_SEQS:-"16384 32768"}
# keep-attention fixed (auto decides on each rank's view of the memory, which sharing changes)
STEP="--no-optimizer --checkpoint --keep-attention=off --tiled-loss --tiled-mlp"
MPI=${SHARED_GPU_MPIRUN:-"mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"}
MIN_BYTES=${SHARED_GPU_MIN_BYTES:-1048576}
MAX_BYTES=${SHARED_GPU_MAX_BYTES:-268435456}

for S in $RATE_SEQS; do
  timeout 150 "$B/ulysses" bench $BACKEND $SHAPE --seq "$S" $STEP --warmup 1 --steps 2 --profile --rates-out "$R" \
    > "$W/shared_rates_$S.log" 2>&1 \
    || { echo "time_model_shared_gpu: rates at $S failed:"; tail -3 "$W/shared_rates_$S.log"; exit 1; }
  echo "time_model_shared_gpu: one rank's rates at $S recorded"
done
# fp32: a bf16 reduction goes over the wire as a float32 copy (parallel/collectives.cpp), which
# the planner counts (its bytes are the communicator's), so its figure must be per wire byte.
# Per group size (2 and 4 ranks): MPI's host-side reductions run on every rank's core at once, so
# 4 ranks' bus bandwidth is not 2 ranks' scaled (measured: 0.89 GB/s all-reduce on 2 ranks; the
# hybrid's 4-rank all-reduce ran faster than that scaled to 4 ranks).
for NP in 2 4; do
  timeout 120 $MPI -np $NP "$B/ulysses" comm-bench $BACKEND --comm mpi --dtype fp32 --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" --rates-out "$R" \
    > "$W/shared_comm_$NP.log" 2>&1 \
    || { echo "time_model_shared_gpu: comm-bench on $NP ranks failed:"; tail -3 "$W/shared_comm_$NP.log"; exit 1; }
  grep '^rates:' "$W/shared_comm_$NP.log"
done

status=0
mesh() {  # name, ranks, mesh flags
  local name=$1 np=$2
  shift 2
  local log="$W/shared_$name.log"
  local measured predicted line
  timeout 180 $MPI -np "$np" "$B/ulysses" bench $BACKEND --comm mpi $SHAPE --seq "$SEQ" $STEP "$@" --sp "$np" --warmup 1 --steps 2 \
    > "$log" 2>&1 || { echo "time_model_shared_gpu: $name bench failed:"; tail -3 "$log"; status=1; return; }
  measured=$(grep '^BENCH_JSON ' "$log" | head -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read()[11:])["step_time_s"])')
  line=$(timeout 60 "$B/ulysses" plan $BACKEND $SHAPE --seq "$SEQ" $STEP "$@" --sp "$np" --time "$R" --ranks-share-gpu \
    2> "$log.plan.err" | tee "$log.plan" | grep '^TIME_JSON ' | head -1)
  [ -n "$line" ] && [ -n "$measured" ] \
    || { echo "time_model_shared_gpu: no prediction or measurement for $name"; tail -3 "$log.plan.err"; status=1; return; }
  predicted=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1][10:])["step_s"])' "$line")
  echo "PREDICT $name $predicted $measured $(python3 -c "print($predicted / $measured)")"
  echo "$line"
}
mesh ulysses_sp2 2
mesh ring_sp2 2 --sp-ring 2 --zigzag
mesh hybrid_2x2 4 --sp-ring 2 --zigzag
cp "$R" "$W/" 2> /dev/null || true
exit $status
