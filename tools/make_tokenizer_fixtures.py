#!/usr/bin/env python3
"""Small BPE tokenizers and reference encodings, built with the Hugging Face
`tokenizers` package (no downloads), for tests/tokenizer_test.cpp.

Each tokenizer is trained here with BpeTrainer on a bundled text, then written as
<out>/<name>/tokenizer.json with <out>/<name>/cases.jsonl, one JSON object a line:

  {"text": str, "add_special_tokens": bool, "ids": [int], "decoded": str}  HF encode(), decode()
  {"decode_ids": [int], "skip_special_tokens": bool, "text": str}  HF decode()
  {"pretokenize": str, "pieces": [str]}  HF pre_tokenizer.pre_tokenize_str() (byte-level spelled)

Styles:
  llama3  Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=false), ignore_merges,
          <|begin_of_text|>/<|end_of_text|>/reserved special tokens after the vocab,
          TemplateProcessing that prepends <|begin_of_text|>; merges written as "a b" strings
          (the form of Meta's published file). Two vocab entries are added that no
          merge reaches, so ignore_merges changes the result on the cases that use them.
  gpt2    ByteLevel(use_regex=true) pre-tokenizer (the GPT-2 regex), <|endoftext|>,
          a non-special added token and an lstrip special token; merges as [a, b] pairs.
  qwen2   NFC normalizer, Split(Llama 3 regex with single digits) + ByteLevel, <|im_start|> etc.
  tekken  Mistral's byte-level "tekken" layout (NeMo and later, as transformers converts a
          tekken.json): Split(tekken regex: case-change word split, marks in words, single
          digits, "/" after line breaks) + ByteLevel(use_regex=false), ignore_merges, the control
          tokens [INST], [/INST], [SYSTEM_PROMPT], [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]...
          at ids 0..33 (in the vocabulary and as special added tokens), ByteLevel decoder.
  tekken_words  the same with the variant of the split that some published Mistral tokenizer.json
          files are reported to carry (words as [\p{L}\p{M}]+, no case split), applied as written.
  SentencePiece-style BPE (one vocabulary trained with a Metaspace pre-tokenizer, the
  256 <0xNN> byte tokens after <unk> <s> </s>, byte_fallback and fuse_unk, a limited
  alphabet so that rare characters fall back to bytes), in three dressings:
  llama2    normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer (the legacy
            Llama 2 file), decoder Replace + ByteFallback + Fuse + Strip, "<s> $A",
            a non-special added token matched in the normalized text
  mistral   Metaspace(prepend_scheme "first", split false), the same decoder, [INST] tokens
  nfkc      NFKC normalizer, Metaspace(prepend_scheme "always", split true), Metaspace decoder

  python3 tools/make_tokenizer_fixtures.py --out fixtures/tokenizers        # committed set
  python3 tools/make_tokenizer_fixtures.py --out fixtures/tokenizers --only tekken   # one of them
      (the SentencePiece-style vocabulary is not reproducible: BpeTrainer's limit_alphabet
       breaks ties differently from run to run, so write llama2/mistral/nfkc only on purpose)
  python3 tools/make_tokenizer_fixtures.py --out /tmp/tk --random-texts 300 --seed 3
      (random texts; with a seed other than 0 the tokenizers are also varied:
       vocab size, add_prefix_space, ignore_merges, training text sample)
Then: ULYSSES_TOKENIZER_FIXTURES=/tmp/tk build/tests/tokenizer_test
"""
import argparse
import json
import os
import random
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. It's a sentence that they've used for
a long time, and we'll keep using it: every letter of the alphabet appears in it.
In 1984, about 3,141,592 people lived there; by 2024 the number was 12345678.
Long-context training splits every sequence across GPUs, so that a model can read
hundreds of thousands of tokens at once. Attention is computed on all heads, and
the all-to-all exchange moves the sequence dimension into the head dimension.

