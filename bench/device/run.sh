#!/usr/bin/env bash
# Everything the GPU machine checks and measures, in one call:
#   bench/device/run.sh [BUILD_DIR] [MODE]
# MODE: full (default: CUDA tests, fixtures, attention bench, 8B vs transformers, 1B with AdamW),
# quick (tests and fixtures only), verify (tests, fixtures in fp32 and bf16, memory arena A/B,
# offload), compare (8B vs transformers, plan vs measured over three steps), multigpu (NCCL across
# the GPUs of one host), plan, long, train.
# BUILD_DIR holds binaries built on the development machine (carried over);
# results and logs go under $OUT. Prints a summary last.
set -u
summary=()
B=${1:-build-gpu}
MODE=${2:-full}
# Logs go to a scratch folder and come back as one archive (the device tool
# returns at most 8 files).
FINAL_OUT=${OUT:-/tmp/out}
OUT=/tmp/ulysses_results
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
trap 'tar -C "$OUT" -czf "$FINAL_OUT/results.tgz" . ; printf "%s\n" "${summary[@]}" > "$FINAL_OUT/summary.txt"' EXIT
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
if [ -f .carry/libs.tar.xz ]; then
  mkdir -p /tmp/ulysses_libs && tar -C /tmp/ulysses_libs -xJf .carry/libs.tar.xz
  export LD_LIBRARY_PATH=/tmp/ulysses_libs/libs:${LD_LIBRARY_PATH:-}
fi
note() { summary+=("$1"); echo "== $1"; }
trap "exit 143" TERM INT

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

if [ "$MODE" = plan ]; then
  # The memory plan against the measured pools on the GPU (same binary, same options), the measured
  # peak taken over three steps (the plan must hold in every step, not only the first).
  for cfg in "llama-3.1-8b 32768 --no-optimizer --checkpoint --tiled-loss --tiled-mlp" \
             "llama-3.2-1b 16384 --checkpoint --tiled-loss --tiled-mlp" \
             "llama-3.2-1b 16384 --offload-checkpoints=8 --tiled-loss=512"; do
    set -- $cfg
    shape=$1 seq=$2
    shift 2
    planned=$("$B/ulysses" bench --backend cuda --shape "$shape" --seq "$seq" "$@" --dry-run | grep "peak  *device" | sed 's/.*(\([0-9]*\) bytes).*/\1/')
    measured=$("$B/ulysses" bench --backend cuda --shape "$shape" --seq "$seq" "$@" --warmup 1 --steps 2 2>&1 \
               | grep BENCH_JSON | sed 's/.*"peak_device_bytes":\([0-9]*\).*/\1/')
    note "plan vs measured, $shape $seq $*: planned $planned, measured $measured bytes"
  done
  printf '%s\n' "${summary[@]}"
  exit 0
fi

