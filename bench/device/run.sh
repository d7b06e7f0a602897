#!/usr/bin/env bash
# Kept so the documented commands still work: bench/device/run.sh BUILD [SUITE_CASE_OR_TAG...]
# (suites: quick, full (default), verify, compare, plan; tags: long, train, multigpu, ...).
# Everything happens in bench/device/runner.py over bench/device/cases.json.
B=${1:-.carry/build}
shift || true
exec python3 "$(dirname "$0")/runner.py" --build "$B" "$@"
