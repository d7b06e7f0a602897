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
python3 -c "import json; c=json.load(open('model.json')); c['rope_theta']=1e300; json.dump(c, open('theta.json','w'))"
expect_error "an out-of-range rope_theta, refused at load" \
  "theta.json: field 'rope_theta' must be in \[1, 1000000000000\] \(the RoPE base\), got 1e\+300" \
  "$ULYSSES" train train.yaml model_config=theta.json out_dir=theta
python3 -c "
import json; c=json.load(open('model.json')); c['rope_parameters']={'rope_type': 'default', 'rope_theta': 500000.0}
json.dump(c, open('two_thetas.json','w'))"
expect_error "rope_theta and rope_parameters.rope_theta disagree" \
  "two_thetas.json: 'rope_theta' \(10000\) and 'rope_parameters.rope_theta' \(500000\) disagree" \
  "$ULYSSES" train train.yaml model_config=two_thetas.json out_dir=thetas

# ---- a checkpoint's step: within the stated limit and not past the run's steps ----
"$ULYSSES" train train.yaml out_dir=run > run.log 2>&1 && pass "a short run" || { fail "a short run"; tail -3 run.log; }
ck=run/checkpoints/$(cat run/checkpoints/latest)
cp "$ck/trainer_state.json" state.bak
mv "$ck/checksums.json" sums.bak  # as a checkpoint written before checksums: the state itself is checked
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['step']=2**50; json.dump(j, open(p,'w'))" "$ck/trainer_state.json"
expect_error "a stored step beyond the steps limit" "trainer_state.json: step must be in \[0, 1099511627776\] \(steps; 0 = never\), got 1125899906842624" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=4
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['step']=2**64 - 1; json.dump(j, open(p,'w'))" "$ck/trainer_state.json"
expect_error "a stored step of 2^64 - 1 (no signed overflow in the message)" "step must be in \[0, 1099511627776\] .*got 9223372036854775807" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=4
grep -q -- "-9223372036854775808" "$TMP/stderr" && fail "a signed overflow in the message" || pass "no signed overflow in the message"
cp state.bak "$ck/trainer_state.json" && mv sums.bak "$ck/checksums.json"
expect_error "resume past the run's steps" "is at step 2, past this run's steps=1; nothing would be trained" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=1

# ---- class 7: checksums at rest. One flipped byte in a tensor's payload (the header stays
# valid) is refused at resume and at `model:` load, naming the file ----
ck=run/checkpoints/$(cat run/checkpoints/latest)
[ -s "$ck/checksums.json" ] && [ -s "$ck/model/checksums.json" ] && pass "a checkpoint records its checksums" \
  || fail "a checkpoint records its checksums"
"$ULYSSES" train train.yaml out_dir=run resume=true steps=3 > resume.log 2>&1 && pass "an intact checkpoint resumes" \
  || { fail "an intact checkpoint resumes"; tail -3 resume.log; }
ck=run/checkpoints/$(cat run/checkpoints/latest)
flip() {  # flip the last byte of a file: a tensor's payload, the header untouched
  python3 -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-1] ^= 0x01; open(p, 'wb').write(b)" "$1"
}
cp -r "$ck" ck.bak
flip "$ck/model/model.safetensors"
expect_error "a flipped byte in the model, at resume" "$ck/model/model.safetensors: checksum mismatch \(crc32 [0-9a-f]{8}, [0-9a-f]{8} when it was written" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=4
one_line "a flipped byte"
printf 'model: %s\ndata:\n  train: data\n  seq_len: 32\nsteps: 1\n' "$ck/model" > from_ckpt.yaml
expect_error "a flipped byte in the model, at model: load" "$ck/model/model.safetensors: checksum mismatch" \
  "$ULYSSES" train from_ckpt.yaml out_dir=from_ckpt
rm -rf "$ck" && cp -r ck.bak "$ck"
flip "$ck/optimizer.safetensors"
expect_error "a flipped byte in the optimizer state, at resume" "$ck/optimizer.safetensors: checksum mismatch" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=4
rm -rf "$ck" && cp -r ck.bak "$ck"
"$ULYSSES" train from_ckpt.yaml out_dir=from_ckpt2 > fc.log 2>&1 && pass "an intact checkpoint's model/ loads as a model" \
  || { fail "an intact checkpoint's model/ loads"; tail -3 fc.log; }

