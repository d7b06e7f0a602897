// The training data loader: token shards -> batches of fixed-length sequences.
//
// Modes (docs/data.md):
//   pack  all documents of all shards, in order, form one token stream cut into
//         sequences of exactly S tokens (the tail shorter than S is dropped).
//         Positions restart at 0 at every document start. A document that runs
//         over a sequence end continues in the next sequence with positions
//         restarting at 0 there too: each row is self-contained (positions stay
//         below S, so RoPE never sees offsets beyond the training length), at the
//         price of the continuation not attending to its beginning.
//   long  only documents of at least S tokens, one sequence each: their first S
//         tokens, positions 0..S-1.
//
// Targets: targets[i] = ids[i+1] when i+1 < S and positions[i+1] != 0 and token i+1's
// loss-mask bit is set (shards with a loss mask, from SFT data), else -100 (no target
// across a document end, nor past the row end, nor on a prompt/template token).
//
// Order: sequence order is shuffled per epoch by a seeded pseudo-random
// permutation (no table is stored: a Feistel network over the sequence indices),
// so (seed, epoch, index) fixes the data exactly. Global slot g = epoch*N + index;
// next_batch(B) on data-parallel rank r takes slots [g + r*B, g + (r+1)*B) and
// advances g by B*dp_size, so every rank keeps the same state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/token_batch.h"
#include "io/token_shard.h"
#include "parallel/token_layout.h"

namespace ulysses {

enum class LoaderMode { Pack, Long };
LoaderMode parse_loader_mode(const std::string& name);  // "pack" | "long"
const char* loader_mode_name(LoaderMode mode);

struct LoaderOptions {
  std::vector<std::string> shards;  // token shard files, read in this order
  int64_t seq_len = 0;              // S
  LoaderMode mode = LoaderMode::Pack;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t dp_rank = 0, dp_size = 1;
  int64_t vocab_limit = 0;  // > 0: every token read must be below it (the model's vocab_size)
};

struct LoaderState {
  int64_t epoch = 0, index = 0;  // the next slot: sequence `index` of epoch `epoch`'s order
};

class DataLoader {
 public:
  explicit DataLoader(LoaderOptions options);

  int64_t num_sequences() const { return num_sequences_; }  // per epoch
  int64_t seq_len() const { return options_.seq_len; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& tokenizer_name() const { return tokenizer_; }
  int64_t total_tokens() const { return total_tokens_; }

  // The next B rows for this data-parallel rank: ids/targets/positions [B, S].
  TokenBatch next_batch(int64_t B);
  // This sequence-parallel rank's slices of the same B rows that next_batch(B)
  // would give (and the same advance): rank r of P gets tokens [r*S_l, (r+1)*S_l)
  // of each row, S_l = ceil(S/P), reading only those tokens plus one for the last
  // target. doc_start covers the whole row and comes from the document index, so no
  // all-gather is needed. Rows are padded to P*S_l as shard_sequence() pads them.
  std::vector<SequenceShard> next_shards(int64_t B, int64_t sp_rank, int64_t sp_size);
  // The same by a token layout (ring, zigzag: parallel/token_layout.h): rank sp_rank of
  // layout.sp() reads the ranges layout.rank_ranges() gives it. With zigzag, seq_len must be a
  // multiple of layout.multiple() (a clear error otherwise).
  std::vector<SequenceShard> next_shards(int64_t B, int64_t sp_rank, const TokenLayout& layout);

  LoaderState state() const;
  void restore(const LoaderState& state);
  // {"epoch", "index", "seed", "seq_len", "mode", "num_sequences"}; restoring checks
  // that seed, seq_len, mode and num_sequences match this loader.
  std::string state_json() const;
  void restore_json(const std::string& json_text);

  // What the resume fingerprint records of the data (JSON): the tokenizer, and per shard its
  // file name, token and document counts and a hash of its document index and of 4096 evenly
  // spaced tokens (a sample, not every token: hashing all would be a pass over the data).
  std::string fingerprint_json() const;

  // Stateless access, for tests and tools: the sequence at a slot, and one row.
  int64_t sequence_at(int64_t slot) const;
  // Row of sequence `seq`, tokens [begin, end) of it (end <= S): ids, targets, positions [end - begin].
  void read_row(int64_t seq, int64_t begin, int64_t end, int32_t* ids, int32_t* targets, int32_t* positions) const;
  // doc_start [S_padded] of sequence `seq` (row-local indices; padding is a document of its own).
  void row_doc_starts(int64_t seq, int64_t S_padded, int32_t* doc_start) const;

 private:
  struct DocRef {
    int32_t shard;
    int64_t doc;
  };
  // Tokens [g, g+n) of the concatenated stream with positions relative to the later of
  // their document start and row_start.
  // targets_ok[i]: the token's loss-mask bit (1 where the shard has no mask).
  void read_stream(int64_t g, int64_t n, int64_t row_start, int32_t* ids, int32_t* positions,
                   uint8_t* targets_ok) const;
  int32_t checked(uint32_t token, int32_t shard, int64_t offset) const;
  // Refuses shards holding a token id at or above vocab_limit (the model's vocab_size).
  void check_model_vocabulary() const;

  LoaderOptions options_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> shard_start_;  // [shards + 1]: stream offset of each shard
  std::vector<DocRef> long_docs_;     // long mode: the documents with >= S tokens
  int64_t num_sequences_ = 0, total_tokens_ = 0, vocab_size_ = 0;
  std::string tokenizer_;
  int64_t slot_ = 0;  // global slot of the next sequence
};

// Shard files from: a folder written by `ulysses prepare` (its manifest.json's
// `split` list: "train" or "val"), a single .tokens file, or a comma-separated list.
std::vector<std::string> resolve_shards(const std::string& spec, const std::string& split = "train");

}  // namespace ulysses
