// Token batches and their sequence-parallel shards: batch files, label shifting,
// sharding a batch's rows over a sequence-parallel group. The types themselves
// (TokenBatch, SequenceShard, kIgnoreIndex) are in core/token_batch.h, where the
// data loader, which makes them too, may use them.
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
#include "core/token_batch.h"
#include "parallel/token_layout.h"

namespace ulysses {

// Reads and validates a batch file (ids within [0, vocab), shapes, dtypes);
// errors name the file and the tensor.
TokenBatch load_batch_file(const std::string& path, int64_t vocab_size);
// Builds targets from labels by the shifting rule above (labels [B, S]).
std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& positions,
                                  int64_t B, int64_t S);

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
