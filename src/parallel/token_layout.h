// Which tokens of a row each rank of a sequence-parallel group holds.
//
//   sp = ulysses × ring,   sp_rank = ring_rank × ulysses + ulysses_rank   (parallel/mesh.h)
//
// The row, padded to a multiple of multiple(), is cut into `ring` parts, one per ring rank:
// contiguous slices, or with zigzag (dual-chunk) sharding 2 × ring equal chunks of which ring
// rank r holds chunks r and 2 ring − 1 − r, so that every ring rank does the same causal
// work (the early chunk sees few keys, the late one many). A ring rank's tokens, in that
// order, are cut into `ulysses` equal contiguous slices, one per Ulysses rank of its group;
// the Ulysses all-to-all joins them back in the same order, so the ring attention sees its
// ring rank's chunks one after the other.
//
// With ring = 1 (or zigzag off) every rank holds one contiguous slice, as before rings.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses {

struct TokenRange {
  int64_t start = 0, length = 0;  // global token indices [start, start + length)
};

class TokenLayout {
 public:
  // Throws a clear error unless sp >= 1, ring >= 1 and ring divides sp.
  explicit TokenLayout(int64_t sp = 1, int64_t ring = 1, bool zigzag = false);

  int64_t sp() const { return sp_; }
  int64_t ring() const { return ring_; }
  int64_t ulysses() const { return sp_ / ring_; }
  bool zigzag() const { return zigzag_; }
  // A row's length must be a multiple of this: sp, or with zigzag lcm(sp, 2 × ring).
  int64_t multiple() const;
  // S rounded up to multiple() (padding: tokens of a document of their own, without targets).
  int64_t padded_length(int64_t S) const { return (S + multiple() - 1) / multiple() * multiple(); }
  // Throws unless S_row is a multiple of multiple(); `what` names the length in the message.
  void check_length(int64_t S_row, const std::string& what) const;
  // "zigzag" or "contiguous", with the ring degree.
  std::string describe() const;

  // Ring rank r's chunks of a row of S_row tokens (a multiple()), in local order.
  std::vector<TokenRange> ring_chunks(int64_t S_row, int64_t ring_rank) const;
  // SP rank s's ranges of the row, in local order (one or two ranges).
  std::vector<TokenRange> rank_ranges(int64_t S_row, int64_t sp_rank) const;
  // The global index of each of SP rank s's local tokens.
  std::vector<int64_t> rank_tokens(int64_t S_row, int64_t sp_rank) const;

 private:
  int64_t sp_, ring_;
  bool zigzag_;
};

}  // namespace ulysses
