// A seeded pseudo-random permutation of [0, n) that stores nothing: a Feistel
// network on the smallest 4^h >= n, walked until the value falls below n
// (cycle walking keeps it a bijection). Identical on every machine and
// compiler, unlike std::shuffle, and O(1) memory for any corpus size.
#pragma once
#include <cstdint>

namespace ulysses {

uint64_t mix64(uint64_t x);  // splitmix64's finaliser

class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;  // i in [0, n)
  uint64_t size() const { return n_; }

 private:
  uint64_t encrypt(uint64_t x) const;

  static constexpr int kRounds = 6;
  uint64_t n_;
  int half_bits_ = 1;
  uint64_t mask_ = 1;
  uint64_t keys_[kRounds];
};

}  // namespace ulysses
