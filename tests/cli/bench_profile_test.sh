#!/usr/bin/env bash
# ulysses bench --profile on CPU: the table names the op families, and the
# families cover at least 95% of the step (the acceptance bar of the profile);
# --zero and --offload-optimizer place the optimizer, in the step and in the plan.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

run() { "$ULYSSES" bench --shape tiny --seq 256 --steps 1 --warmup 0 --backend cpu "$@"; }

if run --profile --json bench.json > out.txt 2> err.txt; then pass "bench --profile runs"; else
  fail "bench --profile runs"; sed 's/^/     /' err.txt | tail -5; fi
for family in attention mlp "lm_head \+ loss" rmsnorm "qkv projections" embedding optimizer other; do
  grep -q -E "^$family +[0-9]" out.txt && pass "table has '$family'" || fail "table has '$family'"
done
# The JSON line: families with seconds/share/calls that sum to the step, and accounted >= 0.95.
if python3 - out.txt bench.json <<'PY'
import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("BENCH_JSON ")]
assert len(line) == 1, "no BENCH_JSON line"
j = json.loads(line[0][len("BENCH_JSON "):])
p = j["profile"]
assert json.load(open(sys.argv[2]))["profile"] == p, "--json file and BENCH_JSON differ"
acc = p.pop("accounted")
assert acc >= 0.95, f"accounted {acc} < 0.95: {p}"
shares = sum(f["share"] for f in p.values())
assert abs(shares - 1) < 1e-9, f"shares sum to {shares}"
seconds = sum(f["seconds"] for f in p.values())
assert abs(seconds - j["step_time_s"]) < 1e-6 * max(1, j["step_time_s"]), f"{seconds} s vs step {j['step_time_s']}"
assert p["attention"]["calls"] >= 2 * 2, p["attention"]  # forward and backward of each layer
assert abs(acc - (1 - p["other"]["share"])) < 1e-12
print(f"accounted {acc:.4f}")
PY
then pass "profile JSON: shares sum to 1, accounted >= 0.95"; else fail "profile JSON"; fi

# With checkpoints the recompute is its own family; without --profile there is no profile.
run --profile --checkpoint > ckpt.txt 2>&1 && grep -q -E "^recompute +[0-9]" ckpt.txt \
  && grep -q -E "^checkpoint store +[0-9]" ckpt.txt && pass "recompute and checkpoint store families" \
  || fail "recompute and checkpoint store families"
run > plain.txt 2>&1 && ! grep -q '"profile"' plain.txt && ! grep -q "^accounted" plain.txt \
  && pass "no profile without --profile" || fail "no profile without --profile"

# The optimizer's state offloaded to host memory: the step runs, says so, and the plan moves the
# state from the device's optimizer pool to the host's.
run --offload-optimizer --zero 1 > offload.txt 2>&1 && grep -q '"offload_optimizer":true' offload.txt \
  && pass "bench --offload-optimizer --zero 1 runs" || { fail "bench --offload-optimizer"; tail -5 offload.txt; }
if "$ULYSSES" plan --shape tiny --seq 256 --offload-optimizer > plan_off.txt 2>&1 \
   && "$ULYSSES" plan --shape tiny --seq 256 --optimizer > plan_on.txt 2>&1 \
   && grep -q -E "^  optimizer +device +0 B" plan_off.txt && grep -q -E "^  host-optimizer +host +[1-9]" plan_off.txt \
   && grep -q -E "^  optimizer +device +[1-9]" plan_on.txt && grep -q -E "^  host-optimizer +host +0 B" plan_on.txt \
   && grep -q "^optimizer: AdamW state.*in host memory" plan_off.txt && grep -q "^optimizer: AdamW state.*on the device" plan_on.txt \
   && "$ULYSSES" plan --shape tiny --seq 256 --no-optimizer | grep -q "^optimizer: none" \
   && "$ULYSSES" plan --shape tiny --seq 256 > plan_default.txt 2>&1 && cmp -s plan_default.txt plan_on.txt
