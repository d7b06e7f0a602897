#!/usr/bin/env bash
# Fetches the Arrow and Parquet C++ libraries that the pyarrow wheel (PyPI, Apache-2.0)
# ships: its headers (pyarrow/include) and libarrow.so / libparquet.so, into
# .deps/pyarrow/{include,lib} (git-ignored; never committed). CMake calls this and,
# when it succeeds, builds `ulysses prepare`'s Parquet reader (src/io/parquet_rows.cpp);
# otherwise the build uses src/io/no_parquet.cpp, which refuses Parquet input naming
# this script. A no-op when the files are there. Exit status non-zero on failure.
set -euo pipefail
VERSION=${PYARROW_VERSION:-26.0.1}
DEST=${1:-"$(cd "$(dirname "$0")/.." && pwd)/.deps/pyarrow"}
if [ -f "$DEST/include/parquet/arrow/reader.h" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
[ "$(uname -m)" = x86_64 ] || { echo "fetch-pyarrow: only x86_64 wheels are fetched" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-pyarrow: downloading pyarrow $VERSION (its C++ headers and libarrow/libparquet)" >&2
wheel=$(bash "$(dirname "$0")/download-wheel.sh" pyarrow "$VERSION" "$tmp")
rm -rf "$DEST"
mkdir -p "$DEST/lib"
python3 - "$wheel" "$DEST" <<'PY'
import os, re, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    for n in names:
        if n.startswith("pyarrow/include/") and not n.endswith("/"):
            out = os.path.join(dest, n[len("pyarrow/"):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(n))
    libs = [n for n in names if re.fullmatch(r"pyarrow/lib(arrow|parquet)\.so\.\d+", n)]
    if len(libs) != 2 or not os.path.exists(os.path.join(dest, "include/parquet/arrow/reader.h")):
        sys.exit(f"fetch-pyarrow: {wheel} lacks libarrow/libparquet or the Parquet headers")
    for n in libs:
        base = os.path.basename(n)
        with open(os.path.join(dest, "lib", base), "wb") as f:
            f.write(z.read(n))
        link = os.path.join(dest, "lib", base.split(".so")[0] + ".so")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(base, link)
PY
echo "$VERSION" > "$DEST/VERSION"
echo "fetch-pyarrow: headers and libraries in $DEST" >&2
