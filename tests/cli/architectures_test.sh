#!/usr/bin/env bash
# The families beyond Llama end to end on CPU: a Qwen2 (q/k/v biases) and a Mistral with a
# sliding window shorter than the rows train with sp = 2 giving sp = 1's loss curve; a train
# config's rope_scaling (a YaRN context extension) is used and written into the exported
# config.json; the checkpoint generates; named shapes plan; other architectures are refused
# with one line naming the supported ones.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

"$ULYSSES" prepare --input "$ROOT/README.md" --out data --val-fraction 0.2 --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"

cat > qwen2.json <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
 "use_sliding_window": false, "sliding_window": null, "hidden_act": "silu", "torch_dtype": "float32"}
JSON
cat > mistral.json <<'JSON'
{"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 16,
 "hidden_act": "silu", "torch_dtype": "float32"}
JSON
cat > train.yaml <<'YAML'
data:
  train: data
  seq_len: 64
  mode: long
batch_size: 2
steps: 12
optimizer:
  lr: 3.0e-3
  min_lr: 3.0e-4
  warmup_steps: 2
log_every: 4
YAML

curves_equal() {  # metrics A, metrics B: the same loss curve (<= 1e-5 per step), and it falls
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"     worst relative difference {worst:.2e}; loss {a[0]:.4f} -> {a[-1]:.4f}")
assert worst <= 1e-5, worst
assert a[-1] < a[0] - 0.3, "the loss did not fall"
PY
}

for arch in qwen2 mistral; do
  "$ULYSSES" train train.yaml model_config=$arch.json out_dir=${arch}1 > ${arch}1.log 2>&1 \
    || { fail "train $arch sp=1"; tail -3 ${arch}1.log; }
  $MPIRUN -np 2 "$ULYSSES" train train.yaml model_config=$arch.json out_dir=${arch}2 sp=2 > ${arch}2.log 2>&1 \
    || { fail "train $arch sp=2"; tail -3 ${arch}2.log; }
  curves_equal ${arch}1/metrics.jsonl ${arch}2/metrics.jsonl && pass "$arch: sp=2 loss curve equals sp=1 and falls" \
    || fail "$arch: sp=2 loss curve equals sp=1"
done
$MPIRUN -np 2 "$ULYSSES" train train.yaml model_config=mistral.json out_dir=mistral_ring sp=2 sp_ring=2 \
  > mistral_ring.log 2>&1 || { fail "train mistral ring"; tail -3 mistral_ring.log; }
curves_equal mistral1/metrics.jsonl mistral_ring/metrics.jsonl \
  && pass "mistral: ring attention (sp_ring=2) keeps the window" || fail "mistral: ring attention keeps the window"

CKPT=qwen2yarn/checkpoints/step-0000012/model
"$ULYSSES" train train.yaml model_config=qwen2.json out_dir=qwen2yarn \
  'rope_scaling={rope_type: yarn, factor: 4.0, original_max_position_embeddings: 16}' > qwen2yarn.log 2>&1 \
  || { fail "train qwen2 with rope_scaling"; tail -3 qwen2yarn.log; }
if python3 - qwen2yarn/metrics.jsonl qwen21/metrics.jsonl "$CKPT/config.json" <<'PY'
import json, sys
y = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
p = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(y) == len(p) == 12, (len(y), len(p))
assert any(a != b for a, b in zip(y, p)), "rope_scaling changed nothing"
cfg = json.load(open(sys.argv[3]))
assert cfg["architectures"] == ["Qwen2ForCausalLM"], cfg["architectures"]
rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
assert rs.get("rope_type", rs.get("type")) == "yarn" and rs["factor"] == 4.0, rs
assert rs["original_max_position_embeddings"] == 16, rs
print(f"     exported rope: {rs}")
PY
then pass "rope_scaling from the train config is used and written into the exported config.json"
else fail "rope_scaling from the train config"; fi
out=$("$ULYSSES" generate --model "$CKPT" --prompt "The engine" --max-new-tokens 8 2>&1) \
  && pass "generate from the Qwen2 checkpoint" || { fail "generate from the Qwen2 checkpoint"; echo "$out" | tail -3; }

for shape in qwen2.5-7b qwen3-8b mistral-7b; do
  "$ULYSSES" plan --shape $shape --seq 4096 --backend cuda --no-optimizer --checkpoint > plan_$shape.log 2>&1 \
    && pass "plan --shape $shape" || { fail "plan --shape $shape"; tail -3 plan_$shape.log; }
done

# The families' fixtures (float64 transformers references) under ZeRO-3 over dp 2 x sp 2 (one-row
# batches: sp 4), gradients reduce-scattered and weights gathered layer by layer.
mkdir -p fx2 fx1
for c in qwen2_bias qwen3_qknorm qwen3_bias_yarn mistral_window llama_dynamic; do ln -s "$ROOT/fixtures/$c" fx2/$c; done
ln -s "$ROOT/fixtures/qwen2_yarn_tied" fx1/qwen2_yarn_tied
python3 "$ROOT/tools/check_loss_grad.py" --ulysses "$ULYSSES" --cases fx2 --launcher "$MPIRUN -np 4" \
  --extra-args "--sp 2 --zero 3" > zero3.log 2>&1 && \
python3 "$ROOT/tools/check_loss_grad.py" --ulysses "$ULYSSES" --cases fx1 --launcher "$MPIRUN -np 4" \
  --extra-args "--sp 4 --zero 3" >> zero3.log 2>&1 \
  && pass "Qwen2/Qwen3/Mistral/dynamic-RoPE fixtures under ZeRO-3 at dp 2 x sp 2 (sp 4 for one row) equal transformers" \
  || { fail "fixtures under ZeRO-3"; tail -5 zero3.log; }

cat > gemma.json <<'JSON'
{"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4}
JSON
expect_error "another architecture is refused naming the supported ones" \
  "GemmaForCausalLM.*not supported.*LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM" \
  "$ULYSSES" train train.yaml model_config=gemma.json out_dir=gemma
finish
