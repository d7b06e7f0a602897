#!/usr/bin/env bash
# The step-time model against this GPU (issue 32, part 2): records the per-family rates on a
# ladder of lengths (8 layers: the rates are per unit of work), then predicts with `plan --time`
# the 32-layer steps that the runner's cases measure in the same call (ulysses_8b_32k,
# ulysses_8b_128k, ulysses_8b_128k_lora, ulysses_8b_128k_adamw_offload) and, as a forecast,
# 8/16/32 GPUs of the same kind. Each prediction is a `PREDICT name step_s` line and a TIME_JSON.
#   bash bench/device/time_model.sh BUILD [RATES]
set -uo pipefail
B=${1:-.carry/build}
R=${2:-${OUT:-/tmp}/rates.json}
rm -f "$R"
SHAPE=${TIME_MODEL_SHAPE:-"--backend cuda --shape llama-3.1-8b"}
for S in 16384 32768 65536 131072; do
  timeout 200 "$B/ulysses" bench $SHAPE --layers 8 --seq $S --warmup 1 --steps 2 --no-optimizer \
    --checkpoint --tiled-loss --tiled-mlp --profile --rates-out "$R" > /tmp/rates_$S.log 2>&1 \
    || { echo "time_model: rates at $S failed:"; tail -3 /tmp/rates_$S.log; exit 1; }
  echo "time_model: rates at $S recorded"
done
predict() {  # name, plan flags
  local name=$1; shift
  local line
  # --memory-limit auto: --keep-attention auto decides on this GPU's memory as bench does (the
  # default H200 budget kept the attention at 128K on an H100, where bench recomputes it).
  line=$(timeout 120 "$B/ulysses" plan $SHAPE "$@" --memory-limit auto --time "$R" 2>&1 | grep '^TIME_JSON ' | head -1)
  [ -n "$line" ] || { echo "time_model: no prediction for $name"; return 1; }
  echo "PREDICT $name $(python3 -c 'import json,sys; print(json.loads(sys.argv[1][10:])["step_s"])' "$line")"
  echo "$line"
}
predict ulysses_8b_32k --seq 32768 --no-optimizer --checkpoint --tiled-loss --tiled-mlp
predict ulysses_8b_128k --seq 131072 --no-optimizer --offload-checkpoints --tiled-loss --tiled-mlp
predict ulysses_8b_128k_lora --seq 131072 --lora-r 16 --offload-checkpoints --tiled-loss --tiled-mlp
predict ulysses_8b_128k_adamw_offload --seq 131072 --checkpoint --offload-optimizer --tiled-loss --tiled-mlp
for P in 8 16 32; do
  predict "sp${P}_8b_$((P * 64))k_zero3" --seq $((P * 65536)) --sp $P --zero 3 --checkpoint \
    --tiled-loss --tiled-mlp --compare-meshes
done
cp "$R" "${OUT:-/tmp}/" 2>/dev/null || true
