#!/usr/bin/env bash
# Runs every CUDA test binary (tests/cuda/*_test.cpp -> <build>/tests/cuda_*_test) on the GPU machine.
# Usage, from the repository root: bench/device/run_cuda_tests.sh [build-dir] (default build-cuda)
# Logs and gtest XML go to $OUT/cuda_tests (OUT defaults to /tmp/out). Exits non-zero if any binary
# fails, is missing, or times out; a machine without a GPU makes every test fail (never skip).
set -u

BUILD="${1:-build-cuda}"
OUT="${OUT:-/tmp/out}"
LOG_DIR="$OUT/cuda_tests"
PER_TEST_TIMEOUT="${CUDA_TEST_TIMEOUT:-300}"
mkdir -p "$LOG_DIR"

if [ ! -d "$BUILD/tests" ]; then
  echo "run_cuda_tests: no $BUILD/tests folder (build the cuda_* test targets and carry the build folder)" >&2
  exit 2
fi

{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
  else
    echo "nvidia-smi not found"
  fi
} > "$LOG_DIR/machine.txt"
cat "$LOG_DIR/machine.txt"

shopt -s nullglob
bins=("$BUILD"/tests/cuda_*_test)
if [ ${#bins[@]} -eq 0 ]; then
  echo "run_cuda_tests: no cuda_*_test binaries under $BUILD/tests" >&2
  exit 2
fi

failures=0
summary="$LOG_DIR/summary.txt"
printf '%-28s %-8s %8s %8s %8s\n' "binary" "result" "passed" "failed" "seconds" > "$summary"
for bin in "${bins[@]}"; do
  name="$(basename "$bin")"
  log="$LOG_DIR/$name.log"
  start=$(date +%s.%N)
  timeout "$PER_TEST_TIMEOUT" "$bin" --gtest_color=no --gtest_output="xml:$LOG_DIR/$name.xml" > "$log" 2>&1
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  passed=$(grep -c '^\[       OK \]' "$log" || true)
  failed=$(grep -c '^\[  FAILED  \] .*(' "$log" || true)
  if [ "$rc" -eq 0 ]; then
    result="PASS"
  elif [ "$rc" -eq 124 ]; then
    result="TIMEOUT"
  else
    result="FAIL($rc)"
  fi
  [ "$rc" -ne 0 ] && failures=$((failures + 1))
  printf '%-28s %-8s %8s %8s %8s\n' "$name" "$result" "$passed" "$failed" "$secs" >> "$summary"
done

echo
cat "$summary"
if [ "$failures" -ne 0 ]; then
  echo
  echo "== failing tests (details in $LOG_DIR/<binary>.log) =="
  for log in "$LOG_DIR"/*.log; do
    grep -E '^\[  FAILED  \] .*\(|Failure$|relative error|no CUDA device' "$log" | head -20 | sed "s|^|$(basename "$log" .log): |"
  done
  echo "run_cuda_tests: $failures of ${#bins[@]} binaries failed"
  exit 1
fi
echo "run_cuda_tests: all ${#bins[@]} binaries passed"
