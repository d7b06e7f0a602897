// Where the trainer's batches come from: a stream of global batches (every
// rank sees the same rows; each uses only its rows and its slice of them),
// with a state that checkpoints save and resume restores exactly.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "model/batch.h"

namespace ulysses {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next `rows` sequences of seq_len tokens (targets shifted, -100 at document ends).
  virtual TokenBatch next(int64_t rows) = 0;
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  virtual std::string describe() const = 0;
};

// Token shards from `ulysses prepare` (a folder's files matching prefix-*.tokens, or one file).
std::unique_ptr<BatchSource> open_token_batches(const std::string& path, const std::string& prefix, int64_t seq_len,
                                                const std::string& mode, uint64_t seed, int64_t vocab_size);

}  // namespace ulysses
