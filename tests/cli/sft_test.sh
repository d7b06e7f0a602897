#!/usr/bin/env bash
# SFT end to end: chat JSON Lines (`messages`, a Llama-3-style template) prepared into
# shards with a loss mask; one training step over exactly one epoch at sp 1 and sp 2
# gives the float64 reference loss computed with the same mask (masked positions
# contribute nothing); the mask changes the loss. Plus prompt/completion records and
# the errors a user meets.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"
CHAT="$ROOT/fixtures/chat/llama3"

python3 - > chat.jsonl <<'PY'
import json, random
rng = random.Random(3)
words = "the model reads long documents and learns to answer questions about them quickly".split()
for i in range(14):
    conv = []
    if i % 3 == 0:
        conv.append({"role": "system", "content": "You answer briefly."})
    for t in range(1 + i % 2):
        conv.append({"role": "user", "content": " ".join(rng.choice(words) for _ in range(3 + i % 4)) + "?"})
        conv.append({"role": "assistant", "content": " ".join(rng.choice(words) for _ in range(2 + t + i % 3)) + "."})
    print(json.dumps({"messages": conv}))
PY
"$ULYSSES" prepare --input chat.jsonl --out data --tokenizer "$CHAT" --quiet > prep.log 2>&1 \
  && grep -q "14 SFT records" prep.log && pass "prepare chat JSON Lines (14 SFT records)" \
  || { fail "prepare chat JSON Lines"; cat prep.log; }
vocab=$(python3 -c "import json; print(json.load(open('data/manifest.json'))['tokenizer']['vocab_size'])")
python3 "$ROOT/tests/cli/llama_ref.py" make-model model "$vocab"
S=64
rows=$(python3 -c "import json; print(json.load(open('data/manifest.json'))['tokens']['train'] // $S)")
read -r ref count < <(python3 "$ROOT/tests/cli/llama_ref.py" pack-loss data model $S)
read -r unmasked _ < <(python3 "$ROOT/tests/cli/llama_ref.py" pack-loss data model $S --no-mask)
echo "     $rows rows of $S; float64 reference loss $ref over $count assistant targets (no mask: $unmasked)"

cat > sft.yaml <<YAML
model: model
data:
  train: data
  seq_len: $S
batch_size: $rows
steps: 1
optimizer:
  lr: 0.0
  warmup_steps: 0
YAML
"$ULYSSES" train sft.yaml out_dir=sp1 > sp1.log 2>&1 || { fail "train sp=1"; tail -5 sp1.log; }
$MPIRUN -np 2 "$ULYSSES" train sft.yaml out_dir=sp2 sp=2 > sp2.log 2>&1 || { fail "train sp=2"; tail -5 sp2.log; }
for run in sp1 sp2; do
  if python3 - "$run/metrics.jsonl" "$ref" "$unmasked" "$count" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
loss, ref, unmasked, count = rows[0]["loss"], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rel = abs(loss - ref) / abs(ref)
print(f"     {sys.argv[1]}: loss {loss!r}, relative error {rel:.2e}; {rows[0]['targets']} targets")
assert rel <= 2e-6, rel
assert rows[0]["targets"] == count, (rows[0]["targets"], count)
assert abs(unmasked - ref) / ref > 1e-2, "the mask does not change the reference: the test cannot tell"
PY
  then pass "$run: loss equals the float64 reference with the same mask"; else fail "$run: loss vs the masked reference"; fi
done

# Complete checkpoints: tokenizer files and chat template beside bf16 weights; keep_last rotation.
"$ULYSSES" train sft.yaml out_dir=rot steps=5 checkpoint_every=1 keep_last=2 > rot.log 2>&1 || { fail "keep_last run"; tail -3 rot.log; }
kept=$(ls rot/checkpoints | grep -c '^step-')
[ "$kept" = 2 ] && [ -d rot/checkpoints/step-0000005 ] && [ -d rot/checkpoints/step-0000004 ]   && grep -q step-0000005 rot/checkpoints/latest && pass "keep_last: 2 keeps the newest two checkpoints"   || { fail "keep_last: 2 (kept: $(ls rot/checkpoints | tr '\n' ' '))"; }
M=sp1/checkpoints/step-0000001/model
if [ -f $M/tokenizer.json ] && [ -f $M/tokenizer_config.json ] && cmp -s $M/tokenizer_config.json "$CHAT/tokenizer_config.json" \
   && python3 - $M <<'PY'
