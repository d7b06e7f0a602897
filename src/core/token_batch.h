// The host-side token data of a step: a batch of rows, and one sequence-parallel
// rank's shard of a row. Plain types, made by the data loader (data/loader.h) or
// from a batch file (model/batch.h) and consumed by the model and the step.
// Everything here is host-side int32.
#pragma once
#include <cstdint>
#include <vector>

namespace ulysses {

constexpr int32_t kIgnoreIndex = -100;

struct TokenBatch {
  int64_t B = 0, S = 0;
  std::vector<int32_t> ids;        // [B, S]
  std::vector<int32_t> targets;    // [B, S], kIgnoreIndex = no target
  std::vector<int32_t> positions;  // [B, S]
  int64_t valid_targets() const;
};

// One SP rank's tokens of one sequence: a contiguous slice, or with a ring layout the
// ranges parallel/token_layout.h gives it; the sequence padded so that it divides evenly
// (padding: token 0, no target, its own document).
struct SequenceShard {
  int64_t S_global = 0;  // padded length, a multiple of the group size
  int64_t offset = 0;    // global index of the first local token (the rest follow the layout)
  std::vector<int32_t> ids, targets, positions;  // [S_local]
  std::vector<int32_t> doc_start;                // [S_global]: first token of each token's document
  // 1 + the largest position id among the row's real tokens on every rank (not padding): the
  // length that dynamic RoPE scales to, as transformers takes it from position_ids.
  int64_t rope_length = 0;
  int64_t S_local() const { return static_cast<int64_t>(ids.size()); }
};

}  // namespace ulysses
