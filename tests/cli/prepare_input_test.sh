#!/usr/bin/env bash
# prepare's inputs: gzip and zstd files give the shards their plain text gives; a big plain
# file is tokenized in pieces (the same tokens as whole, memory bounded by the piece size,
# not the file); binary files and malformed Parquet files are refused with one line naming them.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"
TK="$ROOT/fixtures/tokenizers/llama3"
tokens() { python3 -c "
import numpy as np, sys
p = sys.argv[1]; n = int(np.fromfile(p, np.uint64, 1, offset=16)[0])
sys.stdout.write(np.fromfile(p, np.uint32, n, offset=256).tobytes().hex())" "$1"; }

# Text with long lines, blank lines, indentation and non-Latin script: the pieces' edges land everywhere.
python3 - > big.txt <<'PY'
import random
rng = random.Random(1)
words = "the quick brown fox jumps over lazy dogs Größe Straße 東京 日本語 😀 long-context 12345 it's".split()
lines = []
for i in range(6000):
    lines.append(("  " if i % 7 == 0 else "") + " ".join(rng.choice(words) for _ in range(rng.randint(0, 14))))
print("\n".join(lines))
PY
"$ULYSSES" prepare --input big.txt --out whole --tokenizer "$TK" --chunk-bytes 64M --quiet > /dev/null 2>&1
"$ULYSSES" prepare --input big.txt --out pieces --tokenizer "$TK" --chunk-bytes 4K --quiet > /dev/null 2>&1
[ -n "$(tokens whole/train-00000.tokens)" ] && [ "$(tokens whole/train-00000.tokens)" = "$(tokens pieces/train-00000.tokens)" ] \
  && pass "a plain file in 4 KiB pieces gives the tokens of the whole file (Llama 3 tokenizer)" \
  || fail "pieces vs whole"

cp big.txt c.txt && gzip -k c.txt && zstd -q c.txt -o c.txt.zst
printf '{"text": "first document"}\n{"text": "second, 東京"}\n' > d.jsonl
gzip -k d.jsonl && zstd -q d.jsonl -o d.jsonl.zst
"$ULYSSES" prepare --input c.txt --out p1 --tokenizer "$TK" --quiet > /dev/null 2>&1
for f in c.txt.gz c.txt.zst; do
  "$ULYSSES" prepare --input $f --out "o-$f" --tokenizer "$TK" --quiet > /dev/null 2>&1
  [ "$(tokens p1/train-00000.tokens)" = "$(tokens o-$f/train-00000.tokens)" ] && pass "$f reads as its text" || fail "$f"
done
"$ULYSSES" prepare --input d.jsonl --out j1 --quiet > /dev/null 2>&1
for f in d.jsonl.gz d.jsonl.zst; do
  "$ULYSSES" prepare --input $f --out "o-$f" --quiet > /dev/null 2>&1
  [ "$(tokens j1/train-00000.tokens)" = "$(tokens o-$f/train-00000.tokens)" ] \
    && [ "$(python3 -c "import json; print(json.load(open('o-$f/manifest.json'))['documents']['train'])")" = 2 ] \
    && pass "$f reads as JSON Lines (2 documents)" || fail "$f as JSON Lines"
done

# Memory: a 48 MB file with the byte tokenizer (4 bytes a token) used to take ~5x its size at once.
# Compared with a 1 MB file's peak, so that what the binary itself maps (the CUDA libraries in a
# CUDA build) does not count: the 47 MB more must cost well under its size.
python3 -c "
import sys
line = ('abcdefghij klmnopqrst uvwxyz 0123456789 ' * 3)[:-1] + '\n'
sys.stdout.write(line * (48_000_000 // len(line)))" > huge.txt
head -c 1000000 huge.txt > small.txt
peak_of() {  # peak resident MiB of one prepare run (a fresh Python, so RUSAGE_CHILDREN is that run's)
  python3 - "$ULYSSES" "$1" "$2" <<'PY'
import resource, subprocess, sys
subprocess.run([sys.argv[1], "prepare", "--input", sys.argv[2], "--out", sys.argv[3], "--threads", "2"],
               check=True, stdout=subprocess.DEVNULL, stderr=open(sys.argv[3] + ".log", "w"))
print(int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
PY
}
small=$(peak_of small.txt small) && big=$(peak_of huge.txt huge) || { small=0; big=999999; }
echo "     peak resident memory: 1 MB file $small MiB, 48 MB file $big MiB"
[ $((big - small)) -lt 100 ] && pass "prepare's memory is bounded (a 48 MB file within 100 MiB of a 1 MB one)" \
  || fail "prepare memory"
grep -q "prepare: .* MB" huge.log && pass "progress lines on a long input" || fail "progress lines"

expect_error "a binary file" "ulysses: looks binary \(a NUL byte at offset" "$ULYSSES" prepare --input "$ULYSSES" --out b1 --quiet
head -c 20000 /dev/urandom > noise.bin
printf 'abc' | cat - noise.bin | tr -d '\000' > noise.txt
expect_error "mostly non-UTF-8 bytes" "noise.txt: looks binary \([0-9]+ of the first [0-9]+ bytes are not UTF-8 text\)" \
  "$ULYSSES" prepare --input noise.txt --out b2 --quiet
printf 'PAR1\001\002\003\004' > t.parquet
expect_error "a malformed Parquet file" "t.parquet: (not a valid Parquet file|a Parquet file, and this build of ulysses has no Parquet reader)" \
  "$ULYSSES" prepare --input t.parquet --out b3 --quiet
printf 'not gzip at all' | gzip | head -c 20 > broken.gz
expect_error "a truncated gzip file" "broken.gz: the gzip data ends early" "$ULYSSES" prepare --input broken.gz --out b4 --quiet
head -c 200 c.txt.zst > broken.zst
expect_error "a truncated zstd file" "broken.zst: the zstd data ends early" "$ULYSSES" prepare --input broken.zst --out b5 --quiet
finish
