#!/usr/bin/env bash
# Hostile input (issue 14; docs/reliability.md): out-of-range numbers, oversized or
# self-multiplying inputs, paths that leave their folder, a resume that would change
# the maths, a full disk under metrics.jsonl. Each: one clear line, non-zero exit,
# nothing half-written.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"
F=$ROOT/fixtures/gqa

"$ULYSSES" prepare --input "$ROOT/README.md" --out data --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
write_tiny_model model.json
cat > train.yaml <<'YAML'
model_config: model.json
data:
  train: data
  seq_len: 32
batch_size: 1
steps: 4
log_every: 100
YAML

# ---- numbers out of range: one rule per key or option, stated once (core/limits.h) ----
LG=("$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out o.st)
# (--sp 0 is all ranks and --tiled-loss 0 is off, as sp: 0 and memory.tiled_loss: 0 in a train config.)
expect_error "--sp -1" "--sp must be in \[0, 1048576\] \(0 = all ranks\), got -1" "${LG[@]}" --sp -1
expect_error "--tiled-loss -1" "--tiled-loss must be in \[0, 1073741824\]" "${LG[@]}" --tiled-loss=-1
expect_error "--memory-limit -3" "--memory-limit must be in \(0, 1048576\] \(GiB\), got -3" "${LG[@]}" --memory-limit -3
expect_error "--layers 1000000" "^ulysses bench: error: --layers must be in \[1, 1024\] \(layers\), got 1000000" \
  "$ULYSSES" bench --shape tiny --layers 1000000
expect_error "an absurd --seq, before allocating" "^ulysses bench: error: --seq must be in \[1, 1073741824\] \(tokens per sequence\), got 100000000000" \
  "$ULYSSES" bench --shape tiny --seq 100000000000
expect_error "a step too large for host memory, before allocating" "^ulysses bench: error: a step of 1125899906842624 tokens needs about .* of host memory for its token arrays alone \(64 bytes a token\); this host has .* available" \
  "$ULYSSES" bench --shape tiny --seq 1073741824 --batch 1048576
expect_error "an absurd --seq for plan" "^ulysses plan: error: --seq must be in \[1, 1073741824\]" "$ULYSSES" plan --shape tiny --seq -5
expect_error "a huge --threads" "^ulysses prepare: error: --threads must be in \[0, [0-9]+\] \(0 = all cores; at most 4 x this host's hardware threads\), got 100000000" \
  "$ULYSSES" prepare --input "$ROOT/README.md" --out d_threads --threads 100000000
grep -q "threads" "$TMP/stderr" && [ ! -e d_threads/manifest.json ] && pass "nothing prepared with a refused --threads" || fail "nothing prepared with a refused --threads"
for kv in "optimizer.beta1=1.5:'optimizer.beta1' must be in \[0, 1\) \(a moment's decay rate\), got 1.5" \
          "optimizer.beta2=1:'optimizer.beta2' must be in \[0, 1\)" \
          "optimizer.eps=0:'optimizer.eps' must be in \(0, \.\.\.\) \(positive\), got 0" \
          "optimizer.grad_clip=-1:'optimizer.grad_clip' must be in \[0, \.\.\.\) \(a gradient norm; 0 = off\), got -1" \
          "optimizer.lr=-0.1:'optimizer.lr' must be in \[0, \.\.\.\) \(non-negative\), got -0.1" \
          "data.seq_len=0:'data.seq_len' must be in \[1, 1073741824\]" \
          "sp=-1:'sp' must be in \[0, 1048576\] \(0 = all ranks\), got -1" \
          "batch_size=1048576:batch_size x grad_accum must be in \[1, 1048576\]"; do
  [ "${kv%%:*}" = "batch_size=1048576" ] && extra=grad_accum=2 || extra=steps=4
  expect_error "train ${kv%%:*}" "${kv#*:}" "$ULYSSES" train train.yaml "${kv%%:*}" "$extra" out_dir=bad
done
grep -q "batch_size x grad_accum" "$TMP/stderr" && [ ! -e bad ] && pass "no run folder made by a refused config" \
  || fail "no run folder made by a refused config"

# ---- sizes bounded before allocation ----
python3 -c "import json; c=json.load(open('model.json')); c['num_hidden_layers']=10**6; json.dump(c, open('layers.json','w'))"
start=$(date +%s)
expect_error "a config with 10^6 layers" "layers.json: field 'num_hidden_layers' must be in \[1, 1024\] \(layers\), got 1000000" \
  "$ULYSSES" train train.yaml model_config=layers.json out_dir=bad
grep -q "num_hidden_layers" "$TMP/stderr" && [ $(( $(date +%s) - start )) -le 5 ] && pass "10^6 layers refused at once" \
  || fail "10^6 layers refused at once (after $(( $(date +%s) - start )) s)"
python3 -c "import json; c=json.load(open('model.json')); c['hidden_size']=131072; c['intermediate_size']=524288; c['num_hidden_layers']=1024; c['head_dim']=64; json.dump(c, open('huge.json','w'))"
mkdir -p huge && cp huge.json huge/config.json
expect_error "a model over the parameter limit" "config.json: the shape makes [0-9]+ parameters, over the limit of 4398046511104" \
  "$ULYSSES" plan --model huge --seq 16
{ echo 'a: &a ["x","x","x","x","x","x","x","x","x","x"]'
  prev=a; for i in b c d e f g h i j k; do echo "$i: &$i [*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev,*$prev]"; prev=$i; done
} > bomb.yaml
# A safety net should the budget break: 4 GB of address space (not under ASan, whose shadow memory needs more).
vlimit="ulimit -v 4000000;"; ldd "$ULYSSES" 2>/dev/null | grep -q libasan && vlimit=""
expect_error "a YAML alias bomb" "bomb.yaml: the YAML expands to more than 1048576 nodes" \
  bash -c "$vlimit exec \"$ULYSSES\" train bomb.yaml"
expect_error "tokenize --tokenizer /dev/zero" "/dev/zero: the tokenizer is not a regular file but a device or socket" \
  bash -c "echo hi | \"$ULYSSES\" tokenize --tokenizer /dev/zero"
mkfifo fifo.json
expect_error "endless stdin for tokenize" "^ulysses tokenize: error: stdin holds more than 1024 MiB" \
  bash -c "yes | \"$ULYSSES\" tokenize"
expect_error "a FIFO as tokenizer.json" "fifo.json: the tokenizer is not a regular file but a FIFO" \
  bash -c "echo hi | \"$ULYSSES\" tokenize --tokenizer fifo.json"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' > big.yaml
expect_error "an oversized YAML" "big.yaml: the training config is 16777217 bytes, more than the 16777216-byte limit" \
  "$ULYSSES" train big.yaml

# ---- one name, one tensor ----
mkdir -p dup && cp "$F/model/config.json" dup/
python3 - "$F/model/model.safetensors" dup/model.safetensors <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
text = data[8:8 + n].decode().rstrip()
h = json.loads(text)
name = "model.norm.weight"
entry = json.dumps({name: h[name]})[1:-1]
text = "{" + entry + ", " + text[1:]  # the same name twice; json.loads would keep the last
hb = text.encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + data[8 + n:])
PY
expect_error "a tensor named twice in a safetensors header" "dup/model.safetensors: the header lists tensor 'model.norm.weight' twice" \
  "$ULYSSES" loss-grad --model dup --batch "$F/batch.safetensors" --out o.st

