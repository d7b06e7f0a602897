#include "data/permutation.h"

namespace ulysses {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

IndexPermutation::IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
  while (half_bits_ < 32 && (uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = mix64(key);
  for (uint64_t& rk : keys_) {
    k = mix64(k);
    rk = k;
  }
}

uint64_t IndexPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & mask_;
  for (uint64_t rk : keys_) {
    const uint64_t f = mix64(right ^ rk) & mask_;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t i) const {
  if (n_ <= 1) return i;
  uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);  // the domain is < 4n, so this ends after a few steps on average
  return x;
}

}  // namespace ulysses
