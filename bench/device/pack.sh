#!/usr/bin/env bash
# Packs what the GPU machine needs from a CUDA build made here into .carry/
# (git-ignored): the binaries, and the shared libraries that machine lacks
# (OpenBLAS, yaml-cpp and their runtime), compressed, and the ALST peer's wheels. Then call the device tool
# with carry [".carry"] and the command
# `python3 bench/device/runner.py --build .carry/build SUITE` (verify, compare, ...: see --list).
set -euo pipefail
B=${1:-build-gpu}
D=.carry
# The Parquet reader's libraries (60 MB, .deps/pyarrow) would not fit the carry, and the GPU
# machine does not prepare data: build for it with -DULYSSES_PARQUET=OFF.
if readelf -d "$B/ulysses" | grep -q 'NEEDED.*lib\(arrow\|parquet\)\.so'; then
  echo "pack: $B/ulysses links libarrow/libparquet (prepare's Parquet reader); configure the GPU build with" \
       "-DULYSSES_PARQUET=OFF (cmake -S . -B $B -DULYSSES_PARQUET=OFF) and build again" >&2
  exit 1
fi
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
