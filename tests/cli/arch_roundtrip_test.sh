#!/usr/bin/env bash
# The families beyond Llama round trip through transformers: a tiny random Qwen2 (tied
# embeddings, q/k/v biases), Qwen3 (per-head q/k RMSNorm, head_dim != hidden / heads) and
# Mistral (a sliding window shorter than the rows) train two steps with `ulysses train` on a
# byte-level corpus; on each checkpoint's model/ folder (bf16 weights)
#   (a) transformers' AutoModelForCausalLM loads the same architecture, with the family's features;
#   (b) `ulysses loss-grad` (CPU, fp32 from the bf16 weights) gives transformers' float64 loss on a
#       batch of rows longer than the window (relative 1e-4) and its float64 gradients (1e-3 per
#       tensor);
#   (c) `ulysses generate` gives transformers' greedy generate() (float64, eager attention) of 16
#       tokens from a prompt longer than the window.
# Two steps only: trained longer, these tiny models collapse into repeating one byte, which leaves
# the greedy check little to compare. Needs torch and transformers (skipped, saying so, without them).
source "$(dirname "$0")/lib.sh" "$@"
skip_unless_python torch transformers safetensors
cd "$TMP"

"$ULYSSES" prepare --input "$ROOT/README.md" --out data --quiet > /dev/null 2>&1 \
  && pass "prepare a corpus (byte-level)" || fail "prepare a corpus"

# The three configs: write_tiny_model's sizes (byte-level vocabulary 258, hidden 64, 2 layers,
# 4 heads, 2 KV heads), each with its family's feature.
cat > qwen2.json <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
 "use_sliding_window": false, "sliding_window": null, "hidden_act": "silu", "torch_dtype": "float32"}
JSON
cat > qwen3.json <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 32, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
 "tie_word_embeddings": false, "attention_bias": false, "use_sliding_window": false, "sliding_window": null,
 "hidden_act": "silu", "torch_dtype": "float32"}
JSON
cat > mistral.json <<'JSON'
{"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 258, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 16,
 "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "float32"}
JSON
cat > train.yaml <<'YAML'
data:
  train: data
  seq_len: 64
batch_size: 2
steps: 2
optimizer:
  lr: 3.0e-3
  warmup_steps: 1
log_every: 2
YAML

# The batch: 2 rows of 64 byte ids (4 windows of 16), seeded.
python3 - <<'PY'
import torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(7)
save_file({"input_ids": torch.randint(0, 256, (2, 64), generator=g, dtype=torch.int64)}, "batch.safetensors")
PY
# The prompt: 40 bytes (longer than the window), byte-level ids as `ulysses generate` reads them.
PROMPT="Sequence parallel training of long rows."
prompt_ids=$(printf '%s' "$PROMPT" | "$ULYSSES" tokenize --tokenizer byte)

for arch in qwen2 qwen3 mistral; do
  M=$arch/checkpoints/step-0000002/model
  if ! "$ULYSSES" train train.yaml model_config=$arch.json out_dir=$arch > $arch.log 2>&1 || [ ! -d $M ]; then
    fail "$arch: train 2 steps"; tail -3 $arch.log; continue
  fi
  pass "$arch: train 2 steps, checkpoint written"
  if ! "$ULYSSES" loss-grad --model $M --batch batch.safetensors --out $arch.grad.safetensors > $arch.lg.log 2>&1; then
    fail "$arch: ulysses loss-grad"; tail -3 $arch.lg.log; continue
  fi
  if ! ours=$("$ULYSSES" generate --model $M --prompt "$PROMPT" --max-new-tokens 16 --ignore-eos --ids 2> $arch.gen.log \
              | tail -1); then
    fail "$arch: ulysses generate"; tail -3 $arch.gen.log; continue
  fi
  python3 - $arch $M $arch.json $arch.grad.safetensors "$prompt_ids" "$ours" > $arch.check.log 2>&1 <<'PY'
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.utils import logging
logging.set_verbosity_error()
logging.disable_progress_bar()
arch, d, src, grads, prompt, ours = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), sys.argv[4], \
    json.loads(sys.argv[5]), json.loads(sys.argv[6])
name = src["architectures"][0]
fails = []

# (a) AutoModelForCausalLM loads the folder as the same architecture, bf16, with the family's features.
model = AutoModelForCausalLM.from_pretrained(d)
cfg = model.config
ok = type(model).__name__ == name and cfg.architectures == [name] and model.dtype == torch.bfloat16
attn = model.model.layers[0].self_attn
if arch == "qwen2":
    ok = ok and cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ok = ok and all(getattr(attn, p).bias is not None for p in ("q_proj", "k_proj", "v_proj")) and attn.o_proj.bias is None
    ok = ok and not cfg.use_sliding_window
