#!/usr/bin/env bash
# Start-up from a Hugging Face folder (issue 29): an 8B-shaped bf16 folder is written here
# (tools/make_random_hf_folder.py), read once with cat (the disk's rate, the page cache dropped
# first where this machine allows it, else said), then `ulysses train` from it with LoRA (the
# 8B fine-tune that fits one GPU) for one step; train prints its start-up by phase.
#   bash bench/device/startup_hf.sh BUILD [SHAPE] [WORKDIR]
set -uo pipefail
B=${1:-.carry/build}
SHAPE=${2:-llama-3.1-8b}
W=${3:-/tmp/startup_hf}
BACKEND=${BACKEND:-cuda}
OUTD=${OUT:-$W}
rm -rf "$W" && mkdir -p "$W"
drop_cache() {
  sync
  if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo "STARTUP page cache dropped"
  else echo "STARTUP page cache NOT dropped (not allowed here): the reads below may be warm"; fi
}
python3 tools/make_random_hf_folder.py --out "$W/model" --shape "$SHAPE" || exit 1
cp fixtures/tokenizers/llama3/tokenizer*.json "$W/model/" 2>/dev/null
drop_cache
t0=$(date +%s.%N)
cat "$W"/model/*.safetensors > /dev/null
t1=$(date +%s.%N)
bytes=$(du -cb "$W"/model/*.safetensors | tail -1 | cut -f1)
python3 -c "s=$t1-$t0; print(f'STARTUP read_folder_s {s:.2f} ({$bytes/2**30:.2f} GiB at {$bytes/s/1e9:.2f} GB/s)')"
"$B/ulysses" prepare --input README.md,docs --tokenizer fixtures/tokenizers/llama3 --out "$W/data" --quiet || exit 1
cat > "$W/train.yaml" <<YAML
model: $W/model
backend: $BACKEND
data:
  train: $W/data
  seq_len: 4096
batch_size: 1
steps: 1
log_every: 1
checkpoint_every: 0
out_dir: $W/run
lora:
  r: 16
  alpha: 32
  target_modules: [q_proj, k_proj, v_proj, o_proj]
YAML
drop_cache
t0=$(date +%s.%N)
"$B/ulysses" train "$W/train.yaml" 2>&1 | tee "$OUTD/startup_hf_train.log" | grep -E "start-up|step|error" | head -20
t1=$(date +%s.%N)
python3 -c "print(f'STARTUP train_total_s {$t1-$t0:.2f}')"
rm -rf "$W"
