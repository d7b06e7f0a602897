#!/usr/bin/env bash
# Downloads the ALST peer's packages from PyPI into .deps/alst-wheels (git-ignored), for
# bench/peers/alst_llama_step.py on the GPU machine, which reaches no registry:
# bench/device/pack.sh carries the folder as .carry/alst-wheels.
#
# DeepSpeed is published as a source archive; it is built here into a pure-Python wheel with its
# C++/CUDA ops left to be JIT-built (DS_BUILD_OPS=0: the recipe's TiledMLP is plain PyTorch).
# Compiled dependencies are fetched for each CPython the GPU machine may run (3.10-3.13).
set -euo pipefail
cd "$(dirname "$0")/.."
D=.deps/alst-wheels
DEEPSPEED=${DEEPSPEED:-0.19.8}
mkdir -p "$D"
pure=(liger-kernel==0.8.5 arctic-training==0.8.0 hjson py-cpuinfo einops annotated-types typing-inspection
      "pydantic>=2.10,<3" packaging tqdm)
pip download --quiet --no-deps --only-binary=:all: -d "$D" "${pure[@]}"
if ! ls "$D"/deepspeed-"$DEEPSPEED"-*.whl >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  pip download --quiet --no-deps --no-binary=:all: -d "$tmp" "deepspeed==$DEEPSPEED"
  DS_BUILD_OPS=0 pip wheel --quiet --no-deps -w "$D" "$tmp"/deepspeed-"$DEEPSPEED".tar.gz
  rm -rf "$tmp"
fi
# pydantic-core must match the pydantic just fetched.
core=$(unzip -p "$D"/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([0-9.]*\).*/\1/p')
for py in 310 311 312 313; do
  pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --python-version "$py" --implementation cp -d "$D" \
    "pydantic-core==$core" msgpack psutil ninja
done
du -sh "$D"
ls "$D"