import json, sys
h = open(sys.argv[1] + "/model.safetensors", "rb").read(8)
head = json.loads(open(sys.argv[1] + "/model.safetensors", "rb").read(8 + int.from_bytes(h, "little"))[8:])
dtypes = {v["dtype"] for k, v in head.items() if k != "__metadata__"}
assert dtypes == {"BF16"}, dtypes
assert json.load(open(sys.argv[1] + "/config.json"))["torch_dtype"] == "bfloat16"
PY
then pass "checkpoint model/ holds the tokenizer and chat template (from the data's tokenizer) and bf16 weights"
else fail "checkpoint model/ is complete"; ls $M; fi

# prompt/completion strings: the completion and the EOS are the targets.
printf '%s\n' '{"prompt": "Question: 2+2? Answer:", "completion": " 4"}' > pc.jsonl
"$ULYSSES" prepare --input pc.jsonl --out pc --tokenizer "$CHAT" --quiet > /dev/null 2>&1
if python3 - "$CHAT" <<'PY'
import numpy as np, sys
from_dir = sys.argv[1]
p = "pc/train-00000.tokens"
n, d, _, to, io = (int(v) for v in np.fromfile(p, np.uint64, 5, offset=16))
assert int(np.fromfile(p, np.uint32, 1, offset=8)[0]) == 2, "expected a version-2 shard (with a mask)"
mask = np.fromfile(p, np.uint8, n, offset=io + 8 * (d + 1))
assert mask[0] == 0 and mask[-1] == 1 and 2 <= mask.sum() <= 3, mask
PY
then pass "prompt/completion: only the completion and EOS are targets"; else fail "prompt/completion mask"; fi

# Qwen 3 style: a multi-turn chat with reasoning (rendered otherwise once later turns follow),
# template variables from --chat-template-kwargs, recorded in the manifest.
printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "<think>\nleaving\n</think>\n\nBye!"}]}' > q3.jsonl
if "$ULYSSES" prepare --input q3.jsonl --out q3 --tokenizer "$ROOT/fixtures/chat/qwen3" --quiet \
     --chat-template-kwargs '{"enable_thinking": false}' > q3.log 2>&1 \
   && python3 - <<'PY'
import json, numpy as np
m = json.load(open("q3/manifest.json"))
assert m["chat_template_kwargs"] == {"enable_thinking": False}, m.get("chat_template_kwargs")
p = "q3/train-00000.tokens"
n, d, _, to, io = (int(v) for v in np.fromfile(p, np.uint64, 5, offset=16))
mask = np.fromfile(p, np.uint8, n, offset=io + 8 * (d + 1))
runs = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))  # starts and ends of the target runs
assert len(runs) == 4, runs  # two assistant turns
PY
then pass "Qwen 3 multi-turn chat with reasoning and --chat-template-kwargs"; else fail "Qwen 3 chat"; cat q3.log; fi

# Errors.
expect_error "--chat-template-kwargs that is no JSON object" "chat-template-kwargs: expects a JSON object" \
  "$ULYSSES" prepare --input q3.jsonl --out e0 --tokenizer "$ROOT/fixtures/chat/qwen3" --chat-template-kwargs '[1]' --quiet
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}]}' > one.jsonl
expect_error "messages without a chat template" "one.jsonl:1: .*need a chat template.*--chat-template" \
  "$ULYSSES" prepare --input one.jsonl --out e1 --quiet
printf '%s\n' '{"messages": [{"role": "robot", "content": "hi"}]}' > role.jsonl
expect_error "an unknown role" "role.jsonl:1: message 0 has role 'robot'" \
  "$ULYSSES" prepare --input role.jsonl --out e2 --tokenizer "$CHAT" --quiet
printf '%s\n' '{"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}' > alt.jsonl
expect_error "the template's own refusal" "alt.jsonl:1: .*must alternate" \
  "$ULYSSES" prepare --input alt.jsonl --out e3 --tokenizer "$ROOT/fixtures/chat/mistral" --quiet
printf '%s\n' '{"question": "hi"}' > nokey.jsonl
expect_error "a record of no known kind" "nokey.jsonl:1: no \"text\" field.*\"messages\".*\"prompt\" and \"completion\"" \
  "$ULYSSES" prepare --input nokey.jsonl --out e4 --quiet
finish