# ---- a vocabulary smaller than the data's, refused at the start ----
python3 -c "import json; c=json.load(open('model.json')); c['vocab_size']=100; json.dump(c, open('small_vocab.json','w'))"
expect_error "model vocabulary smaller than the data's" "train-00000.tokens: holds token id [0-9]+ \(tokenizer 'byte', vocab 258\) but the model's vocab_size is 100" \
  "$ULYSSES" train train.yaml model_config=small_vocab.json out_dir=vocab
grep -q "vocab_size is 100" "$TMP/stderr" && [ ! -s vocab/metrics.jsonl ] && pass "no step run with the small vocabulary" \
  || fail "no step run with the small vocabulary"

# ---- paths read from files stay in their folder ----
for entry in "../x.tokens" "/etc/passwd"; do
  rm -rf esc && cp -r data esc
  python3 - esc/manifest.json "$entry" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["train"][0]["file"] = sys.argv[2]; json.dump(m, open(sys.argv[1], "w"))
PY
  expect_error "a manifest entry '$entry'" "esc/manifest.json: a 'train' shard entry names '$entry', which is not a file in esc" \
    "$ULYSSES" train train.yaml data.train=esc out_dir="esc_run"
done
"$ULYSSES" train train.yaml out_dir=run checkpoint_every=2 > run.log 2>&1 || { fail "a short run"; tail -3 run.log; }
cp -r run run_escape && rm -f run_escape/run.lock
echo "../../run/checkpoints/step-0000004" > run_escape/checkpoints/latest
expect_error "checkpoints/latest pointing outside" "run_escape/checkpoints/latest: the latest checkpoint names '../../run/checkpoints/step-0000004', which is not a file in" \
  "$ULYSSES" train train.yaml out_dir=run_escape resume=true steps=6

