#!/usr/bin/env bash
# One short device call: training steps of a model with a sliding window (Mistral 7B v0.1's shape,
# sliding_window 4096, random weights, 4 of its 32 layers) with our FA2 kernels (ULYSSES_ATTENTION=own)
# against the default (auto: the Hopper kernels where attention_choice.cpp's windowed table has them
# ahead), alternated, at 32K (forward + backward) and 128K (checkpoints, tiled MLP and loss, AdamW);
# then the planned device peak under auto against the measured one, and profiles of the 32K step.
#   bash bench/device/window_step.sh BUILD     (WS_QUICK=1: 32K only, one round, no plan)
set -u
B=${1:-build-gpu}
M=$(mktemp -d)
cat > "$M/config.json" <<'JSON'
{"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
 "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
 "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "vocab_size": 32000}
JSON
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
step() {  # ATTENTION, then bench's options
  local a=$1; shift
  echo "-- ULYSSES_ATTENTION=$a $*"
  ULYSSES_ATTENTION=$a timeout 150 $B/ulysses bench --backend cuda --model "$M" --layers 4 "$@" 2>&1 |
    grep -E "attention (forward|backward)|step time|tokens/s|peak device|error|Error" | sort -u
}
S32="--seq 32768 --steps 3 --no-optimizer"
P128="--seq 131072 --checkpoint --tiled-mlp=0 --tiled-loss"  # the plan's options (it takes no --steps)
S128="$P128 --steps 2"
if [ "${WS_QUICK:-0}" = 1 ]; then
  step own $S32; step auto $S32
else
  for r in 1 2; do step own $S32; step auto $S32; done
  step own $S128; step auto $S128
fi
[ "${WS_QUICK:-0}" = 1 ] || echo "== plan under auto (128K)"
[ "${WS_QUICK:-0}" = 1 ] || timeout 60 $B/ulysses plan --backend cuda --model "$M" --layers 4 $P128 2>&1 | grep -E "fits|device peak|error" | head -3
for a in auto own; do
  echo "== profile ($a, 32K)"
  ULYSSES_ATTENTION=$a timeout 120 $B/ulysses bench --backend cuda --model "$M" --layers 4 $S32 --profile 2>&1 |
    grep -v "^\[ulysses info\] step" | sed -n '/profile/,$p' | grep -v BENCH_JSON | head -18
done
echo "== done"
