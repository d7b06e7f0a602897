#!/usr/bin/env bash
# LoRA end to end on CPU: loss-grad --lora-adapter equals the float64 transformers + PEFT references
# (fixtures/lora) at sp 1, 2 and 4, with dp, ring attention and the memory options; train's lora
# block trains the adapters alone (the loss falls), writes adapter/ as PEFT writes it, which PEFT
# loads giving our loss, merge-lora merges it as PEFT does, resumes bit for bit and continues from
# an adapter folder; what is not supported yet is refused in one line.
source "$(dirname "$0")/lib.sh" "$@"
skip_unless_python numpy safetensors torch transformers peft
cd "$TMP"

CHECK="python3 $ROOT/tools/check_loss_grad.py --ulysses $ULYSSES --cases $ROOT/fixtures/lora"
run_check() {  # NAME LAUNCHER EXTRA-ARGS
  if $CHECK ${2:+--launcher "$2"} --extra-args "$3" > check.log 2>&1 && grep -q "2/2 cases passed" check.log; then
    pass "$1"
  else
    fail "$1"; tail -8 check.log
  fi
}
run_check "LoRA fixtures at sp 1 equal transformers + PEFT" "" ""
run_check "LoRA fixtures at sp 2 (Ulysses)" "$MPIRUN -np 2" "--sp 2"
run_check "LoRA fixtures at sp 4 (Ulysses)" "$MPIRUN -np 4" "--sp 4"
run_check "LoRA fixtures at dp 2 x sp 2, ring 2 zigzag, head chunks, tiled MLP and loss, offloaded checkpoints" \
  "$MPIRUN -np 4" "--sp 2 --sp-ring 2 --zigzag --head-chunks 2 --tiled-mlp=3 --tiled-loss=7 --offload-checkpoints"

# --- training -------------------------------------------------------------------------------
"$ULYSSES" prepare --input "$ROOT/README.md" --out data --val-fraction 0.2 --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
write_tiny_model tiny.json
cat > base.yaml <<'YAML'
model_config: tiny.json
data: {train: data, seq_len: 64}
batch_size: 2
steps: 1
save_dtype: float32
out_dir: base
YAML
"$ULYSSES" train base.yaml > base.log 2>&1 && pass "a base model folder" || { fail "base model"; tail -3 base.log; }
BASE=base/checkpoints/step-0000001/model
cat > lora.yaml <<YAML
model: $BASE
data: {train: data, seq_len: 64}
batch_size: 2
steps: 6
checkpoint_every: 3
optimizer: {lr: 5.0e-2, warmup_steps: 1}
lora: {r: 8, alpha: 16}
out_dir: lora
YAML
"$ULYSSES" train lora.yaml > lora.log 2>&1 && pass "train with lora: {r: 8, alpha: 16}" \
  || { fail "train with lora"; tail -5 lora.log; }
grep -q "14848 trained parameters, the base's 94784 frozen" lora.log \
  && pass "the adapters alone are trained (2 x 7 x r (in + out) parameters)" || fail "trained parameter count"
ADAPTER=lora/checkpoints/step-0000006/adapter
python3 - "$ADAPTER" "$BASE" lora/metrics.jsonl <<'PY' && pass "adapter/ holds PEFT's two files, names, dtypes and config; the loss fell" || fail "adapter folder"
import json, os, sys
from safetensors import safe_open
d, base, metrics = sys.argv[1:]
assert sorted(os.listdir(d)) == ["adapter_config.json", "adapter_model.safetensors"], os.listdir(d)
c = json.load(open(os.path.join(d, "adapter_config.json")))
assert c["peft_type"] == "LORA" and c["task_type"] == "CAUSAL_LM" and c["r"] == 8 and c["lora_alpha"] == 16, c
assert c["base_model_name_or_path"] == base and c["use_rslora"] is False and c["lora_dropout"] == 0.0, c
assert sorted(c["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"]), c
with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
    assert f.metadata() == {"format": "pt"}, f.metadata()
    names = sorted(f.keys())
    assert len(names) == 28, names
    for n in names:
        t = f.get_tensor(n)
        assert str(t.dtype) == "torch.float32", (n, t.dtype)
        assert n.startswith("base_model.model.model.layers.") and n.endswith((".lora_A.weight", ".lora_B.weight")), n
    assert f.get_tensor("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").shape == (8, 64)
    assert f.get_tensor("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight").shape == (64, 8)
    assert f.get_tensor("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight").abs().max() > 0
loss = [json.loads(l)["loss"] for l in open(metrics) if "loss" in json.loads(l)]
assert loss[-1] < loss[0] - 0.05, loss
PY
python3 "$ROOT/tools/check_peft_adapter.py" --ulysses "$ULYSSES" --model "$BASE" --adapter "$ADAPTER" \
  > peft.log 2>&1 && pass "PEFT loads our adapter and gives our loss, which the adapter moved off the base's ($(grep -o 'rel [0-9.e+-]*' peft.log | head -1))" \
  || { fail "PEFT loads our adapter"; tail -3 peft.log; }
