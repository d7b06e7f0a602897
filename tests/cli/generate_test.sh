#!/usr/bin/env bash
# ulysses generate: greedy output equals transformers' generate() (32 tokens, float64, made by
# tools/make_generate_fixture.py) on the fixture models (plain, and dynamic RoPE) for every prompt; the same from a
# training checkpoint of it; sampling is reproducible by seed and top-k 1 is greedy.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"
FX="$ROOT/fixtures/generate"

# fixtures/generate_dynamic: dynamic RoPE over max_position_embeddings 16, which every generation
# passes, so the frequencies change while the cache holds keys rotated by the earlier ones.
for fx in generate generate_dynamic; do
python3 - "$ROOT/fixtures/$fx/expected.json" > cases_$fx.txt <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    print(c["prompt"] + "\t" + ",".join(map(str, c["greedy_ids"])))
PY
n=0
while IFS=$'\t' read -r prompt want; do
  n=$((n + 1))
  got=$("$ULYSSES" generate --model "$ROOT/fixtures/$fx/model" --prompt "$prompt" --add-special-tokens \
        --max-new-tokens 32 --ignore-eos --ids 2> err.txt | tail -1 | tr -d '[] ')
  if [ "$got" = "$want" ]; then pass "$fx: greedy 32 tokens equal transformers' for prompt $n"
  else fail "$fx: greedy for prompt $n: got [$got], transformers [$want]"; cat err.txt; fi
done < cases_$fx.txt
[ $n -eq 3 ] || fail "$fx: expected 3 fixture prompts, read $n"
done
cp cases_generate.txt cases.txt

# From a training checkpoint (lr 0, float32 save): the same tokens, with the tokenizer copied into it.
mkdir -p data && printf 'some text for one step of training\n' > data/a.txt
"$ULYSSES" prepare --input data/a.txt --out shards --tokenizer "$FX/model" --quiet > /dev/null 2>&1
"$ULYSSES" train model="$FX/model" data.train=shards data.seq_len=8 steps=1 optimizer.lr=0 optimizer.warmup_steps=0 \
  save_dtype=float32 out_dir=run > train.log 2>&1 || { fail "train from the fixture"; tail -3 train.log; }
first=$(head -1 cases.txt)
want=${first#*$'\t'}
got=$("$ULYSSES" generate --model run/checkpoints/step-0000001/model --prompt "${first%%$'\t'*}" --add-special-tokens \
      --max-new-tokens 32 --ignore-eos --ids 2>&1 | tail -1 | tr -d '[] ')
[ "$got" = "$want" ] && pass "a checkpoint's model/ generates the same (its own tokenizer)" \
  || fail "checkpoint generate: [$got] vs [$want]"

# Sampling.
s1=$("$ULYSSES" generate --model "$FX/model" --prompt "Hello" --temperature 0.8 --top-p 0.9 --seed 5 --ignore-eos --ids | tail -1)
s2=$("$ULYSSES" generate --model "$FX/model" --prompt "Hello" --temperature 0.8 --top-p 0.9 --seed 5 --ignore-eos --ids | tail -1)
s3=$("$ULYSSES" generate --model "$FX/model" --prompt "Hello" --temperature 0.8 --top-p 0.9 --seed 6 --ignore-eos --ids | tail -1)
[ "$s1" = "$s2" ] && [ "$s1" != "$s3" ] && pass "sampling: same seed, same tokens; another seed, others" \
  || fail "sampling reproducibility ($s1 / $s2 / $s3)"
g=$("$ULYSSES" generate --model "$FX/model" --prompt "Hello" --max-new-tokens 16 --ignore-eos --ids | tail -1)
k1=$("$ULYSSES" generate --model "$FX/model" --prompt "Hello" --max-new-tokens 16 --temperature 1.5 --top-k 1 --seed 9 --ignore-eos --ids | tail -1)
[ "$g" = "$k1" ] && pass "top-k 1 sampling is greedy" || fail "top-k 1 ($k1) vs greedy ($g)"
"$ULYSSES" generate --model "$FX/model" --prompt "Hi there" --chat --max-new-tokens 4 > chat.txt 2>&1 \
  && pass "--chat renders the model's chat template" || { fail "--chat"; cat chat.txt; }

"$ULYSSES" generate --model "$FX/model" --prompt "Hi there" --chat --max-new-tokens 4 \
  --chat-template-kwargs '{"date_string": "01 Jan 2030"}' > chat2.txt 2>&1 \
  && pass "--chat with --chat-template-kwargs" || { fail "--chat-template-kwargs"; cat chat2.txt; }
expect_error "--chat-template-kwargs not an object" "chat-template-kwargs: expects a JSON object" \
  "$ULYSSES" generate --model "$FX/model" --prompt x --chat --chat-template-kwargs '"x"'
expect_error "top-p out of range" "--top-p must be in \(0, 1\]" "$ULYSSES" generate --model "$FX/model" --prompt x --top-p 0
expect_error "no prompt" "give --prompt TEXT or --prompt-ids" "$ULYSSES" generate --model "$FX/model"
expect_error "id outside the vocabulary" "token id 99999 is outside the model's vocabulary" \
  "$ULYSSES" generate --model "$FX/model" --prompt-ids 1,99999
finish
