#!/usr/bin/env bash
# `ulysses train` refusals that a new user meets first, end to end: each names what
# train accepts (config keys, not flags of other commands) and nothing it rejects.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

printf 'A short corpus: a few hundred bytes of text, far fewer than one long sequence.\n' > small.txt
"$ULYSSES" prepare --input small.txt --out data --quiet > /dev/null 2>&1 && pass "prepare a small corpus" \
  || fail "prepare a small corpus"
write_tiny_model model.json
printf 'model_config: model.json\ndata:\n  train: data\n  seq_len: 64\nsteps: 1\n' > train.yaml

# Unknown keys: the suggestion is a key train has.
expect_error "a leaf without its section" "unknown key 'lr' \(did you mean 'optimizer.lr'\?\)" \
  "$ULYSSES" train train.yaml lr=1e-4
expect_error "a flag" "unknown key 'lr' \(did you mean 'optimizer.lr'\?\)" "$ULYSSES" train train.yaml --lr 1e-4
expect_error "a long form, mistyped" "unknown key 'learning_rat' \(did you mean 'optimizer.lr'\?\)" \
  "$ULYSSES" train train.yaml learning_rat=1e-4
expect_error "another command's flag" "unknown key 'seq-len' \(did you mean 'data.seq_len'\?\)" \
  "$ULYSSES" train train.yaml --seq-len 4096

# A learning-rate floor above the peak (docs/fine-tuning.md's peak, the old default floor).
expect_error "min_lr above lr" "optimizer.min_lr 3e-05 is above optimizer.lr 1e-05 .*leave it out for 0.1 x lr$" \
  "$ULYSSES" train train.yaml optimizer.lr=1.0e-5 optimizer.min_lr=3.0e-5 out_dir=run

# Too little data for one sequence: the advice names data.seq_len, which train accepts.
expect_error "fewer tokens than one sequence" "fewer than one sequence of 4096; use more data or a shorter data.seq_len$" \
  "$ULYSSES" train train.yaml data.seq_len=4096 out_dir=run
expect_error "no document long enough" "use data.mode=pack or a shorter data.seq_len$" \
  "$ULYSSES" train train.yaml data.seq_len=4096 data.mode=long out_dir=run
if grep -q -- "--seq" "$TMP/stderr"; then fail "the advice names --seq"; else pass "no --seq in the advice"; fi

finish