then pass "plan: AdamW's state on the device by default, in host memory with --offload-optimizer, none with --no-optimizer; every plan says which"; else fail "plan's optimizer state"; fi
expect_error "plan: --optimizer with --no-optimizer" "contradict" "$ULYSSES" plan --shape tiny --seq 256 --optimizer --no-optimizer
expect_error "bench: --zero 4 is refused" "--zero must be in \\[0, 3\\]" \
  "$ULYSSES" bench --shape tiny --seq 256 --backend cpu --zero 4
expect_error "bench: --offload-optimizer without an optimizer" "this step has no optimizer" \
  "$ULYSSES" bench --shape tiny --seq 256 --backend cpu --no-optimizer --offload-optimizer

# bfloat16 gradient buffers: the step runs with AdamW on the device and offloaded, says so, and the
# plan's gradients pool is half the float32 one's plus the float32 scratch of one group.
run --grad-dtype bf16 > g16.txt 2>&1 && grep -q '"grad_dtype":"bfloat16"' g16.txt \
  && run --grad-dtype bf16 --offload-optimizer > g16off.txt 2>&1 && grep -q '"grad_dtype":"bfloat16"' g16off.txt \
  && pass "bench --grad-dtype bf16 runs (device and offloaded AdamW)" || { fail "bench --grad-dtype bf16"; tail -5 g16.txt g16off.txt; }
gradients() { "$ULYSSES" plan --shape tiny --seq 256 "$@" | awk '$1 == "gradients" { print $0 }'; }
if [ -n "$(gradients)" ] && [ "$(gradients)" != "$(gradients --grad-dtype bf16)" ] \
   && "$ULYSSES" plan --shape tiny --seq 256 --grad-dtype bf16 --max-seq --memory-limit 1 | grep -q "grad-dtype=bf16"
then pass "plan counts bfloat16 gradient buffers"; else fail "plan --grad-dtype bf16"; gradients; gradients --grad-dtype bf16; fi
expect_error "bench: an unknown --grad-dtype" "--grad-dtype takes float32 or bfloat16, got 'fp16'" \
  "$ULYSSES" bench --shape tiny --seq 256 --backend cpu --grad-dtype fp16
# LoRA (--lora-r): only the adapters train; the measured peak equals the plan's (bench --dry-run and
# plan), which is below the full step's; what LoRA does not run with is refused in one line.
planned() { awk '$1 == "peak" && $2 == "device" { gsub(/[(]/, "", $5); print $5 }'; }
if run --lora-r 4 --lora-targets q_proj,v_proj,down_proj > lora.txt 2>&1 && grep -q '"lora_r":4' lora.txt; then
  measured=$(python3 -c "import json,sys; print(json.loads([l for l in open('lora.txt') if l.startswith('BENCH_JSON ')][0][11:])['peak_device_bytes'])")
  dry=$(run --lora-r 4 --lora-targets q_proj,v_proj,down_proj --dry-run | planned)
  plan_lora=$("$ULYSSES" plan --shape tiny --seq 256 --lora-r 4 --lora-targets q_proj,v_proj,down_proj | planned)
  plan_full=$("$ULYSSES" plan --shape tiny --seq 256 | planned)
  if [ -n "$measured" ] && [ "$measured" = "$dry" ] && [ "$dry" = "$plan_lora" ] && [ "$plan_lora" -lt "$plan_full" ]; then
    pass "bench --lora-r: measured $measured = planned, below the full step's $plan_full"
  else fail "bench --lora-r: measured '$measured', dry-run '$dry', plan '$plan_lora', full '$plan_full'"; fi
else fail "bench --lora-r runs"; tail -5 lora.txt; fi
expect_error "bench: --lora-alpha without --lora-r" "--lora-alpha and --lora-targets need --lora-r" \
  "$ULYSSES" bench --shape tiny --seq 256 --backend cpu --lora-alpha 8
expect_error "bench: an unknown --lora-targets name" "names 'qproj'" \
  "$ULYSSES" bench --shape tiny --seq 256 --backend cpu --lora-r 4 --lora-targets qproj
expect_error "plan: LoRA with ZeRO" "LoRA with ZeRO stage 2 is not supported yet" \
  "$ULYSSES" plan --shape tiny --seq 256 --lora-r 4 --zero 2
finish
