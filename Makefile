# Ulysses: the two commands a new user runs (see README.md).
#   make        build build/ulysses
#   make test   install what is missing, build, run every test (but the GPU ones: make test-gpu)
#   make demo   install what is missing, build, run the demo
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
export PATH := $(PATH):/usr/local/cuda/bin

.PHONY: all deps configure build test test-gpu demo clean

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

test-gpu: build
	cd $(BUILD) && ctest --output-on-failure --timeout 1500 -L gpu

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
