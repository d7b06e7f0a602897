#!/usr/bin/env bash
# Launch hygiene (and loss.png at the end of a run): an incomplete torchrun environment is refused
# naming the missing variables;
# evaluation without a val split suggests eval_every=0; seq_len above max_position_embeddings
# warns; a second SIGINT ends a run at once.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"
mkdir corpus && cp "$ROOT/README.md" "$ROOT/docs/training.md" corpus/
"$ULYSSES" prepare --input corpus --out data --quiet > /dev/null 2>&1
cat > model.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 258, "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
 "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu"}
JSON
# torchrun's environment without MPI is a TCP world (tests/cli/torchrun_test.sh); an incomplete one is refused.
expect_error "torchrun's environment, incomplete" "WORLD_SIZE=4\) but RANK, MASTER_ADDR, MASTER_PORT are not set" \
  env WORLD_SIZE=4 LOCAL_RANK=0 "$ULYSSES" train model_config=model.json data.train=data
expect_error "evaluation without a val split" "no shards.*eval_every=0" \
  "$ULYSSES" train model_config=model.json data.train=data data.seq_len=16 eval_every=5 steps=2 out_dir=ev
"$ULYSSES" train model_config=model.json data.train=data data.seq_len=64 steps=1 out_dir=long > long.log 2>&1
grep -q "warn] data.seq_len 64 is above the model's max_position_embeddings (32)" long.log \
  && pass "seq_len above max_position_embeddings warns" || { fail "max_position_embeddings warning"; cat long.log; }
head -c 8 long/loss.png | od -An -c | grep -q "P   N   G" && grep -q "loss curve: long/loss.png" long.log \
  && pass "train writes loss.png at the end (as train --help says)" || fail "loss.png at the end of a run"

# Slow steps (a wide model on long rows), then SIGINT twice: the run ends at once, not after the step.
sed -e 's/"hidden_size": 32/"hidden_size": 512/' -e 's/"intermediate_size": 64/"intermediate_size": 2048/' \
    -e 's/"num_hidden_layers": 1/"num_hidden_layers": 6/' -e 's/"max_position_embeddings": 32/"max_position_embeddings": 4096/' \
    model.json > big.json
"$ULYSSES" train model_config=big.json data.train=data data.seq_len=2048 steps=50 out_dir=sig > sig.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "train: 1 rank" sig.log 2>/dev/null && break; sleep 0.2; done
sleep 1
kill -INT $pid; sleep 0.3; kill -INT $pid
t0=$(date +%s.%N)
wait $pid; rc=$?
dt=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 2))")
if [ $rc -eq 130 ] && grep -q "second signal: stopping now" sig.log && python3 -c "import sys; sys.exit(0 if $dt < 1.5 else 1)"; then
  pass "a second SIGINT stops the run at once (exit $rc after ${dt}s)"
else fail "second SIGINT (exit $rc after ${dt}s)"; tail -3 sig.log; fi
finish
