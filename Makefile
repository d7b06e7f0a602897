# Ulysses: the two commands a new user runs (see README.md).
#   make        build build/ulysses
#   make test   install what is missing, build, run every test (but the GPU ones: make test-gpu)
#   make demo   install what is missing, build, run the demo
#   make fuzz FUZZ_SECONDS=600   every fuzz target that long (ASan + UBSan; docs/reliability.md)
#   make test-asan               the unit, MPI and command-line tests built with ASan + UBSan
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
export PATH := $(PATH):/usr/local/cuda/bin

FUZZ_SECONDS ?= 60
# What `make test` gives each fuzz target: long enough to run the seeds and a few hundred
# thousand mutations, short enough for CI (5 targets; about 2 minutes plus the clang build).
FUZZ_CI_SECONDS ?= 20

.PHONY: all deps configure build test test-gpu demo clean fuzz fuzz-ci test-asan

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The CUDA test binaries (label gpu) need a GPU: `make test` leaves them out, `make test-gpu` runs
# them one at a time on a machine that has one.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1500 -LE gpu
	@$(MAKE) --no-print-directory fuzz-ci

# The fuzz targets (tests/fuzz) for a bounded time each; fails (never skips) without clang/libFuzzer.
fuzz-ci: deps
	JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_CI_SECONDS) $(BUILD)-fuzz

fuzz: deps
	JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_SECONDS) $(BUILD)-fuzz

# The whole engine and its tests built with AddressSanitizer + UndefinedBehaviorSanitizer (gcc),
# CPU only; runs the unit, MPI and command-line tests. Leak checking is off: OpenMPI and
# OpenBLAS keep allocations for the process's life. ASan's quarantine is cut to 16 MB: with its
# default 256 MB, freed memory held back counts as resident and fails prepare's bounded-memory check
# (48 MB file: 388 MiB peak against 157 MiB with 16 MB, 98 MiB for a 1 MB file).
test-asan: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DULYSSES_CUDA=OFF -DULYSSES_SANITIZE=ON
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:quarantine_size_mb=16 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 3000 -LE gpu

test-gpu: build
	cd $(BUILD) && ctest --output-on-failure --timeout 1500 -L gpu

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD)-fuzz $(BUILD)-asan
