// Token batches and their sequence-parallel shards.
//
// The contract of `loss-grad` (README): input_ids [B, S]; optional shift_labels
// (targets as given) or labels (HF convention: target[i] = labels[i + 1], none
// across a document end or past the last token); optional position_ids (restart
// at 0 = new document). Everything here is host-side int32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/token_layout.h"

namespace ulysses {

constexpr int32_t kIgnoreIndex = -100;

struct TokenBatch {
  int64_t B = 0, S = 0;
  std::vector<int32_t> ids;        // [B, S]
  std::vector<int32_t> targets;    // [B, S], kIgnoreIndex = no target
  std::vector<int32_t> positions;  // [B, S]
  int64_t valid_targets() const;
};

// Reads and validates a batch file (ids within [0, vocab), shapes, dtypes);
// errors name the file and the tensor.
TokenBatch load_batch_file(const std::string& path, int64_t vocab_size);
// Builds targets from labels by the shifting rule above (labels [B, S]).
std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& positions,
                                  int64_t B, int64_t S);

// One SP rank's tokens of one sequence: a contiguous slice, or with a ring layout the
// ranges parallel/token_layout.h gives it; the sequence padded so that it divides evenly
// (padding: token 0, no target, its own document).
struct SequenceShard {
  int64_t S_global = 0;  // padded length, a multiple of the group size
  int64_t offset = 0;    // global index of the first local token (the rest follow the layout)
  std::vector<int32_t> ids, targets, positions;  // [S_local]
  std::vector<int32_t> doc_start;                // [S_global]: first token of each token's document
  int64_t S_local() const { return static_cast<int64_t>(ids.size()); }
};

// The slice of row `row` for this rank of `sp_group`. Only the local slice of
// positions is read; doc_start for the whole sequence comes from an all-gather
// of global positions over the group (as a loader that reads only its slice would do).
SequenceShard shard_sequence(const TokenBatch& batch, int64_t row, Communicator& sp_group);
// The same by a token layout (layout.sp() == sp_group.size()): the row padded to
// layout.padded_length(S), this rank's tokens those of layout.rank_tokens().
SequenceShard shard_sequence(const TokenBatch& batch, int64_t row, Communicator& sp_group, const TokenLayout& layout);

// doc_start[i] = index of the first token of i's document, from global positions.
std::vector<int32_t> document_starts(const std::vector<int32_t>& positions);

}  // namespace ulysses