echo keep > keep.txt && ln -s keep.txt link.png
expect_error "plot -o onto a symlink" "link.png exists and is not a regular file \(a symbolic link\); nothing was written" \
  "$ULYSSES" plot run/metrics.jsonl -o link.png
[ "$(cat keep.txt)" = keep ] && [ -L link.png ] && pass "the symlink and its target are untouched" \
  || fail "the symlink and its target are untouched"
cp -r run run_fifo && rm -f run_fifo/run.lock run_fifo/metrics.jsonl && mkfifo run_fifo/metrics.jsonl
expect_error "a FIFO as metrics.jsonl on resume (no hang)" "run_fifo/metrics.jsonl: the metrics log is not a regular file but a FIFO" \
  "$ULYSSES" train train.yaml out_dir=run_fifo resume=true steps=6

# ---- a resume that would change the maths is refused, naming the key and both values ----
sed 's/"rope_theta": 10000.0/"rope_theta": 500000.0/' model.json > theta.json
expect_error "resume with another rope_theta" "resume would change the run's maths: 'model.rope_theta' is 500000.0 in this run but was 10000.0 in run/checkpoints/step-0000004" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=6 model_config=theta.json
sed 's/"rms_norm_eps": 1e-5/"rms_norm_eps": 1e-6/' model.json > eps.json
expect_error "resume with another rms_norm_eps" "'model.rms_norm_eps' is 1e-06 in this run but was 1e-05" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=6 model_config=eps.json
expect_error "resume with another learning rate" "'training.optimizer.lr' is 0.5 in this run but was 0.0003" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=6 optimizer.lr=0.5
"$ULYSSES" prepare --input "$ROOT/docs" --out data2 --quiet > /dev/null 2>&1
expect_error "resume on other data" "resume would change the run's maths: 'data.train.shards\[0\].(tokens|documents|hash)' is .* in this run but was" \
  "$ULYSSES" train train.yaml out_dir=run resume=true steps=6 data.train=data2
"$ULYSSES" train train.yaml out_dir=run resume=true steps=6 > resume_ok.log 2>&1 \
  && grep -q "resumed from run/checkpoints/step-0000004" resume_ok.log \
  && pass "resume with the same maths (and more steps) goes on" || { fail "resume with the same maths"; tail -3 resume_ok.log; }

# ---- misleading messages ----
expect_error "a missing config file after an override" "^ulysses train: error: 'missing.yaml' does not exist \(no such config file\); the config file comes first" \
  "$ULYSSES" train steps=3 missing.yaml
printf 'model_config: model.json\ndata:\n  train: data\nout_dir: r\xa9n\n' > latin1.yaml
expect_error "a config value that is not UTF-8 (found by fuzzing: was an internal error)" \
  "latin1.yaml: key 'out_dir' holds bytes that are not UTF-8 text" "$ULYSSES" train latin1.yaml
expect_error "a missing config file" "missing.yaml: cannot open training config \(No such file or directory\)" \
  "$ULYSSES" train missing.yaml

# ---- a full disk under metrics.jsonl: a clear error, not a silently short log ----
( trap '' XFSZ; ulimit -f 8; "$ULYSSES" train train.yaml out_dir=full steps=200 > full.log 2>&1 ); rc=$?
if [ $rc -ne 0 ] && one_error_line full.log && grep -q "error: full/metrics.jsonl: write failed (File too large); is the disk full?" full.log; then
  pass "a failed metrics write stops the run with one line (exit $rc)"
else fail "a failed metrics write (exit $rc)"; tail -3 full.log; fi

finish
