#!/usr/bin/env bash
# A/B on the GPU machine: each named case with a baseline build, then with this one, case by case,
# so that both meet the same card in the same state (a refactor's "figures within x% of the current
# ones in the same run"). The baseline is another commit's `ulysses`, packed here as
# .carry/base.tar.xz (a tar of build/ulysses, xz); this build is pack.sh's. Results under
# $OUT/<case>-base and $OUT/<case>-new; a line per pair at the end.
#   bash bench/device/ab.sh ulysses_1b_16k ulysses_8b_32k
set -uo pipefail
[ -f .carry/base.tar.xz ] || { echo "ab: .carry/base.tar.xz is missing (the baseline's build/ulysses, tar + xz)" >&2; exit 2; }
mkdir -p .carry/base && tar -xJf .carry/base.tar.xz -C .carry/base
root=$OUT
for c in "$@"; do
  for side in base new; do
    build=.carry/build
    [ "$side" = base ] && build=.carry/base/build
    OUT=$root/$c-$side python3 bench/device/runner.py --build "$build" "$c" 2>&1 | tail -3
  done
done
for c in "$@"; do
  python3 - "$root/$c-base/results.jsonl" "$root/$c-new/results.jsonl" "$c" <<'PY'
import json, sys
def metrics(p):
    """The case's metrics, and its whole run's wall time as case_seconds."""
    try:
        rows = [json.loads(l) for l in open(p) if l.strip()]
    except OSError:
        return {}
    row = next((r for r in rows if r.get("case") == sys.argv[3]), {})
    return dict(row.get("metrics", {}), case_seconds=row.get("seconds"))
a, b = metrics(sys.argv[1]), metrics(sys.argv[2])
for k in sorted(set(a) & set(b)):
    if isinstance(a[k], (int, float)) and isinstance(b[k], (int, float)) and a[k]:
        print(f"AB {sys.argv[3]} {k}: base {a[k]:.6g} new {b[k]:.6g} ratio {b[k] / a[k]:.4f}")
for k in sorted(set(b) - set(a)):
    print(f"AB {sys.argv[3]} {k}: new only {json.dumps(b[k])}")
PY
done
