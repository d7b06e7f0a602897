#!/usr/bin/env bash
# The top level of `ulysses`: --version and `version` print one line with the version
# (and the commit, in a git checkout); a mistyped command is refused at once, with
# the nearest command suggested only when it is a plausible typo.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

want=$(sed -n 's/^project(ulysses VERSION \([0-9.]*\) .*/\1/p' "$ROOT/CMakeLists.txt")
for form in --version version; do
  out=$("$ULYSSES" $form 2> err.txt)
  rc=$?
  if [ $rc -eq 0 ] && [ -n "$want" ] && echo "$out" | grep -q -E "^ulysses $want( \(commit [0-9a-f]{7,40}\))?$" \
     && [ "$(echo "$out" | wc -l)" -eq 1 ] && [ ! -s err.txt ]; then
    pass "ulysses $form: '$out'"
  else fail "ulysses $form (exit $rc): '$out' (want 'ulysses $want')"; fi
done
if git -C "$ROOT" rev-parse --short=12 HEAD > head.txt 2> /dev/null; then
  "$ULYSSES" --version | grep -q "(commit $(cat head.txt))" && pass "--version names the commit built" \
    || fail "--version names the commit built ($(cat head.txt)): $("$ULYSSES" --version)"
fi
"$ULYSSES" --help | grep -q -E "^  version +" && pass "--help lists version" || fail "--help lists version"

expect_error "a mistyped command suggests the nearest" \
  "^ulysses: error: unknown command 'trian' \(did you mean 'train'\?\); 'ulysses --help' lists the commands$" \
  "$ULYSSES" trian
expect_error "a command's prefix suggests it" "unknown command 'tok' \(did you mean 'tokenize'\?\)" "$ULYSSES" tok
expect_error "no suggestion for a word like no command" "unknown command 'frobnicate'; 'ulysses --help'" \
  "$ULYSSES" frobnicate
"$ULYSSES" trian > out.txt 2> err.txt
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && [ ! -s out.txt ] \
  && pass "an unknown command: exit 2, one line on stderr" || fail "an unknown command: exit $rc, $(wc -l < err.txt) lines"

finish
