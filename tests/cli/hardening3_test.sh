#!/usr/bin/env bash
# Hostile input, third round (issue 28's last acceptance row; found by scripts/hostile_probe.py):
# the error prefix once, empty option values and stray words refused, numbers checked before the
# type they become, bounded generation and template rendering, inputs checked when given.
# Every expect_error also checks that the line carries its prefix once (tests/cli/lib.sh).
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"
MODEL="$ROOT/fixtures/generate/model"
SMALL="$ROOT/fixtures/gqa/model"

# ---- the prefix once: messages that name their command are not prefixed twice ----
expect_error "an integer option given a word" "^ulysses bench: error: option --steps expects an integer, got 'many'$" \
  "$ULYSSES" bench --shape tiny --steps many
expect_error "a missing required option" "^ulysses loss-grad: error: missing required option --batch" \
  "$ULYSSES" loss-grad --model "$SMALL" --out o.safetensors
expect_error "an out-of-range plot size" "^ulysses plot: error: --width must be in \[200, 8000\]" \
  "$ULYSSES" plot m.jsonl --out p.png --width 1
printf '{"step": 1, "loss": 1e308}\n{"step": 2, "loss": -1e308}\n' > wide.jsonl
expect_error "losses whose range is not a double (was NaN pixels: UBSan's overflow)" \
  "^ulysses plot: error: the losses span -1e\+308 to 1e\+308, a range too wide to draw" \
  "$ULYSSES" plot wide.jsonl --out wide.png

# ---- empty values are mistakes, not defaults ----
expect_error "--steps= (nothing after =)" "option --steps was given an empty value" \
  "$ULYSSES" bench --shape tiny --steps=
expect_error "--seq '' (an empty variable)" "option --seq was given an empty value" \
  "$ULYSSES" plan --shape tiny --seq ''
expect_error "--tokenizer ''" "option --tokenizer was given an empty value" \
  "$ULYSSES" tokenize --tokenizer '' < /dev/null
expect_error "--tiled-mlp= (an optional value given empty)" "option --tiled-mlp was given an empty value" \
  "$ULYSSES" plan --shape tiny --seq 64 --tiled-mlp=
"$ULYSSES" generate --model "$MODEL" --prompt '' --add-special-tokens --max-new-tokens 1 > /dev/null 2>&1 \
  && pass "--prompt '' stays allowed (a BOS alone)" || fail "--prompt '' with --add-special-tokens was refused"

# ---- stray words are refused, not ignored ----
expect_error "a stray word after generate's options" "unexpected argument 'extra'; this command takes options only" \
  "$ULYSSES" generate --model "$MODEL" --prompt hi --max-new-tokens 1 extra
expect_error "a lone -- for plan" "unexpected argument '--'" "$ULYSSES" plan --shape tiny --seq 64 --
expect_error "a single-dash option for bench" "unexpected argument '-x' \(options start with --\)" \
  "$ULYSSES" bench --shape tiny -x
expect_error "comm-bench given a file" "unexpected argument '/etc/passwd'" "$ULYSSES" comm-bench /etc/passwd

# ---- numbers checked before the type they become ----
expect_error "generate --max-new-tokens past 2^30" "--max-new-tokens must be in \[1, 1073741824\]" \
  "$ULYSSES" generate --model "$MODEL" --prompt hi --max-new-tokens 2147483648
expect_error "generate --max-new-tokens 0" "--max-new-tokens must be in \[1, 1073741824\]" \
  "$ULYSSES" generate --model "$MODEL" --prompt hi --max-new-tokens 0
expect_error "a KV cache larger than the host" "the KV cache for [0-9]+ tokens needs [0-9.]+ GiB of host memory" \
  "$ULYSSES" generate --model "$MODEL" --prompt hi --max-new-tokens 1073741824
echo '[4294967296]' | expect_error "tokenize --decode: an id past int32" "id 4294967296 must be in \[0, 2147483647\]" \
  "$ULYSSES" tokenize --tokenizer "$MODEL" --decode
echo '[-1]' | expect_error "tokenize --decode: a negative id" "id must be in \[0, 2147483647\].*got -1" \
  "$ULYSSES" tokenize --tokenizer "$MODEL" --decode
echo '[18446744073709551615]' | expect_error "tokenize --decode: an id past int64" "id 18446744073709551615 must be in" \
  "$ULYSSES" tokenize --tokenizer "$MODEL" --decode
