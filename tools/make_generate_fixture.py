#!/usr/bin/env python3
"""fixtures/generate: a tiny random Llama with the chat-test tokenizer (a whole Hugging
Face folder: weights, config, tokenizer, chat template, generation config) and the
32 greedy tokens that transformers' generate() gives after a few prompts, in float64.

  python3 tools/make_generate_fixture.py --out fixtures/generate
  python3 tools/make_generate_fixture.py --out fixtures/generate_dynamic --dynamic --seed 12
(--dynamic: dynamic (NTK) RoPE, factor 2 over max_position_embeddings 16, which every
generation passes: the frequencies change while the cache holds keys rotated by the old ones.)
Writes <out>/model/ and <out>/expected.json: [{"prompt_ids", "greedy_ids", "min_margin"}],
min_margin being the smallest gap between the best and second-best logit over the 32
steps (the engine computes in float32, so a gap far above its rounding keeps argmax equal).
"""
import argparse
import json
import os
import shutil

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = ["The model reads long documents", "Hello!", "東京は"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--dynamic", action="store_true", help="dynamic RoPE over max_position_embeddings 16")
    args = ap.parse_args()
    model_dir = os.path.join(args.out, "model")
    if os.path.isdir(model_dir):
        shutil.rmtree(model_dir)
    os.makedirs(model_dir)
    chat = os.path.join(HERE, "..", "fixtures", "chat", "llama3")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(chat, f), model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    vocab = len(tok)
    rope = {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}} if args.dynamic else {}
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=16 if args.dynamic else 256,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, **rope,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            g = torch.Generator().manual_seed(sum(map(ord, name)) * 7919 + args.seed)
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_((1.0 if "embed" in name else 0.2) * torch.randn(p.shape, generator=g))
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               do_sample=False)
    model.save_pretrained(model_dir, safe_serialization=True)
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager").eval()
    cases = []
    for text in PROMPTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        with torch.no_grad():
            # An explicit attention mask: without one, generate() masks every prompt token equal to the
            # pad id (here the eos id, which no prompt holds).
            x = torch.tensor([ids])
            out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=32, min_new_tokens=32,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=tok.eos_token_id)
        gen = out.sequences[0, len(ids):].tolist()
        margin = min(float((s[0].topk(2).values[0] - s[0].topk(2).values[1])) for s in out.scores)
        cases.append({"prompt": text, "prompt_ids": ids, "greedy_ids": gen, "min_margin": margin,
                      "greedy_text": tok.decode(gen, skip_special_tokens=True)})
        assert margin > 1e-3, f"prompt {text!r}: near tie ({margin}); choose another --seed"
        assert len(set(gen)) > 4, f"prompt {text!r}: degenerate output {gen}; choose another --seed"
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump({"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                   "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    for c in cases:
        print(c["prompt"], "->", c["greedy_ids"][:8], "margin", c["min_margin"])


if __name__ == "__main__":
    main()