def tokenize(text: str) -> list[int]:
    ids = []
    for word in text.split():
        ids.append(vocab.get(word, 0))  # unknown words map to zero
    return ids

if __name__ == "__main__":
    print(tokenize("hello world"))

Le renard brun rapide saute par-dessus le chien paresseux. C'était l'été, où les
élèves étudiaient à l'école. Ça va très bien, merci ! Der schnelle braune Fuchs
springt über den faulen Hund. Größe, Straße, Übung, Ärger und Öl.
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир!
Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί.
我们正在训练一个语言模型。东京是日本的首都。自然语言处理很有趣。
日本語のテキストも少し入れます。ひらがなとカタカナ。
한국어 문장도 조금 있습니다. 안녕하세요.
مرحبا بالعالم. هذا نص عربي قصير.
नमस्ते दुनिया। यह एक छोटा वाक्य है।
สวัสดีชาวโลก
Emoji: 😀 😂 👍🏽 ❤️ 🇫🇷 👨‍👩‍👧‍👦 🚀✨
Tabs\tand  spaces   and\r\nWindows line endings\r\n\r\nand trailing spaces   
{"key": "value", "list": [1, 2, 3], "nested": {"a": true, "b": null}}
<html><body><p>Hello &amp; welcome!</p></body></html>
SELECT name, COUNT(*) FROM users WHERE age >= 21 GROUP BY name;
"""

WORDS = ("the of and to in is that it was for on are as with they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if "
         "will up other about out many then them these so some her would make like him into time has look "
         "two more write go see number no way could people my than first water been call who oil its now "
         "find long down day did get come made may part sequence token model attention gradient memory").split()

# Test texts: the kinds of input where a re-implementation usually goes wrong.
CASES = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "a  b   c\t\td \t \n\n  e   ",
    "   ",
    "\n",
    " \t ",
    "\t\tindented\n    four spaces\n",
    "line one\r\nline two\r\n\r\nend\r\n",
    "\r\r\n\n\r",
    "1234567890123456789 and 3.14159 and 1,000,000 and 007",
    "99 bottles, 1000000 tokens, 12:34:56, v1.2.3",
    "I'm you're he'll they've she'd it's don't I'M YOU'RE HE'LL IT'S 'S 's",
    "'s 's 'S ' s'' x'y ''re",
    "我爱自然语言处理。東京は日本の首都です。한국어 텍스트",
    "Family: 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵, skin tone 👍🏽, heart ❤️ rocket 🚀✨",
    "café naïve résumé Ångström",
    "cafe\u0301 nai\u0308ve e\u0301te\u0301 \u0301leading combining",
    "Русский текст, ελληνικά, العربية, हिन्दी, ไทย, עברית",
    "mixed中文English日本語123한국어",
    "def f(x):\n    return x**2  # comment\n\nprint(f(3))\n",
    "!!! ??? ... --- === +++ *** ###\n\n",
    "a\u00a0b\u3000c\u2009d\u2028e\u0085f\u000bg\u000ch\u001ci",
    "<|begin_of_text|>Hi<|end_of_text|> x <|endoftext|>",
    "text<|end_of_text|>more text<|begin_of_text|>",
    "<|endoftext|><|endoftext|> <|endoftext|>",
    "<|begin_of_text|",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "ſ 'ſ x'ſ",
    "\u200b\u200d\ufeff zero width",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝟙𝟚𝟛 ½ ² Ⅻ ٣",
    "tab\tafter\tword and\t\ttabs",
    " <mask> x<mask>y  <mask>",
    "hello \u00e9",
    "unmergeable ignoremerges",
    "x unmergeable y ignoremerges z",
    "$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    TRAIN_TEXT[:600],
    # Unicode normalization: composed/decomposed pairs, canonical reordering, compatibility forms.
    "Ame\u0301lie, Ame\u0301lie, A\u030angstro\u0308m \u212b \u2126 \u1e9b\u0323 q\u0307\u0323 e\u0323\u0302",
    "\ufb01ne \ufb02ow \u2460\u2461 \uff21\uff22\uff23\uff11\uff12 \u3300 \u00bd \u2075 \u33a1 \u2163",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af \uac00\u11a8 \u304b\u3099 \u30cf\u309a \uff76\uff9e",
    "\u0915\u093c \u0928\u093c \u0627\u0653 \u05d1\u05bc \u0e40\u0e01\u0e47 \u00e9\u0301 \u0301\u0300a",
    "  two  spaces  \u2581 already \u2581\u2581 marked ",
    "<s>inside</s> [INST] hi [/INST] <unk> <0x41> \u2581<s>",
    "a \u03a9mega b x\u03a9mega  \u03a9mega\u03a9mega <custom>",
    "Tokyo \u6771\u4eac \U0001f600 \U0001f9d1\u200d\U0001f4bb rare \u16a0\u16a2 \u0f00 \U0001d11e",
    # Letter case and marks (the tekken split regex cuts words at upper/lower case changes).
    "HTTPServer getHTTPResponse camelCaseWord XMLHttpRequest iPhone McDonald's ÉCOLE École ABCdef",
    "\u01c4 \u01c5 \u01c6 \u01c5a \u02b0\u02b2 x\u02b0 \u0301A \u0301a a\u0301B A\u0301b \u0915\u093f\u0924 "
    "\u1f88\u1f00 \u2160x \uff21\uff41",
    "path/to/file.txt\n/etc//passwd\r\n/ !/\n\n// x\\/y ?!/\r/",
    "[INST]Hi[/INST]Hello</s>[INST] again [/INST][SYSTEM_PROMPT]sys[/SYSTEM_PROMPT]",
    "[AVAILABLE_TOOLS][{\"name\": \"f\"}][/AVAILABLE_TOOLS][TOOL_CALLS][ARGS]{\"a\": 1}[TOOL_RESULTS]2[/TOOL_RESULTS]",
    "<SPECIAL_20> <unk><pad>[IMG][INST [/INST] [inst]",
]

# Characters to draw random texts from.
RANDOM_POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3 + list("0123456789") * 2 +
               list(" ") * 12 + list("\t\n\r") * 2 + list("'.,;:!?-_()[]{}<>|/\\\"#$%&*+=@^`~") +
               list("éèêüöäßçñåøœſÆ") + list("你好世界東京日本語한국") + ["👍", "🏽", "\u200d", "👨", "❤", "\ufe0f"] +
               ["\u0301", "\u0308", "\u00a0", "\u3000", "\u2009", "\u0085", "\u000b", "\u000c", "\u001c", "\u2028"] +
               list("Ωαβγабвгд١٢٣४५६½²") +
               ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<mask>", "'s", "'RE", "'ll", "\r\n",
                "123456", " the", " and", "  ", "\n\n"] +
               # letter case for the tekken split: titlecase, modifier letters, marks, slashes
               ["\u01c5", "\u02b0", "\u1f88", "\u0915\u093f", "/", "\n/", "ABC", "Ab", "aB", "\u00c9t\u00c9", "x/"])


def training_texts(rng=None):
    texts = TRAIN_TEXT.split("\n")
    r = rng or random.Random(0)
    # Deterministic filler so that BpeTrainer finds enough frequent pairs for the vocab size.
    for _ in range(300):
        texts.append(" ".join(r.choice(WORDS) for _ in range(r.randint(4, 14))) + r.choice([".", ",", "!", "?", ""]))
    if rng is not None:
        r.shuffle(texts)
        texts = texts[: len(texts) * 3 // 4]
    return texts


def train(pre_tokenizer, vocab_size, texts, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def build_llama3(vocab_size=800, texts=None, add_prefix_space=False, ignore_merges=True):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False),
    ])
    tok = train(pre, vocab_size, texts or training_texts(), ignore_merges)
    # Vocab entries no merge produces: only ignore_merges emits them whole (Ġ is the space).
    # They go before the special tokens, which follow the model's vocabulary as in Llama 3.
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for word in ["Ġunmergeable", "unmergeable", "Ġignoremerges"]:
        if word not in vocab:
            vocab[word] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(j))
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)]
    tok.add_special_tokens(specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    j = json.loads(tok.to_str())
    # Meta's file spells merges as "a b" strings.
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return j


def build_gpt2(vocab_size=600, texts=None, add_prefix_space=False, ignore_merges=False):
    pre = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    tok = train(pre, vocab_size, texts or training_texts(), ignore_merges)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.add_tokens([AddedToken("<custom>", special=False), AddedToken("Ωmega", special=False)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    return j


QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def build_qwen2(vocab_size=700, texts=None):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok = train(pre, vocab_size, texts or training_texts(), False)
    tok.normalizer = normalizers.NFC()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return json.loads(tok.to_str())


# Mistral's "tekken" split (the byte-level BPE of Mistral NeMo and later): words cut where
# the letter case changes, marks inside words, single digits, "/" after punctuation.
TEKKEN_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# A variant that some of Mistral's published tokenizer.json files are reported to carry: words
# as [\p{L}\p{M}]+, without the case split (transformers warns about such folders and, with
# fix_mistral_regex=True, swaps in TEKKEN_REGEX; the `tokenizers` library applies it as written).
TEKKEN_WORDS_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
                      r"\s+(?!\S)|\s+")
# The control tokens come first, as in a tekken vocabulary, then fillers up to a round count.
TEKKEN_SPECIALS = (["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                    "[TOOL_CONTENT]"] + [f"<SPECIAL_{i}>" for i in range(20, 32)] + ["[ARGS]", "[CALL_ID]"])


def build_tekken(vocab_size=900, texts=None, regex=TEKKEN_REGEX):
    """Laid out as transformers' conversion of a tekken.json: the special tokens at ids
    0..N-1, both in the vocabulary and as added tokens; the byte-level BPE after them,
    ignore_merges; Split(tekken regex) + ByteLevel(use_regex=false); ByteLevel decoder
    and post-processor (BOS comes from the chat template)."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok = train(pre, vocab_size, texts or training_texts(), True)
    j = json.loads(tok.to_str())
    n = len(TEKKEN_SPECIALS)
    vocab = {t: i for i, t in enumerate(TEKKEN_SPECIALS)}
    for t, i in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab[t] = i + n
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TEKKEN_SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return json.loads(tok.to_str())


