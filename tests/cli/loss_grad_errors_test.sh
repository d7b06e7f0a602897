#!/usr/bin/env bash
# Bad input to loss-grad: one clear line naming the file and the problem, and a
# non-zero exit (on every rank under mpirun, never a hang).
source "$(dirname "$0")/lib.sh" "$@"
F=$ROOT/fixtures/gqa
cp -r "$F/model" "$TMP/model"

expect_error "missing model folder" "nope.*(no|missing|not)" \
  "$ULYSSES" loss-grad --model "$TMP/nope" --batch "$F/batch.safetensors" --out "$TMP/o.st"
expect_error "missing batch file" "missing.safetensors" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$TMP/missing.safetensors" --out "$TMP/o.st"

mkdir -p "$TMP/trunc" && cp "$F/model/config.json" "$TMP/trunc/"
head -c 5000 "$F/model/model.safetensors" > "$TMP/trunc/model.safetensors"
expect_error "truncated safetensors" "model.safetensors.*(truncat|overrun)" \
  "$ULYSSES" loss-grad --model "$TMP/trunc" --batch "$F/batch.safetensors" --out "$TMP/o.st"

# A header whose offsets run past the end of the file (header rewritten in place).
mkdir -p "$TMP/overrun" && cp "$F/model/config.json" "$TMP/overrun/"
python3 - "$F/model/model.safetensors" "$TMP/overrun/model.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
name = next(k for k in h if k != "__metadata__")
b, e = h[name]["data_offsets"]
h[name]["data_offsets"] = [b + 10**7, e + 10**7]
hb = json.dumps(h).encode()
hb += b" " * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + data[8 + n:])
PY
expect_error "header offsets overrun" "model.safetensors.*overrun" \
  "$ULYSSES" loss-grad --model "$TMP/overrun" --batch "$F/batch.safetensors" --out "$TMP/o.st"

# config.json says something the weights do not have.
mkdir -p "$TMP/shape" && cp "$F/model/model.safetensors" "$TMP/shape/"
python3 -c "import json,sys; c=json.load(open('$F/model/config.json')); c['intermediate_size']+=8; json.dump(c,open('$TMP/shape/config.json','w'))"
expect_error "shape does not match config.json" "shape.*config.json" \
  "$ULYSSES" loss-grad --model "$TMP/shape" --batch "$F/batch.safetensors" --out "$TMP/o.st"

mkdir -p "$TMP/arch" && cp "$F/model/model.safetensors" "$TMP/arch/"
python3 -c "import json; c=json.load(open('$F/model/config.json')); c['architectures']=['GemmaForCausalLM']; c['model_type']='gemma'; json.dump(c,open('$TMP/arch/config.json','w'))"
expect_error "unsupported architecture" "config.json.*Gemma.*not supported.*LlamaForCausalLM, MistralForCausalLM" \
  "$ULYSSES" loss-grad --model "$TMP/arch" --batch "$F/batch.safetensors" --out "$TMP/o.st"

mkdir -p "$TMP/dtype" && cp "$F/model/config.json" "$TMP/dtype/"
python3 - "$F/model/model.safetensors" "$TMP/dtype/model.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
k = "model.norm.weight"
t[k] = t[k].astype("int32")
save_file(t, sys.argv[2], metadata={"format": "pt"})
PY
expect_error "weight dtype not float" "model.norm.weight.*(int32|dtype)" \
  "$ULYSSES" loss-grad --model "$TMP/dtype" --batch "$F/batch.safetensors" --out "$TMP/o.st"

# --out never replaces what is not a regular file (a symlink, a directory, a FIFO): as root a
# rename over /dev/null would replace the device. (Never tried on /dev/null itself here.)
echo keep > "$TMP/target.txt"
ln -s "$TMP/target.txt" "$TMP/link.st"
mkdir -p "$TMP/dir.st"
mkfifo "$TMP/fifo.st"
for kind in "link.st:a symbolic link" "dir.st:a directory" "fifo.st:a FIFO"; do
  expect_error "--out onto ${kind#*:}" "${kind%%:*} exists and is not a regular file \\(${kind#*:}\\); nothing was written" \
    "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/${kind%%:*}"
done
[ -L "$TMP/link.st" ] && [ "$(cat "$TMP/target.txt")" = keep ] && [ -d "$TMP/dir.st" ] && [ -p "$TMP/fifo.st" ] \
  && pass "the symlink, its target, the directory and the FIFO are untouched" \
  || fail "the symlink, its target, the directory and the FIFO are untouched"

