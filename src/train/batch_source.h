// Where the trainer's batches come from: a stream of global batches of which
// each rank reads only its part (its DP group's rows, its SP slice of each),
// with a state that checkpoints save and resume restores exactly (every rank
// keeps the same state).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/batch.h"

namespace ulysses {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // This rank's shards of the next global batch of `rows` sequences (targets
  // shifted, -100 at document ends); rows must divide by the DP size.
  virtual std::vector<SequenceShard> next(int64_t rows) = 0;
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  virtual std::string describe() const = 0;
  // What the resume fingerprint records of the data (the tokenizer, each shard's counts and hash).
  virtual nlohmann::json fingerprint() const = 0;
};

struct MeshPosition {
  int dp_rank = 0, dp_size = 1, sp_rank = 0, sp_size = 1;
  int ring = 1;         // ring degree inside the SP group (parallel/mesh.h)
  bool zigzag = false;  // zigzag token layout over the ring
};

// Token shards from `ulysses prepare` (a folder's files matching prefix-*.tokens, or one file).
std::unique_ptr<BatchSource> open_token_batches(const std::string& path, const std::string& prefix, int64_t seq_len,
                                                const std::string& mode, uint64_t seed, int64_t vocab_size,
                                                MeshPosition where);

}  // namespace ulysses