if [ "$MODE" = verify ]; then
  # The CUDA tests; loss-grad in fp32 against the float64 fixtures at the CPU's tolerances (1 and 2 ranks)
  # and in bf16; the reserved-memory arena against per-tensor cudaMalloc on the 8B shape (A/B, same run);
  # checkpoint offload with asynchronous copies against keeping checkpoints on the device; plan vs measured.
  T=timeout
  if $T 120 bash bench/device/run_cuda_tests.sh "$B" > "$OUT/cuda_tests.log" 2>&1; then note "cuda tests: PASS"
  else note "cuda tests: FAIL (see cuda_tests.log)"; fi
  tail -12 "$OUT/cuda_tests.log"
  for np in 1 2; do
    L=""; [ $np = 2 ] && L="mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
    $T 90 python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures --launcher "$L" \
      --extra-args "--backend cuda --dtype fp32" > "$OUT/fixtures_cuda_fp32_np$np.log" 2>&1 \
      && note "fixtures, cuda fp32, np $np, tolerances 1e-5/1e-4: PASS" || note "fixtures, cuda fp32, np $np: FAIL"
    tail -8 "$OUT/fixtures_cuda_fp32_np$np.log"
  done
  $T 60 python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures \
    --extra-args "--backend cuda --dtype fp32 --comm nccl" > "$OUT/fixtures_cuda_fp32_nccl.log" 2>&1 \
    && note "fixtures, cuda fp32, --comm nccl (1 rank): PASS" || note "fixtures, cuda fp32, --comm nccl: FAIL"
  $T 60 python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures --extra-args "--backend cuda" \
    --loss-tol 1e-2 --grad-tol 5e-2 > "$OUT/fixtures_cuda_bf16.log" 2>&1
  note "fixtures, cuda bf16: $(tail -1 "$OUT/fixtures_cuda_bf16.log")"
  $T 60 python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures --extra-args "--backend cuda" \
    --loss-tol 1e-2 --grad-tol 5e-2 --floor fixtures/bf16_floor.json > "$OUT/fixtures_cuda_bf16_floor.log" 2>&1
  note "fixtures, cuda bf16 against the bf16 floor: $(tail -1 "$OUT/fixtures_cuda_bf16_floor.log")"
  for r in "" "--no-reserve"; do
    $T 180 "$B/ulysses" bench --backend cuda --shape llama-3.1-8b --seq 32768 --no-optimizer --checkpoint --tiled-loss \
      --tiled-mlp --warmup 1 --steps 2 $r > "$OUT/bench_8b_32k$r.log" 2>&1
    note "8B 32K fwd+bwd ${r:-reserved}: $(grep -E 'step time|tokens/s' "$OUT/bench_8b_32k$r.log" | tr -s ' ' | tr '\n' ' ') $(grep 'memory arena' "$OUT/bench_8b_32k$r.log")"
  done
  for o in "--checkpoint" "--offload-checkpoints"; do
    $T 60 "$B/ulysses" bench --backend cuda --shape llama-3.2-1b --seq 16384 $o --tiled-loss --tiled-mlp --steps 2 \
      > "$OUT/bench_1b_16k$o.log" 2>&1
    planned=$($T 30 "$B/ulysses" bench --backend cuda --shape llama-3.2-1b --seq 16384 $o --tiled-loss --tiled-mlp --dry-run | grep "peak  *device" | sed 's/.*(\([0-9]*\) bytes).*/\1/')
    note "1B 16K AdamW $o: $(grep -E 'step time|tokens/s' "$OUT/bench_1b_16k$o.log" | tr -s ' ' | tr '\n' ' ') planned $planned measured $(grep BENCH_JSON "$OUT/bench_1b_16k$o.log" | sed 's/.*"peak_device_bytes":\([0-9]*\).*/\1/') $(grep 'memory arena' "$OUT/bench_1b_16k$o.log")"
  done
  printf '%s\n' "${summary[@]}"
  exit 0
fi

if [ "$MODE" = compare ]; then
  # The engine next to transformers on the 8B shape at 32K (same run), the backend test, and the plan
  # against the peak measured over three steps for the 1B shape.
  timeout 60 "$B/tests/cuda_backend_test" > "$OUT/cuda_backend_test.log" 2>&1 \
    && note "cuda_backend_test: PASS" || note "cuda_backend_test: FAIL"
  grep -E "FAILED|PASSED" "$OUT/cuda_backend_test.log" | head -5
  for o in "--checkpoint --tiled-loss --tiled-mlp" "--offload-checkpoints=8 --tiled-loss=512"; do
    planned=$("$B/ulysses" bench --backend cuda --shape llama-3.2-1b --seq 16384 $o --dry-run | grep "peak  *device" | sed 's/.*(\([0-9]*\) bytes).*/\1/')
    measured=$(timeout 60 "$B/ulysses" bench --backend cuda --shape llama-3.2-1b --seq 16384 $o --warmup 1 --steps 2 2>&1 \
               | grep BENCH_JSON | sed 's/.*"peak_device_bytes":\([0-9]*\).*/\1/')
    note "plan vs measured over 3 steps, 1B 16K AdamW $o: planned $planned, measured $measured bytes"
  done
  timeout 180 "$B/ulysses" bench --backend cuda --shape llama-3.1-8b --seq 32768 --no-optimizer --checkpoint --tiled-loss \
     --tiled-mlp --steps 2 --json "$OUT/ulysses_8b_32k.json" > "$OUT/ulysses_8b_32k.log" 2>&1 \
     && note "ulysses 8B 32K: $(grep -E 'step time|tokens/s|peak device' "$OUT/ulysses_8b_32k.log" | tr -s ' ' | tr '\n' ' ')" \
     || note "ulysses bench 8B 32K: FAIL"
  timeout 120 python3 bench/peers/hf_llama_step.py --shape llama-3.1-8b --seq 32768 --steps 2 --json "$OUT/hf_8b_32k.json" \
     > "$OUT/hf_8b_32k.log" 2>&1 && note "hf 8B 32K: $(tail -1 "$OUT/hf_8b_32k.log")" || note "hf peer 8B 32K: FAIL"
  printf '%s\n' "${summary[@]}"
  exit 0
