#!/usr/bin/env bash
# Parquet input for prepare: files written by pyarrow (several row groups; snappy, zstd
# and gzip pages; non-Latin text) give the shards that the same records as JSON Lines
# give; --text-column picks the column; messages (a list of {role, content} structs) and
# prompt/completion columns are SFT records; a missing column or a file that is not
# Parquet is one clear line. A build without the Parquet reader must refuse with the fix.
# Skipped (exit 77) without the pyarrow Python package.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

if ! "$ULYSSES" prepare --help | grep -q "this build has them"; then
  printf 'PAR1 but no reader\n' > t.parquet
  expect_error "this build refuses Parquet, naming the fix" "t.parquet: a Parquet file, and this build of ulysses has no Parquet reader: run scripts/fetch-pyarrow.sh" \
    "$ULYSSES" prepare --input t.parquet --out nope --quiet
  finish
  exit $?
fi
skip_unless_python pyarrow

python3 - <<'PY'
import json
import pyarrow as pa, pyarrow.parquet as pq
texts = ["The quick brown fox.", "Größe, Straße und Öl.", "我们正在训练一个语言模型。", "Emoji 😀 👍🏽 and 🇫🇷",
         "Русский текст", "", "line one\nline two\n", "café naïve", "한국어 문장", "last row"] * 3
body = [t[::-1] for t in texts]
table = pa.table({"id": list(range(len(texts))), "text": texts, "body": body})
for codec in ["snappy", "zstd", "gzip"]:
    pq.write_table(table, f"text_{codec}.parquet", row_group_size=7, compression=codec)
with open("text.jsonl", "w") as f:
    for t, b in zip(texts, body):
        f.write(json.dumps({"text": t, "body": b}, ensure_ascii=False) + "\n")
md = pq.ParquetFile("text_snappy.parquet").metadata
assert md.num_row_groups == 5, md.num_row_groups
words = "the model reads long documents and learns to answer".split()
chats, pcs = [], []
for i in range(9):
    conv = [{"role": "user", "content": " ".join(words[i % 5:i % 5 + 3]) + "?"},
            {"role": "assistant", "content": " ".join(words[i % 4:i % 4 + 2 + i % 3]) + "."}]
    chats.append(conv)
    pcs.append({"prompt": "Q: " + " ".join(words[i % 6:]), "completion": " A " + words[i % 7]})
pq.write_table(pa.table({"messages": chats}), "chat.parquet", row_group_size=4)
pq.write_table(pa.table({"prompt": [p["prompt"] for p in pcs], "completion": [p["completion"] for p in pcs]}),
               "pc.parquet", row_group_size=4)
with open("chat.jsonl", "w") as f:
    for c in chats:
        f.write(json.dumps({"messages": c}) + "\n")
with open("pc.jsonl", "w") as f:
    for p in pcs:
        f.write(json.dumps(p) + "\n")
PY
[ -f text_snappy.parquet ] || { fail "pyarrow wrote the test files"; finish; exit 1; }

TK="$ROOT/fixtures/tokenizers/llama3"
CHAT="$ROOT/fixtures/chat/llama3"
same_shards() {  # DIR_A DIR_B: the same token shards (and loss masks)
  local a b ok=0
  for a in "$1"/*.tokens; do
    b="$2/$(basename "$a")"
    cmp -s "$a" "$b" || ok=1
  done
  [ "$(ls "$1"/*.tokens | wc -l)" -eq "$(ls "$2"/*.tokens | wc -l)" ] || ok=1
  return $ok
}

"$ULYSSES" prepare --input text.jsonl --out ref --tokenizer "$TK" --quiet > /dev/null 2>&1 || fail "prepare JSON Lines"
for codec in snappy zstd gzip; do
  if "$ULYSSES" prepare --input "text_$codec.parquet" --out "pq_$codec" --tokenizer "$TK" --quiet > "pq_$codec.log" 2>&1 \
     && same_shards ref "pq_$codec"; then
    pass "Parquet ($codec pages, 5 row groups, 30 rows) gives the shards of the same JSON Lines"
  else fail "Parquet ($codec)"; cat "pq_$codec.log"; fi
done
"$ULYSSES" prepare --input text.jsonl --out ref_body --tokenizer "$TK" --text-key body --quiet > /dev/null 2>&1
"$ULYSSES" prepare --input text_zstd.parquet --out pq_body --tokenizer "$TK" --text-column body --quiet > body.log 2>&1 \
  && same_shards ref_body pq_body && pass "--text-column body" || { fail "--text-column body"; cat body.log; }

"$ULYSSES" prepare --input chat.jsonl --out ref_chat --tokenizer "$CHAT" --quiet > /dev/null 2>&1
"$ULYSSES" prepare --input chat.parquet --out pq_chat --tokenizer "$CHAT" --quiet > chat.log 2>&1 \
  && grep -q "9 SFT records" chat.log && same_shards ref_chat pq_chat \
  && pass "a messages column (list of {role, content}) gives the SFT shards of the JSON Lines" \
  || { fail "messages column"; cat chat.log; }
"$ULYSSES" prepare --input pc.jsonl --out ref_pc --tokenizer "$CHAT" --quiet > /dev/null 2>&1
"$ULYSSES" prepare --input pc.parquet --out pq_pc --tokenizer "$CHAT" --quiet > pc.log 2>&1 \
  && same_shards ref_pc pq_pc && pass "prompt/completion columns give the SFT shards of the JSON Lines" \
  || { fail "prompt/completion columns"; cat pc.log; }

expect_error "a missing column names the file's columns" \
  "text_snappy.parquet: no column named nope, messages, prompt, completion, tools \(the file has: id, text, body\); choose the text column with --text-column" \
  "$ULYSSES" prepare --input text_snappy.parquet --out e1 --text-column nope --quiet
head -c 300 text_snappy.parquet > cut.parquet
expect_error "a truncated Parquet file" "cut.parquet: not a valid Parquet file" \
  "$ULYSSES" prepare --input cut.parquet --out e2 --quiet
finish
