#!/usr/bin/env bash
# Fetches the headers of NVIDIA's cuDNN frontend (header-only C++, MIT licence)
# from its PyPI wheel into .deps/cudnn-frontend/include (git-ignored; never
# committed). CMake calls this when it builds the CUDA backend; it is a no-op
# when the headers are there. Exit status non-zero when they could not be had:
# the build then uses our own attention kernels only (src/backend/cuda/no_cudnn_attention.cpp).
set -euo pipefail
VERSION=${CUDNN_FRONTEND_VERSION:-1.32.0}
DEST=${1:-"$(cd "$(dirname "$0")/.." && pwd)/.deps/cudnn-frontend"}
if [ -f "$DEST/include/cudnn_frontend.h" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-cudnn-frontend: downloading nvidia-cudnn-frontend $VERSION (headers only)"
wheel=$(bash "$(dirname "$0")/download-wheel.sh" nvidia-cudnn-frontend "$VERSION" "$tmp")
rm -rf "$DEST"
mkdir -p "$DEST"
python3 - "$wheel" "$DEST" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n.endswith("cudnn_frontend.h") for n in names):
        sys.exit(f"fetch-cudnn-frontend: no include/cudnn_frontend.h in {wheel}")
    z.extractall(dest, names)
PY
echo "$VERSION" > "$DEST/VERSION"
echo "fetch-cudnn-frontend: headers in $DEST/include"
