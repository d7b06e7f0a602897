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
for b in "$B"/*_bench; do [ -f "$b" ] && cp "$b" "$D/build/"; done
cp "$B"/tests/cuda_*_test "$D/build/tests/"
strip --strip-debug "$D/build/ulysses" "$D"/build/tests/* "$D"/build/*_bench 2>/dev/null || true
for l in libopenblas.so.0 libyaml-cpp.so.0.7 libgfortran.so.5 libquadmath.so.0; do
  cp -L "/usr/lib/x86_64-linux-gnu/$l" "$D/libs/"
done
tar -C "$D" -cJf "$D/libs.tar.xz" libs && rm -rf "$D/libs"
# The binaries travel compressed too (the carry and the tree must stay under 64 MiB); the runner
# unpacks build.tar.xz into .carry/ before the first case.
tar -C "$D" -cf - build | xz -T2 -6 > "$D/build.tar.xz" && rm -rf "$D/build"
# The ALST peer's packages (scripts/fetch-alst-wheels.sh), when fetched.
[ -d .deps/alst-wheels ] && cp -r .deps/alst-wheels "$D/alst-wheels"
du -sh "$D" "$D"/*
