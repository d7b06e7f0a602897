#!/usr/bin/env bash
# Installs what building and testing Ulysses needs, from Debian's packages.
# Idempotent: installs only what is missing, so `make` on a ready machine
# costs a few dpkg queries.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-dev          # the CPU backend's GEMM
  nlohmann-json3-dev       # config.json, safetensors headers
  openmpi-bin libopenmpi-dev  # multi-rank runs (mpirun) and the MPI communicator
  libgtest-dev libgmock-dev   # tests
  libyaml-cpp-dev          # train configs
  zlib1g-dev libzstd-dev zstd  # prepare reads .gz and .zst corpora (zstd: the tests compress with it)
  clang                    # the fuzz targets (libFuzzer, ASan, UBSan come with it): make fuzz, make test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA backend is built when nvcc is found (CUDA toolkit installed separately,
# e.g. /usr/local/cuda); it is optional.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: note: nvcc is at /usr/local/cuda/bin but not on PATH; the Makefile adds it"
fi

# Python packages the command-line tests use: numpy and safetensors to build malformed
# inputs, pyarrow to write Parquet files (tests/cli/parquet_test.sh), tensorboard to read
# the event files back (tests/cli/tensorboard_test.sh); torch/transformers and tokenizers
# are only needed to regenerate fixtures. Those tests skip, saying so, without them.
py_missing=()
for m in numpy safetensors pyarrow tensorboard; do
  python3 -c "import $m" >/dev/null 2>&1 || py_missing+=("$m")
done
if [ ${#py_missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${py_missing[*]} (pip)"
  python3 -m pip install -q "${py_missing[@]}" || echo "install-deps: warning: pip could not install ${py_missing[*]}; the tests that need them will be skipped"
fi
