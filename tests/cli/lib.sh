# Shared helpers for the command-line tests (sourced).
# Usage in a test: source "$(dirname "$0")/lib.sh" "$@"
set -u
ULYSSES=$1
ROOT=$2
TMP=$(mktemp -d /tmp/ulysses_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
PASSES=0
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMP_NUM_THREADS=1

pass() { PASSES=$((PASSES + 1)); echo "ok   $1"; }
fail() { FAILS=$((FAILS + 1)); echo "FAIL $1"; }

# expect_error NAME PATTERN CMD...: the command must exit non-zero, print one
# "error:" line on stderr matching PATTERN, with its prefix once ("ulysses CMD: error: "
# not followed by "CMD:" or another "error:"), and finish within 120 s (no hang).
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local err="$TMP/stderr"
  timeout 120 "$@" > "$TMP/stdout" 2> "$err"
  local rc=$?
  if [ $rc -eq 0 ]; then fail "$name: exited 0"; return; fi
  if [ $rc -eq 124 ]; then fail "$name: hung (killed after 120 s)"; return; fi
  if ! grep -q -E -- "$pattern" "$err"; then
    fail "$name: stderr does not match /$pattern/:"; sed 's/^/     /' "$err" | head -5; return
  fi
  local lines
  lines=$(grep -c "error:" "$err")
  if [ "$lines" -lt 1 ]; then fail "$name: no 'error:' line"; return; fi
  if ! prefix_once "$err"; then
    fail "$name: the error prefix is repeated:"; grep "error:" "$err" | head -2 | sed 's/^/     /'; return
  fi
  pass "$name (exit $rc)"
}

# prefix_once FILE: no line of FILE repeats the error prefix: "ulysses generate: error: generate: ..."
# or "error: ... error:" is a refusal whose message was wrapped twice. Tests that read a log
# themselves (several ranks, no expect_error) check it with one_error_line.
prefix_once() {
  ! grep -q -E -- "error:.*error:|^ulysses ([a-z-]+): error: (ulysses )?\1:" "$1"
}

# one_error_line FILE: exactly one line with "error:", its prefix once.
one_error_line() {
  [ "$(grep -c 'error:' "$1")" = 1 ] && prefix_once "$1"
}

# write_tiny_model FILE: the small random-init Llama config.json the training tests use
# (byte-level vocabulary: 256 bytes + 2 specials).
write_tiny_model() {
  cat > "$1" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "torch_dtype": "float32"}
JSON
}

# check_against_reference NAME OUT [REF]: a loss-grad output's loss within 1e-5 and every gradient
# within 1e-4 (relative norms) of the float64 reference REF (default: $F/reference.safetensors,
# F being the test's fixture folder); prints the worst differences.
check_against_reference() {
  if python3 - "$2" "${3:-$F/reference.safetensors}" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
out, ref = load_file(sys.argv[1]), load_file(sys.argv[2])
rel = lambda a, b: float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))
assert rel(out["loss"], ref["loss"]) <= 1e-5, (out["loss"], ref["loss"])
worst = max((rel(out[k], ref[k]), k) for k in ref if k.startswith("grad."))
assert worst[0] <= 1e-4, worst
print(f"     loss {rel(out['loss'], ref['loss']):.1e}, worst gradient {worst[0]:.1e} ({worst[1]})")
PY
  then pass "$1"; else fail "$1"; fi
}

finish() {
  echo "$PASSES passed, $FAILS failed"
  [ $FAILS -eq 0 ]
}

# skip_unless_python MODULE...: exit 77 (ctest: skipped) with a visible reason when a
# Python module the test needs is missing.
skip_unless_python() {
  local m
  for m in "$@"; do
    if ! python3 -c "import $m" > /dev/null 2>&1; then
      echo "SKIP: the Python package '$m' is not installed (pip install $*); nothing was checked"
      exit 77
    fi
  done
}