# ---- class 5: ranks that agree. Ranks started with another seq_len, data or config are refused
# at start-up with one line naming the key, both values and both ranks (they ran apart, or died
# in MPI_ERR_TRUNCATE) ----
if command -v mpirun > /dev/null; then
  expect_error "ranks with different seq_len" \
    "^ulysses train: error: the ranks disagree at start-up: 'config.data.seq_len' is 32 on rank 0 but 64 on rank 1" \
    $MPIRUN -np 1 "$ULYSSES" train train.yaml out_dir=apart : -np 1 "$ULYSSES" train train.yaml out_dir=apart data.seq_len=64
  [ "$(grep -c 'disagree' "$TMP/stderr")" -eq 1 ] && pass "one line, from rank 0" || fail "not one line: $(grep -c disagree "$TMP/stderr")"
  "$ULYSSES" prepare --input "$ROOT/docs" --out data2 --quiet > /dev/null 2>&1
  expect_error "the third rank with other data" \
    "^ulysses train: error: the ranks disagree at start-up: 'config.data.train' is \"data\" on rank 0 but \"data2\" on rank 2" \
    $MPIRUN -np 2 "$ULYSSES" train train.yaml out_dir=apart2 batch_size=3 : -np 1 "$ULYSSES" train train.yaml out_dir=apart2 batch_size=3 data.train=data2
  expect_error "loss-grad ranks with other batch files" \
    "^ulysses loss-grad: error: the ranks disagree at start-up: 'batch.length' is 32 on rank 0 but 64 on rank 1" \
    $MPIRUN -np 1 "$ULYSSES" loss-grad --model "$ROOT/fixtures/gqa/model" --batch "$ROOT/fixtures/gqa/batch.safetensors" --out lg.st \
    : -np 1 "$ULYSSES" loss-grad --model "$ROOT/fixtures/gqa/model" --batch "$ROOT/fixtures/mqa_llama3/batch.safetensors" --out lg.st
  expect_error "bench ranks with another --seq" "^ulysses bench: error: the ranks disagree at start-up: 'options\[4\]' is \"64\" on rank 0 but \"128\" on rank 1" \
    $MPIRUN -np 1 "$ULYSSES" bench --shape tiny --seq 64 --steps 1 : -np 1 "$ULYSSES" bench --shape tiny --seq 128 --steps 1
  $MPIRUN -np 2 "$ULYSSES" train train.yaml out_dir=agree batch_size=2 > agree.log 2>&1 \
    && pass "ranks that agree train" || { fail "ranks that agree train"; tail -3 agree.log; }
fi

# ---- class 6: an unusable out_dir is one line naming it ----
touch afile
expect_error "out_dir is a file" "^ulysses train: error: out_dir afile is a regular file, not a folder" "$ULYSSES" train train.yaml out_dir=afile
one_line "out_dir a file"
expect_error "out_dir under a file" "^ulysses train: error: cannot make out_dir afile/sub: Not a directory" "$ULYSSES" train train.yaml out_dir=afile/sub
expect_error "out_dir is a device" "^ulysses train: error: out_dir /dev/null is a character device, not a folder" "$ULYSSES" train train.yaml out_dir=/dev/null
ln -s nowhere dangling
expect_error "out_dir is a dangling symlink" "^ulysses train: error: out_dir dangling is a dangling symlink \(to nowhere\)" \
  "$ULYSSES" train train.yaml out_dir=dangling
expect_error "out_dir is empty" "^ulysses train: error: out_dir is empty" "$ULYSSES" train train.yaml out_dir=
mkdir -p etc && echo "root:x:0:0" > etc/passwd
for extra in "" overwrite=true; do
  expect_error "out_dir a foreign non-empty folder ${extra:-}" \
    "^ulysses train: error: out_dir etc is a folder that holds other files \(e.g. 'passwd'\) and no run of ours" \
    "$ULYSSES" train train.yaml out_dir=etc $extra
done
[ "$(ls etc)" = passwd ] && pass "nothing written into the foreign folder" || fail "files written into the foreign folder: $(ls etc)"
mkdir -p empty_dir && "$ULYSSES" train train.yaml out_dir=empty_dir > e.log 2>&1 && pass "an empty existing folder is fine" \
  || { fail "an empty existing folder"; tail -3 e.log; }

# ---- class 3: a stable loss. Every lm_head row the same and the final norm's weights at
# 1e15: every logit equal and ~1e30 (finite), so the loss of each token is ln V exactly
# (it was 0: ln V lost in rounding 1e30 + ln V) ----
F=$ROOT/fixtures/gqa
mkdir -p huge && cp "$F/model/config.json" huge/ && python3 - "$F/model/model.safetensors" huge/model.safetensors <<'PY'
import json, struct, sys
import numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
data = bytearray(b[8 + n:])
def put(name, arr):
    s, e = h[name]['data_offsets']
    data[s:e] = arr.astype(np.float32).tobytes()
V, H = h['lm_head.weight']['shape']
put('model.norm.weight', np.full(H, 1e15))
w = np.zeros((V, H)); w[:, 0] = 1e15  # one nonzero product per logit: equal bit for bit whatever the GEMM's order
put('lm_head.weight', w)
open(sys.argv[2], 'wb').write(b[:8 + n] + bytes(data))
PY
if "$ULYSSES" loss-grad --model huge --batch "$F/batch.safetensors" --out huge.st > huge.log 2>&1; then
  python3 - huge.st 160 <<'PY' && pass "all logits equal at ~1e30: the loss is ln V" || fail "all logits equal at ~1e30: the loss is not ln V"
import json, math, struct, sys
import numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
s, e = h['loss']['data_offsets']
loss = float(np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32 if h['loss']['dtype'] == 'F32' else np.float64)[0])
print('loss', loss, 'ln V', math.log(int(sys.argv[2])))
sys.exit(0 if abs(loss - math.log(int(sys.argv[2]))) < 1e-4 else 1)
PY
else
  grep -q "error:.*non-finite" huge.log && pass "huge logits: refused as non-finite" || { fail "huge logits: loss-grad failed"; tail -3 huge.log; }
fi

finish