# Inputs that are not regular files: a directory named config.json, a FIFO as the weights
# (which would block forever if opened for reading).
mkdir -p "$TMP/dirconf/config.json" && cp "$F/model/model.safetensors" "$TMP/dirconf/"
expect_error "a directory as config.json" "config.json: the config is not a regular file but a directory" \
  "$ULYSSES" loss-grad --model "$TMP/dirconf" --batch "$F/batch.safetensors" --out "$TMP/o.st"
mkdir -p "$TMP/fifomodel" && cp "$F/model/config.json" "$TMP/fifomodel/" && mkfifo "$TMP/fifomodel/model.safetensors"
expect_error "a FIFO as the weights" "model.safetensors: not a regular file \\(a FIFO\\)" \
  "$ULYSSES" loss-grad --model "$TMP/fifomodel" --batch "$F/batch.safetensors" --out "$TMP/o.st"

expect_error "a NaN memory limit" "--memory-limit expects a finite number of GiB, got 'nan'" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --memory-limit nan

# A NaN in the weights: refused with the loss and the first bad gradient named, nothing written.
mkdir -p "$TMP/nan" && cp "$F/model/config.json" "$TMP/nan/"
python3 - "$F/model/model.safetensors" "$TMP/nan/model.safetensors" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
k = "model.layers.0.mlp.down_proj.weight"
t[k] = t[k].copy()
t[k].flat[0] = np.nan
save_file(t, sys.argv[2], metadata={"format": "pt"})
PY
rm -f "$TMP/nan.st"
expect_error "NaN weights are refused, not written" "loss is NaN and [0-9]+ gradients hold NaN.*nothing was written" \
  "$ULYSSES" loss-grad --model "$TMP/nan" --batch "$F/batch.safetensors" --out "$TMP/nan.st"
[ ! -e "$TMP/nan.st" ] && pass "no output file from NaN weights" || fail "no output file from NaN weights"

python3 - "$TMP/bigid.safetensors" <<'PY'
import sys, numpy as np
from safetensors.numpy import save_file
ids = np.arange(32, dtype=np.int64).reshape(1, 32); ids[0, 5] = 100000
save_file({"input_ids": ids}, sys.argv[1])
PY
expect_error "token id beyond the vocabulary" "bigid.safetensors.*input_ids.*100000.*vocabulary" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$TMP/bigid.safetensors" --out "$TMP/o.st"

expect_error "unknown option suggests the nearest" "unknown option --sp-degree.*did you mean --sp" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --sp-degree 2

# Degrees the heads cannot be split over: every rank fails fast.
expect_error "heads % P != 0 under mpirun -np 3" "degree 3 does not divide num_attention_heads 4.*valid degrees: 1, 2, 4" \
  $MPIRUN -np 3 "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st"
if [ "$(grep -o 'degree 3 does not divide' "$TMP/stderr" | wc -l)" -ge 3 ]; then pass "the message comes from every rank"
else fail "the message comes from every rank"; fi
python3 - "$TMP/short.safetensors" <<'PY'
import sys, numpy as np
from safetensors.numpy import save_file
save_file({"input_ids": np.arange(2, dtype=np.int64).reshape(1, 2)}, sys.argv[1])
PY
expect_error "more ranks than tokens" "2 tokens cannot be split over 4" \
  $MPIRUN -np 4 "$ULYSSES" loss-grad --model "$F/model" --batch "$TMP/short.safetensors" --out "$TMP/o.st"
expect_error "sp that does not divide the world" "sp.*3.*(divide|valid)" \
  $MPIRUN -np 4 "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --sp 3

# --comm: NCCL moves device buffers only; an unknown transport names the valid ones.
expect_error "--comm nccl on the cpu backend" "comm nccl.*needs the cuda backend" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --comm nccl
expect_error "unknown --comm" "--comm takes mpi or nccl, got 'gloo'" \
  "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --comm gloo

# No GPU here (CI): --backend cuda says so clearly, on every rank.
if ! nvidia-smi -L > /dev/null 2>&1; then
  expect_error "--backend cuda without a GPU" "(no CUDA device visible|has no CUDA backend)" \
    $MPIRUN -np 2 "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/o.st" --backend cuda
fi

# And the good path writes the contract's output.
if "$ULYSSES" loss-grad --model "$F/model" --batch "$F/batch.safetensors" --out "$TMP/ok.st" > /dev/null 2>&1 &&
   python3 -c "
from safetensors.numpy import load_file
t = load_file('$TMP/ok.st')
assert t['loss'].shape == (1,) and t['loss'].dtype.name == 'float32'
assert 'grad.model.embed_tokens.weight' in t and all(v.dtype.name == 'float32' for v in t.values())
"; then pass "good input writes loss and grad.<name>"; else fail "good input writes loss and grad.<name>"; fi
finish