SP_SPECIALS = ["<unk>", "<s>", "</s>"]


def train_sentencepiece_style(vocab_size=900, texts=None, limit_alphabet=120):
    """A SentencePiece-style BPE vocabulary: <unk> <s> </s>, the 256 byte tokens, then the trained ones."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SP_SPECIALS, limit_alphabet=limit_alphabet,
                                  show_progress=False)
    tok.train_from_iterator(texts or training_texts(), trainer)
    j = json.loads(tok.to_str())
    old = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {t: i for i, t in enumerate(SP_SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in old:
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    return j


def sentencepiece_tokenizer(base, normalizer, pre_tokenizer, decoder, extra=None):
    tok = Tokenizer.from_str(json.dumps(base))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    for t in extra or []:
        if t.special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", bos)])
    j = json.loads(tok.to_str())
    if pre_tokenizer is None:
        j["pre_tokenizer"] = None
    return j


def llama2_decoder():
    return decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                              decoders.Strip(" ", 1, 0)])


def build_sentencepiece_family(base):
    llama2 = sentencepiece_tokenizer(
        base, normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]), None,
        llama2_decoder(), [AddedToken("\u03a9mega", special=False, normalized=True)])
    mistral = sentencepiece_tokenizer(
        base, None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False),
        llama2_decoder(), [AddedToken("[INST]", special=True), AddedToken("[/INST]", special=True)])
    nfkc = sentencepiece_tokenizer(
        base, normalizers.NFKC(), pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
        decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True))
    return {"llama2": llama2, "mistral": mistral, "nfkc": nfkc}


def random_texts(rng, n):
    out = []
    for _ in range(n):
        k = rng.choice([1, 2, 5, 10, 30, 80])
        out.append("".join(rng.choice(RANDOM_POOL) for _ in range(rng.randint(0, k))))
    return out


def write_fixture(out_dir, name, tok_json, texts, rng):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok_json, f, ensure_ascii=False, separators=(",", ":"))
    tok = Tokenizer.from_file(path)  # reload: the reference is what HF makes of the written file
    vocab_total = tok.get_vocab_size(with_added_tokens=True)
    lines = []
    for text in texts:
        for add in (False, True):
            ids = tok.encode(text, add_special_tokens=add).ids
            lines.append({"text": text, "add_special_tokens": add, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False)})
    for text in texts:
        if tok.pre_tokenizer is not None:
            lines.append({"pretokenize": text, "pieces": [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]})
    # Decoding: round trips, special tokens skipped or not, partial UTF-8 sequences, added tokens.
    specials = [t["id"] for t in tok_json["added_tokens"]]
    for _ in range(40):
        ids = [rng.randrange(vocab_total) for _ in range(rng.randint(0, 12))]
        if specials and rng.random() < 0.5:
            ids.insert(rng.randint(0, len(ids)), rng.choice(specials))
        for skip in (False, True):
            lines.append({"decode_ids": ids, "skip_special_tokens": skip, "text": tok.decode(ids, skip_special_tokens=skip)})
    with open(os.path.join(d, "cases.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    size = os.path.getsize(path) + os.path.getsize(os.path.join(d, "cases.jsonl"))
    print(f"{d}: vocab {vocab_total}, {len(lines)} cases, {size / 1024:.0f} KB", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--random-texts", type=int, default=0, help="add N random texts to the fixed cases")
    ap.add_argument("--seed", type=int, default=0, help="random texts; a non-zero seed also varies the tokenizers")
    ap.add_argument("--only", default="", help="comma-separated names to write (default: all); BpeTrainer's "
                    "limit_alphabet breaks ties differently from run to run, so the SentencePiece-style three "
                    "change whenever they are written again")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    texts = CASES + random_texts(rng, a.random_texts)
    if a.seed == 0:
        built = {"llama3": build_llama3(), "gpt2": build_gpt2(), "qwen2": build_qwen2()}
        built.update(build_sentencepiece_family(train_sentencepiece_style()))
        built["tekken"] = build_tekken()
        built["tekken_words"] = build_tekken(regex=TEKKEN_WORDS_REGEX)
    else:
        trng = random.Random(a.seed * 7919)
        built = {
            "llama3": build_llama3(trng.randint(300, 1200), training_texts(trng), trng.random() < 0.3,
                                   trng.random() < 0.7),
            "gpt2": build_gpt2(trng.randint(300, 1200), training_texts(trng), trng.random() < 0.3, trng.random() < 0.3),
            "qwen2": build_qwen2(trng.randint(300, 1200), training_texts(trng)),
        }
        built.update(build_sentencepiece_family(
            train_sentencepiece_style(trng.randint(400, 1500), training_texts(trng), trng.randint(60, 200))))
        built["tekken"] = build_tekken(trng.randint(400, 1500), training_texts(trng))
        built["tekken_words"] = build_tekken(trng.randint(400, 1500), training_texts(trng), TEKKEN_WORDS_REGEX)
    only = [x for x in a.only.split(",") if x]
    for name, tok_json in built.items():
        # Every fixture draws its random decode ids from the same generator, in this order.
        fixture_rng = random.Random(rng.random())
        if not only or name in only:
            write_fixture(a.out, name, tok_json, texts, fixture_rng)


if __name__ == "__main__":
    main()