fi

if [ "$MODE" = multigpu ]; then
  # Several GPUs of one host: NCCL between ranks (one GPU each) against one rank, then the 8B shape at 128K
  # tokens with sequence parallelism over all GPUs.
  N=$(nvidia-smi -L | wc -l)
  M="mpirun --allow-run-as-root --oversubscribe -np $N -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
  timeout 120 python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures --launcher "$M" \
    --extra-args "--backend cuda --dtype fp32 --comm nccl" > "$OUT/fixtures_nccl_np$N.log" 2>&1 \
    && note "fixtures, cuda fp32, --comm nccl, $N GPUs: PASS" || note "fixtures, --comm nccl, $N GPUs: FAIL"
  tail -8 "$OUT/fixtures_nccl_np$N.log"
  for c in mpi nccl; do
    timeout 240 $M "$B/ulysses" bench --backend cuda --comm $c --shape llama-3.1-8b --seq 131072 --no-optimizer \
      --checkpoint --tiled-loss --tiled-mlp --steps 2 > "$OUT/bench_8b_128k_$c.log" 2>&1
    note "8B 128K, $N GPUs, --comm $c: $(grep -E 'step time|tokens/s' "$OUT/bench_8b_128k_$c.log" | tr -s ' ' | tr '\n' ' ')"
  done
  printf '%s\n' "${summary[@]}"
  exit 0
fi

if [ "$MODE" = long ]; then
  # Long context on one GPU: Llama-3.1-8B forward + backward at 128K tokens with all memory options
  # (transformers OOMs at 64K, DESIGN.md §6), transformers at 64K in the same run, and a step that
  # cannot fit refused before allocating anything.
  "$B/ulysses" bench --backend cuda --shape llama-3.1-8b --seq 131072 --no-optimizer --offload-checkpoints \
     --tiled-loss --tiled-mlp --warmup 0 --steps 1 --json "$OUT/ulysses_8b_128k.json" > "$OUT/ulysses_8b_128k.log" 2>&1 \
     && note "ulysses bench 8B 128K: done" || note "ulysses bench 8B 128K: FAIL"
  tail -8 "$OUT/ulysses_8b_128k.log"
  python3 bench/peers/hf_llama_step.py --shape llama-3.1-8b --seq 65536 --warmup 0 --steps 1 \
     --json "$OUT/hf_8b_64k.json" > "$OUT/hf_8b_64k.log" 2>&1; note "hf peer 8B 64K: $(tail -1 "$OUT/hf_8b_64k.log")"
  "$B/ulysses" bench --backend cuda --shape llama-3.1-8b --seq 1000000 --no-optimizer --checkpoint \
     > "$OUT/refuse.log" 2>&1; note "8B at 1M tokens with --checkpoint only (exit $?): $(grep error "$OUT/refuse.log")"
  printf '%s\n' "${summary[@]}"
  exit 0
fi

if [ "$MODE" = train ]; then
  # Training on the GPU: a short run at sp = 1 and at sp = 2 (two ranks on the one GPU), then the
  # checkpoint's model/ folder loaded in transformers gives the engine's loss.
  "$B/ulysses" prepare --input docs,README.md,fixtures/README.md --out "$OUT/data" --val-fraction 0.1 --quiet
  for sp in 1 2; do
    $( [ $sp = 2 ] && echo "mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE" ) \
      "$B/ulysses" train configs/demo.yaml model_config=configs/demo-model.json data.train="$OUT/data" \
      out_dir="$OUT/run_sp$sp" backend=cuda steps=30 sp=$sp checkpoint_every=0 eval_every=10 log_every=10 \
      > "$OUT/train_sp$sp.log" 2>&1 && note "train on cuda, sp=$sp: done" || note "train on cuda, sp=$sp: FAIL"
    tail -6 "$OUT/train_sp$sp.log"
  done
  python3 - "$OUT/run_sp1/metrics.jsonl" "$OUT/run_sp2/metrics.jsonl" <<'PY' | tee "$OUT/train_compare.txt"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
