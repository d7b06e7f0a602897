#!/usr/bin/env bash
# Hostile input, second round (issue 28; docs/reliability.md): deep nesting in every
# recursive reader, configuration that is accepted but not meant, unusable output
# folders. Each: one `error:` line naming the file or flag, non-zero exit, no crash.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

"$ULYSSES" prepare --input "$ROOT/README.md" --out data --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
write_tiny_model model.json
cat > train.yaml <<'YAML'
model_config: model.json
data:
  train: data
  seq_len: 32
batch_size: 1
steps: 2
log_every: 100
YAML

# one_line NAME: the last expect_error printed exactly one error line and no source path.
one_line() {
  [ "$(grep -c 'error:' "$TMP/stderr")" -eq 1 ] && ! grep -q -E '\.(cpp|h):[0-9]+' "$TMP/stderr" \
    && pass "$1: one line, no source path" || { fail "$1: not one clean line"; head -3 "$TMP/stderr"; }
}

# ---- class 1: nesting, refused before the reader recurses ----
python3 -c "
import json
c = json.load(open('model.json')); s = json.dumps(c)[:-1] + ', \"x\": ' + '[' * 1000000 + ']' * 1000000 + '}'
open('deep.json', 'w').write(s)"
expect_error "a config.json nested a million deep" "deep.json: nesting deeper than 128 at line 1, column" \
  "$ULYSSES" train train.yaml model_config=deep.json out_dir=deep
one_line "deep config.json"
mkdir -p tok && python3 -c "
s = open('$ROOT/fixtures/tokenizers/llama3/tokenizer.json').read()
i = s.index('{'); n = '{\"type\": \"Sequence\", \"normalizers\": [' * 100000 + '{\"type\": \"NFC\"}' + ']}' * 100000
open('tok/tokenizer.json', 'w').write(s[:i + 1] + '\"normalizer\": ' + n + ', ' + s[i + 1:].replace('\"normalizer\":', '\"old_normalizer\":', 1))"
echo hello | expect_error "a tokenizer.json nested deep" "tokenizer.json: nesting deeper than 128 at line" \
  "$ULYSSES" tokenize --tokenizer tok
one_line "deep tokenizer.json"
printf 'model_config: model.json\ndata:\n  train: data\nsteps: %s%s\n' "$(printf '[%.0s' $(seq 1 5000))" "$(printf ']%.0s' $(seq 1 5000))" > deep.yaml
expect_error "a YAML config nested deep" "deep.yaml: nesting deeper than 64 at line 4, column" "$ULYSSES" train deep.yaml
one_line "deep YAML"

# ---- class 4: configuration accepted but not meant ----
printf 'model_config: model.json\ndata:\n  train: data\nsteps: 2\nsteps: 200\n' > dup.yaml
expect_error "a key given twice" "dup.yaml: key 'steps' is given twice \(line 4 and line 5\)" "$ULYSSES" train dup.yaml
printf 'model_config: model.json\ndata:\n  train: data\n  seq_len: 32\n  train: other\n' > dup_nested.yaml
expect_error "a nested key given twice" "dup_nested.yaml: key 'data.train' is given twice \(line 3 and line 5\)" \
  "$ULYSSES" train dup_nested.yaml
printf 'model_config: model.json\ndata:\n  train: data\n---\nsteps: 200\n' > two.yaml
expect_error "a second YAML document" "two.yaml: a second YAML document at line 4" "$ULYSSES" train two.yaml
[ ! -e runs ] && pass "no run folder made by a refused config" || fail "a refused config made a run folder"

finish
