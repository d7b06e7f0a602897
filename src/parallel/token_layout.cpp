#include "parallel/token_layout.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace ulysses {

TokenLayout::TokenLayout(int64_t sp, int64_t ring, bool zigzag) : sp_(sp), ring_(ring), zigzag_(zigzag && ring > 1) {
  ULY_CHECK(sp >= 1, "sequence-parallel degree must be >= 1, got " << sp);
  ULY_CHECK(ring >= 1 && sp % ring == 0,
            "ring degree " << ring << " does not divide the sequence-parallel degree " << sp
                           << " (sp = ulysses × ring)");
}

int64_t TokenLayout::multiple() const { return zigzag_ ? std::lcm(sp_, 2 * ring_) : sp_; }

void TokenLayout::check_length(int64_t S_row, const std::string& what) const {
  ULY_CHECK(S_row % multiple() == 0,
            what << " " << S_row << " is not a multiple of " << multiple() << ": "
                 << (zigzag_ ? "zigzag sharding cuts the sequence into 2 × ring = " + std::to_string(2 * ring_) +
                                   " chunks and each ring rank's pair of chunks into " +
                                   std::to_string(ulysses()) + " Ulysses slices"
                             : "each of the " + std::to_string(sp_) + " sequence-parallel ranks takes an equal slice")
                 << "; choose a length divisible by " << multiple() << (zigzag_ ? " or turn zigzag off" : ""));
}

std::string TokenLayout::describe() const {
  std::ostringstream os;
  os << (zigzag_ ? "zigzag" : "contiguous") << " over ring " << ring_ << " × ulysses " << ulysses();
  return os.str();
}

std::vector<TokenRange> TokenLayout::ring_chunks(int64_t S_row, int64_t r) const {
  check_length(S_row, "sequence length");
  ULY_CHECK(r >= 0 && r < ring_, "ring rank " << r << " outside [0, " << ring_ << ")");
  if (!zigzag_) return {{r * (S_row / ring_), S_row / ring_}};
  const int64_t C = S_row / (2 * ring_);
  return {{r * C, C}, {(2 * ring_ - 1 - r) * C, C}};
}

std::vector<TokenRange> TokenLayout::rank_ranges(int64_t S_row, int64_t s) const {
  ULY_CHECK(s >= 0 && s < sp_, "sequence-parallel rank " << s << " outside [0, " << sp_ << ")");
  const int64_t U = ulysses(), r = s / U, u = s % U;
  const int64_t S_l = S_row / sp_;
  // Local-order slice [u S_l, (u + 1) S_l) of the ring rank's chunks, mapped to global ranges.
  std::vector<TokenRange> out;
  int64_t local = 0;
  const int64_t lo = u * S_l, hi = lo + S_l;
  for (const TokenRange& c : ring_chunks(S_row, r)) {
    const int64_t a = std::max(lo, local), b = std::min(hi, local + c.length);
    if (a < b) out.push_back({c.start + (a - local), b - a});
    local += c.length;
  }
  return out;
}

std::vector<int64_t> TokenLayout::rank_tokens(int64_t S_row, int64_t s) const {
  std::vector<int64_t> out;
  for (const TokenRange& g : rank_ranges(S_row, s))
    for (int64_t i = 0; i < g.length; ++i) out.push_back(g.start + i);
  return out;
}

}  // namespace ulysses