if arch == "qwen3":
    ok = ok and attn.head_dim == 32 and tuple(attn.q_proj.weight.shape) == (128, 64)
    ok = ok and tuple(attn.q_norm.weight.shape) == (32,) and tuple(attn.k_norm.weight.shape) == (32,)
if arch == "mistral":
    ok = ok and cfg.sliding_window == 16
print(f"     {type(model).__name__}: dtype {model.dtype}, tied {cfg.tie_word_embeddings}, head_dim {attn.head_dim}, "
      f"sliding_window {getattr(cfg, 'sliding_window', None)}")
if not ok:
    fails.append(f"(a) transformers loaded {type(model).__name__} {cfg.architectures}, dtype {model.dtype}, "
                 f"tied {cfg.tie_word_embeddings}, head_dim {attn.head_dim}, sliding_window {getattr(cfg, 'sliding_window', None)}")

# (b) the loss on the batch, the mean cross-entropy over the shifted targets, equals ours. Transformers'
# own loss upcasts the logits to float32 only (ForCausalLMLoss), so it is taken here in float64 from its
# float64 logits; its backward gives float64 gradients to hold ours against too.
m64 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager")
ids = load_file("batch.safetensors")["input_ids"]
logits = m64(input_ids=ids).logits
theirs_loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
theirs_loss.backward()
theirs_loss = theirs_loss.item()
out = load_file(grads)
our_loss = out["loss"].double().item()
rel = abs(our_loss - theirs_loss) / abs(theirs_loss)
print(f"     loss on [{ids.shape[0]}, {ids.shape[1]}]: ours {our_loss:.8f}, transformers float64 {theirs_loss:.8f}, "
      f"relative {rel:.2e}")
if not rel <= 1e-4:
    fails.append(f"(b) loss: ours {our_loss!r}, transformers {theirs_loss!r}, relative {rel:.3e} > 1e-4")
# The gradients (each tensor's relative error, |ours - theirs| / |theirs| in the Frobenius norm): every
# parameter, the family's own (biases, q/k norms) included; a tied lm_head has none of its own.
worst, missing = (0.0, ""), []
for n, p in m64.named_parameters():
    if "grad." + n not in out:
        missing.append(n)
        continue
    e = ((out["grad." + n].double() - p.grad).norm() / p.grad.norm()).item()
    worst = max(worst, (e, n))
extra = sorted(k for k in out if k.startswith("grad.") and k[5:] not in dict(m64.named_parameters()))
print(f"     gradients of {len(out) - 1} tensors: worst relative error {worst[0]:.2e} ({worst[1]})")
if missing or extra:
    fails.append(f"(b) gradients: ours lack {missing}, ours have {extra} that transformers does not")
if not worst[0] <= 1e-3:
    fails.append(f"(b) gradient of {worst[1]}: relative error {worst[0]:.3e} > 1e-3")
if arch == "mistral":  # the rows are long enough for the window to matter: without it the loss is another
    nowin = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager",
                                                 sliding_window=None)
    with torch.no_grad():
        lw = nowin(input_ids=ids).logits
    full = F.cross_entropy(lw[:, :-1].reshape(-1, lw.shape[-1]), ids[:, 1:].reshape(-1)).item()
    print(f"     without the window transformers' loss would be {full:.8f} (relative {abs(full - our_loss) / full:.2e})")
    if not abs(full - our_loss) / full > 1e-4:
        fails.append(f"(b) the batch does not exercise the window: loss without it {full!r}, ours {our_loss!r}")

# (c) greedy generation: 16 tokens, float64, eager attention, no end-of-sequence handling (ours: --ignore-eos).
gc = GenerationConfig(max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
m64.eval()
with torch.no_grad():
    gen = m64.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                       generation_config=gc)
theirs = gen[0, len(prompt):].tolist()
print(f"     greedy: ours {ours}")
print(f"             transformers {theirs}")
if theirs != ours:
    # Where they part, how far transformers' best token led its second (a near tie would say so).
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    with torch.no_grad():
        top = torch.topk(m64(torch.tensor([prompt + theirs[:k]])).logits[0, -1], 2).values
    fails.append(f"(c) greedy ids differ from token {k}: ours {ours}, transformers {theirs} (there transformers' "
                 f"top logit leads the next by {(top[0] - top[1]).item():.3e})")
for f in fails:
    print("     " + f)
sys.exit(1 if fails else 0)
PY
  rc=$?
  cat $arch.check.log
  if [ $rc -eq 0 ]; then
    pass "$arch: transformers loads it as the same architecture; its float64 loss, gradients and 16 greedy tokens equal ours"
  else
    fail "$arch: round trip through transformers"
  fi
done
finish