expect_error "generate --prompt-ids past int32" "--prompt-ids: id must be in \[0, 2147483647\].*got 4294967296" \
  "$ULYSSES" generate --model "$MODEL" --prompt-ids 1,4294967296 --max-new-tokens 1
printf '{"step": 1, "loss": 2}\n{"step": 2, "loss": 1}\n' > m.jsonl
expect_error "plot --width that wraps to 200 as an int" "--width must be in \[200, 8000\].*got 4294967496" \
  "$ULYSSES" plot m.jsonl --out p.png --width 4294967496
expect_error "a real option in hexadecimal" "option --temperature expects a finite number, got '0x10'" \
  "$ULYSSES" generate --model "$MODEL" --prompt hi --temperature 0x10
mkdir -p eps && cp "$MODEL"/* eps/
for eps in 0 1e-40 2; do
  python3 -c "
import json; c = json.load(open('$MODEL/config.json')); c['rms_norm_eps'] = $eps
json.dump(c, open('eps/config.json', 'w'))"
  expect_error "rms_norm_eps $eps" "rms_norm_eps.* must be in \[1e-30, 1\]" \
    "$ULYSSES" generate --model eps --prompt hi --max-new-tokens 1
done

# ---- options read in one mode only are refused in the others ----
expect_error "bench --host-mem-limit without --find-max-seq" "--host-mem-limit is the host budget of --find-max-seq" \
  "$ULYSSES" bench --shape tiny --seq 64 --steps 1 --host-mem-limit nan

# ---- inputs that are not regular files ----
expect_error "plot reads /dev/zero" "/dev/zero.*not a regular file|/dev/zero.*character device" \
  "$ULYSSES" plot /dev/zero --out p.png
mkdir -p adir
expect_error "bench --json onto a folder" "adir" \
  "$ULYSSES" bench --shape tiny --layers 1 --seq 64 --steps 1 --warmup 0 --json adir

# ---- a batch without a target ----
python3 -c "
import json, struct
ids = struct.pack('<8q', *range(1, 9)); lab = struct.pack('<8q', *([-100] * 8))
h = json.dumps({'input_ids': {'dtype': 'I64', 'shape': [1, 8], 'data_offsets': [0, 64]},
                'shift_labels': {'dtype': 'I64', 'shape': [1, 8], 'data_offsets': [64, 128]}}).encode()
h += b' ' * (-len(h) % 8)
open('notargets.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + ids + lab)"
expect_error "loss-grad on a batch with no target" "no position has a target.*0/0" \
  "$ULYSSES" loss-grad --model "$SMALL" --batch notargets.safetensors --out o.safetensors
[ ! -e o.safetensors ] && pass "nothing written for the batch without targets" || fail "o.safetensors was written"

# ---- chat templates: integer overflow refused, CPU time bounded ----
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n' > chat.jsonl
tpl() { printf '%s' "$1" > t.jinja; }
tpl '{{ (-9223372036854775807 - 1) % -1 }}{{ messages[0].content }}'
"$ULYSSES" prepare --input chat.jsonl --out p1 --tokenizer "$MODEL" --chat-template t.jinja --quiet > /dev/null 2>&1 \
  && pass "the smallest integer % -1 is 0 (no SIGFPE)" || fail "the smallest integer % -1 did not render"
tpl '{{ (-9223372036854775807 - 1) // -1 }}'
expect_error "the smallest integer // -1" "integer overflow in '-9223372036854775808 // -1'" \
  "$ULYSSES" prepare --input chat.jsonl --out p2 --tokenizer "$MODEL" --chat-template t.jinja --quiet
tpl '{{ 9223372036854775807 + 1 }}'
expect_error "an integer sum past int64" "integer overflow in '9223372036854775807 \+ 1'" \
  "$ULYSSES" prepare --input chat.jsonl --out p3 --tokenizer "$MODEL" --chat-template t.jinja --quiet
tpl '{% for i in range(1000000) %}{% set s = "x" * 60000000 %}{% endfor %}'
start=$(date +%s)
expect_error "a template whose few steps take minutes" "ran for more than 4 s of CPU time" \
  "$ULYSSES" prepare --input chat.jsonl --out p4 --tokenizer "$MODEL" --chat-template t.jinja --quiet
[ $(( $(date +%s) - start )) -lt 60 ] && pass "stopped within a minute" || fail "the CPU-time cap took over a minute"
# The bound covers the whole run, not each record: the first refusal stops the run (no other
# record starts, the renders in flight stop), where 10 s of CPU per record of a 20-record file
# took minutes (the hostile probe's finding): one render's bound (2^20 steps, 4 s of CPU).
for i in $(seq 200); do cat chat.jsonl; done > many.jsonl
tpl '{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}'
start=$(date +%s)
expect_error "a runaway template over a file of 200 records" \
  "^ulysses prepare: error: many.jsonl:[0-9]+: t.jinja: the template (took more than 1048576 evaluation steps|ran for more than 4 s of CPU time)" \
  "$ULYSSES" prepare --input many.jsonl --out p5 --tokenizer "$MODEL" --chat-template t.jinja --quiet --threads 2
[ $(( $(date +%s) - start )) -lt 30 ] && pass "the whole run stopped within 30 s" || fail "the runaway template ran $(( $(date +%s) - start )) s"

# ---- prepare's counts: decimal notation only (stod read 0x10 as 16) ----
for opt in chunk-bytes shard-tokens; do
  expect_error "prepare --$opt 0x10" "^ulysses prepare: error: --$opt expects a positive count such as 100M, got '0x10'" \
    "$ULYSSES" prepare --input chat.jsonl --out p6 --tokenizer "$MODEL" --$opt 0x10 --quiet
done
expect_error "prepare --val-fraction 0x0.1" "^ulysses prepare: error: --val-fraction expects a number in \[0, 1\), got '0x0.1'" \
  "$ULYSSES" prepare --input chat.jsonl --out p6 --tokenizer "$MODEL" --val-fraction 0x0.1 --quiet

# ---- a message quoting an input at length stays a readable line (the probe's 2 MB model_type) ----
mkdir -p longtype && cp "$MODEL"/* longtype/
python3 -c "
import json; p = 'longtype/config.json'; c = json.load(open(p)); c['model_type'] = 'x' * (2 << 20); json.dump(c, open(p, 'w'))"
expect_error "a 2 MB model_type" "^ulysses generate: error: .*xxxx \.\.\. \([0-9]+ bytes left out\) \.\.\. xxxx" \
  "$ULYSSES" generate --model longtype --prompt hi --max-new-tokens 1
[ "$(wc -c < "$TMP/stderr")" -lt 4096 ] && pass "its line is under 4 KiB" || fail "a line of $(wc -c < "$TMP/stderr") bytes"

expect_error "an unknown command of 5,000 bytes" "^ulysses: error: unknown command 'x{60}\.\.\.'" \
  "$ULYSSES" "$(printf 'x%.0s' $(seq 5000))"
[ "$(wc -c < "$TMP/stderr")" -lt 200 ] && pass "its line is short" || fail "a line of $(wc -c < "$TMP/stderr") bytes"

# ---- a RoPE scaling factor has a stated range (1e308 divided every position to ~0) ----
mkdir -p bigfactor && cp "$MODEL"/* bigfactor/
python3 -c "
import json; p = 'bigfactor/config.json'; c = json.load(open(p))
c['rope_scaling'] = {'rope_type': 'dynamic', 'factor': 1e308}; c.pop('rope_parameters', None); json.dump(c, open(p, 'w'))"
expect_error "rope_scaling.factor 1e308" "field 'rope_scaling.factor' must be in \(0, 1024\] \(a RoPE scaling factor\), got 1e\+308" \
  "$ULYSSES" generate --model bigfactor --prompt hi --max-new-tokens 1

# ---- data.val: checked at start-up, with or without evaluation ----
"$ULYSSES" prepare --input "$ROOT/README.md" --out data --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus" || fail "prepare a corpus"
head -c 5000 /dev/urandom > garbage.tokens
write_tiny_model model.json
printf 'model_config: model.json\ndata: {train: data, seq_len: 32}\nsteps: 1\ntensorboard: false\n' > train.yaml
expect_error "data.val garbage without evaluation" "data.val: .*garbage.tokens" \
  "$ULYSSES" train train.yaml data.val=garbage.tokens out_dir=run1
[ ! -e run1/checkpoints ] && pass "no run started on a garbage data.val" || fail "run1 trained"
expect_error "data.val missing, with evaluation" "data.val: .*no_such" \
  "$ULYSSES" train train.yaml data.val=no_such eval_every=1 out_dir=run2
expect_error "train --steps ''" "steps" "$ULYSSES" train train.yaml out_dir=run3 --steps ''

finish
