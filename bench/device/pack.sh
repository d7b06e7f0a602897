#!/usr/bin/env bash
# Packs what the GPU machine needs from a CUDA build made here into .carry/
# (git-ignored): the binaries, and the shared libraries that machine lacks
# (OpenBLAS, yaml-cpp and their runtime), compressed, and the ALST peer's wheels. Then call the device tool
# with carry [".carry"] and the command
# `python3 bench/device/runner.py --build .carry/build SUITE` (verify, compare, ...: see --list).
set -euo pipefail
B=${1:-build-gpu}
D=.carry
rm -rf "$D"
mkdir -p "$D/build/tests" "$D/libs"
cp "$B/ulysses" "$D/build/"
[ -f "$B/attention_bench" ] && cp "$B/attention_bench" "$D/build/"
cp "$B"/tests/cuda_*_test "$D/build/tests/"
strip --strip-debug "$D/build/ulysses" "$D"/build/tests/* "$D"/build/attention_bench 2>/dev/null || true
for l in libopenblas.so.0 libyaml-cpp.so.0.7 libgfortran.so.5 libquadmath.so.0; do
  cp -L "/usr/lib/x86_64-linux-gnu/$l" "$D/libs/"
done
tar -C "$D" -cJf "$D/libs.tar.xz" libs && rm -rf "$D/libs"
# The ALST peer's packages (scripts/fetch-alst-wheels.sh), when fetched.
[ -d .deps/alst-wheels ] && cp -r .deps/alst-wheels "$D/alst-wheels"
du -sh "$D" "$D"/*