"$ULYSSES" merge-lora --model "$BASE" --adapter "$ADAPTER" --out merged --dtype float32 > merge.log 2>&1 \
  && python3 "$ROOT/tools/check_peft_adapter.py" --ulysses "$ULYSSES" --model "$BASE" --adapter "$ADAPTER" \
       --merged merged > merged.log 2>&1 \
  && pass "merge-lora: the weights are PEFT's merge_and_unload's, the loss the adapter's ($(grep -o 'worst weight rel [0-9.e+-]*' merged.log))" \
  || { fail "merge-lora"; tail -3 merge.log merged.log; }
expect_error "merge-lora over a folder that is not empty" "exists and is not empty" \
  "$ULYSSES" merge-lora --model "$BASE" --adapter "$ADAPTER" --out "$BASE"

# Resume: from step 3's checkpoint, step 6 is the first run's bit for bit.
cp -r lora lora2
rm -rf lora2/checkpoints/step-0000006 && echo step-0000003 > lora2/checkpoints/latest
"$ULYSSES" train lora.yaml out_dir=lora2 resume=true > resume.log 2>&1 \
  && cmp -s lora/checkpoints/step-0000006/adapter/adapter_model.safetensors \
            lora2/checkpoints/step-0000006/adapter/adapter_model.safetensors \
  && pass "a LoRA run resumes bit for bit" || { fail "LoRA resume"; tail -3 resume.log; }
# Continue from an adapter folder: its values are where the new run starts.
"$ULYSSES" train lora.yaml out_dir=cont steps=1 lora.adapter=$ADAPTER optimizer.lr=0 > cont.log 2>&1 \
  && cmp -s "$ADAPTER/adapter_model.safetensors" cont/checkpoints/step-0000001/adapter/adapter_model.safetensors \
  && pass "lora.adapter continues from a PEFT folder (lr 0 writes it back unchanged)" \
  || { fail "lora.adapter"; tail -3 cont.log; }

# --- refusals ---------------------------------------------------------------------------------
expect_error "an adapter whose r differs from the lora block" "differ from the train config's lora block" \
  "$ULYSSES" train lora.yaml out_dir=bad1 lora.adapter=$ADAPTER lora.r=4
expect_error "lora without a model folder" "LoRA trains adapters on a base model's weights" \
  "$ULYSSES" train lora.yaml out_dir=bad2 model= model_config=tiny.json
expect_error "lora dropout" "LoRA dropout 0.1 is not supported yet" \
  "$ULYSSES" train lora.yaml out_dir=bad3 lora.dropout=0.1
expect_error "an unknown target module" "names 'qkv_proj'" \
  "$ULYSSES" train lora.yaml out_dir=bad4 "lora.target_modules=[qkv_proj]"
expect_error "lora with ZeRO" "LoRA with ZeRO stage 1 is not supported yet" \
  "$ULYSSES" train lora.yaml out_dir=bad5 zero=1
expect_error "lora with the optimizer offloaded" "LoRA with the optimizer offloaded is not supported yet" \
  "$ULYSSES" train lora.yaml out_dir=bad6 offload_optimizer=true
FX=$ROOT/fixtures/lora/untied
LG=("$ULYSSES" loss-grad --model "$FX/model" --batch "$FX/batch.safetensors" --out out.safetensors)
expect_error "loss-grad --lora-adapter with --zero 2" "LoRA with ZeRO stage 2 is not supported yet" \
  "${LG[@]}" --lora-adapter "$FX/adapter" --zero 2
expect_error "an adapter for another model" "has shape .* but r = 8 and the model's config.json give" \
  "${LG[@]}" --lora-adapter "$ROOT/fixtures/lora/tied/adapter"
edited() {  # NAME PYTHON-EDIT: a copy of the fixture's adapter with its config edited
  mkdir -p "$1" && cp "$FX/adapter/adapter_model.safetensors" "$1/"
  python3 -c "import json,sys; c=json.load(open('$FX/adapter/adapter_config.json')); $2; json.dump(c, open('$1/adapter_config.json','w'))"
}
edited dora 'c["use_dora"]=True'
expect_error "a DoRA adapter" "field 'use_dora' is true: DoRA is not supported yet" "${LG[@]}" --lora-adapter dora
edited regex 'c["target_modules"]=".*proj"'
expect_error "target_modules as a regular expression" "a regular expression is not supported" \
  "${LG[@]}" --lora-adapter regex
edited drop 'c["lora_dropout"]=0.05'
expect_error "an adapter with dropout" "LoRA dropout 0.05 is not supported yet" "${LG[@]}" --lora-adapter drop
edited fewer 'c["target_modules"]=["q_proj"]'
expect_error "tensors the config does not target" "is not an adapter of this config" \
  "${LG[@]}" --lora-adapter fewer
edited more 'c["target_modules"]=["q_proj"]'
cp "$FX/adapter/adapter_config.json" more/ && python3 - <<'PY'
from safetensors.numpy import load_file, save_file
t = load_file("more/adapter_model.safetensors")
del t["base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"]
save_file(t, "more/adapter_model.safetensors")
PY
expect_error "a missing adapter tensor" "layers.1.mlp.up_proj.lora_B.weight' is missing" "${LG[@]}" --lora-adapter more

finish
