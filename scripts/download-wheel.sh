#!/usr/bin/env bash
# download-wheel.sh PACKAGE VERSION DIR: one binary wheel of PACKAGE==VERSION from PyPI
# into DIR (for this Python, else a CPython 3.12 manylinux_2_28 x86_64 one); prints its path.
# Used by the fetch-*.sh scripts, which keep only the C/C++ parts of a wheel.
set -euo pipefail
pkg=$1 version=$2 dir=$3
python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir" "$pkg==$version" >&2 ||
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$dir" "$pkg==$version" >&2
ls "$dir"/"${pkg//-/_}"-*.whl | head -1
