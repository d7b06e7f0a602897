#!/usr/bin/env bash
# A training checkpoint's model/ is a whole Hugging Face folder: transformers loads it with
# AutoModelForCausalLM and AutoTokenizer (bf16 weights, the tokenizer, chat template and
# generation config copied from the source model), its tokenizer gives our ids, and its greedy
# generate() equals `ulysses generate` on the same folder (32 tokens). Needs torch and
# transformers (skipped, saying so, without them).
source "$(dirname "$0")/lib.sh" "$@"
skip_unless_python torch transformers
cd "$TMP"
FX="$ROOT/fixtures/generate"
mkdir -p data && printf 'a few words to train on for two steps of fine-tuning\n' > data/a.txt
"$ULYSSES" prepare --input data/a.txt --out shards --tokenizer "$FX/model" --quiet > /dev/null 2>&1
"$ULYSSES" train model="$FX/model" data.train=shards data.seq_len=8 steps=2 out_dir=run > train.log 2>&1 \
  || { fail "train from the fixture"; tail -3 train.log; }
M=run/checkpoints/step-0000002/model
ours=$("$ULYSSES" generate --model $M --prompt "The model reads" --add-special-tokens --max-new-tokens 32 \
       --ignore-eos --ids | tail -1)
ids=$(printf 'Hello, 東京! 123' | "$ULYSSES" tokenize --tokenizer $M)
if python3 - $M "$ours" "$ids" <<'PY'
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d, ours, ids = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForCausalLM.from_pretrained(d)
assert model.dtype == torch.bfloat16, model.dtype
assert tok("Hello, 東京! 123", add_special_tokens=False)["input_ids"] == ids, "tokenizer ids differ"
chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
assert chat.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n"), chat
assert model.generation_config.eos_token_id == tok.eos_token_id
m64 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
x = tok("The model reads", return_tensors="pt")
out = m64.generate(**x, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=tok.eos_token_id)
theirs = out[0, x["input_ids"].shape[1]:].tolist()
print("     transformers:", theirs[:10], "...")
assert theirs == ours, (theirs, ours)
PY
then pass "transformers loads the checkpoint (model, tokenizer, chat template, generation config); greedy equals ours"
else fail "transformers on the checkpoint"; fi
finish
