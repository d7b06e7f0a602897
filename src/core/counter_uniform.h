// The random initialisation's values: a counter-based generator (splitmix64 of seed, tensor index
// and element index), so any element can be made anywhere, in any order, on any device, and the
// values do not depend on the thread count or on where a tensor lives (whole or a ZeRO shard).
// The CPU backend and the CUDA kernel both call counter_uniform(); the values were fixed when
// weights were made on the host (tests/counter_uniform_test.cpp keeps that generator's values).
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace ulysses {

// Uniform in [-bound, bound), from the element's 24 high bits (float32-exact).
ULY_HOST_DEVICE float counter_uniform(uint64_t seed, uint64_t stream, uint64_t index, float bound) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (stream << 40) + index;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * bound;
}

}  // namespace ulysses