print(f"cuda training, sp=2 vs sp=1 over {len(a)} steps: worst relative loss difference "
      f"{max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}; loss {a[0]:.4f} -> {a[-1]:.4f}")
PY
  python3 tools/check_export.py --ulysses "$B/ulysses" --model "$OUT/run_sp1/checkpoints/step-0000030/model" \
    --device cuda > "$OUT/export.log" 2>&1 && note "export loads in transformers: PASS" || note "export: FAIL"
  grep -v Loading "$OUT/export.log" | tail -2
  printf '%s\n' "${summary[@]}"
  exit 0
fi

# 1. every CUDA op against its CPU twin
if bash bench/device/run_cuda_tests.sh "$B" > "$OUT/cuda_tests.log" 2>&1; then note "cuda op tests: PASS"
else note "cuda op tests: FAIL (see cuda_tests.log)"; fi
tail -25 "$OUT/cuda_tests.log"

# 2. loss-grad on the fixtures with the CUDA backend vs the float64 reference (bf16 tolerances)
if python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures --extra-args "--backend cuda" \
     --loss-tol 1e-2 --grad-tol 5e-2 > "$OUT/fixtures_cuda.log" 2>&1; then note "fixtures, cuda, 1 rank: PASS"
else note "fixtures, cuda, 1 rank: FAIL"; fi
cat "$OUT/fixtures_cuda.log" | tail -9

# 2b. the same cases through transformers in bf16: the baseline for the bf16 errors above
python3 tools/hf_bf16_baseline.py --cases fixtures > "$OUT/hf_bf16_baseline.log" 2>&1 || echo "hf baseline failed"
cat "$OUT/hf_bf16_baseline.log" | tail -8

# 3. several ranks sharing the one GPU (MPI with host staging)
for np in 2 4; do
  if python3 tools/check_loss_grad.py --ulysses "$B/ulysses" --cases fixtures --extra-args "--backend cuda" \
       --launcher "mpirun --allow-run-as-root --oversubscribe -np $np -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE" \
       --loss-tol 1e-2 --grad-tol 5e-2 > "$OUT/fixtures_cuda_np$np.log" 2>&1; then note "fixtures, cuda, mpirun -np $np: PASS"
  else note "fixtures, cuda, mpirun -np $np: FAIL"; fi
  tail -9 "$OUT/fixtures_cuda_np$np.log"
done

[ "$MODE" = quick ] && { printf '%s\n' "${summary[@]}"; exit 0; }

# 4. attention kernels alone
"$B/attention_bench" > "$OUT/attention_bench.log" 2>&1 && note "attention bench: done" || note "attention bench: FAIL"
tail -8 "$OUT/attention_bench.log"

# 5. the engine next to Hugging Face transformers, same shape and length, same run
"$B/ulysses" bench --backend cuda --shape llama-3.1-8b --seq 32768 --no-optimizer --checkpoint --tiled-loss \
   --tiled-mlp --steps 2 --json "$OUT/ulysses_8b_32k.json" > "$OUT/ulysses_8b_32k.log" 2>&1 \
   && note "ulysses bench 8B 32K: done" || note "ulysses bench 8B 32K: FAIL"
tail -8 "$OUT/ulysses_8b_32k.log"
python3 bench/peers/hf_llama_step.py --shape llama-3.1-8b --seq 32768 --steps 2 --json "$OUT/hf_8b_32k.json" \
   > "$OUT/hf_8b_32k.log" 2>&1 && note "hf peer 8B 32K: done" || note "hf peer 8B 32K: FAIL"
tail -4 "$OUT/hf_8b_32k.log"
"$B/ulysses" bench --backend cuda --shape llama-3.2-1b --seq 16384 --checkpoint --tiled-loss --tiled-mlp --steps 2 \
   --json "$OUT/ulysses_1b_16k_adamw.json" > "$OUT/ulysses_1b_16k_adamw.log" 2>&1 \
   && note "ulysses bench 1B 16K with AdamW: done" || note "ulysses bench 1B 16K with AdamW: FAIL"
tail -8 "$OUT/ulysses_1b_16k_adamw.log"
printf '%s\n' "${summary[@]}"
