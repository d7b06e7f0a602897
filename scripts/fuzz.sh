#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/*_fuzz.cpp) for SECONDS each under AddressSanitizer
# and UndefinedBehaviorSanitizer, starting from the committed seeds (tests/fuzz/corpus/NAME)
# plus what earlier runs found (BUILD/corpus/NAME). Exits non-zero on the first finding,
# whose input is left in BUILD/findings/ (reproduce: BUILD/NAME_fuzz BUILD/findings/FILE),
# and also when clang or libFuzzer is missing: never a silent skip.
#   scripts/fuzz.sh SECONDS [BUILD]     (make fuzz FUZZ_SECONDS=600; make fuzz-ci: 20 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${2:-build-fuzz}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
jobs=${JOBS:-$(nproc)}

if ! command -v clang++ > /dev/null 2>&1; then
  echo "fuzz: error: clang++ not found; the fuzz targets need clang with libFuzzer (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mkdir -p "$build"
cmake -S tests/fuzz -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/configure.log" 2>&1 \
  || { cat "$build/configure.log" >&2; echo "fuzz: error: configuring the fuzz targets failed" >&2; exit 1; }
cmake --build "$build" -j "$jobs" > "$build/build.log" 2>&1 \
  || { tail -30 "$build/build.log" >&2; echo "fuzz: error: building the fuzz targets failed" >&2; exit 1; }

mkdir -p "$build/findings"
# The targets write each input to a file under $TMPDIR (tests/fuzz/fuzz_input.h): keep those in the build folder.
export TMPDIR=$build/tmp
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for src in tests/fuzz/*_fuzz.cpp; do
  name=$(basename "$src" .cpp)
  seeds=tests/fuzz/corpus/${name%_fuzz}
  work=$build/corpus/${name%_fuzz}
  mkdir -p "$work"
  log=$build/$name.log
  # -rss_limit_mb / -malloc_limit_mb: an input that makes a reader allocate without bound is a finding.
  if "$build/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
       -print_final_stats=1 -artifact_prefix="$build/findings/$name-" "$work" "$seeds" > "$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $name: ${seconds}s, $execs inputs, no finding"
  else
    echo "fuzz: $name: FINDING (log: $log, input in $build/findings/):" >&2
    grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -8 >&2
    status=1
  fi
done
exit $status
