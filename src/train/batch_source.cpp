#include "train/batch_source.h"

#include <sstream>

#include "data/loader.h"

namespace ulysses {
namespace {

// The data loader seen as one stream of global batches: every rank reads the
// same rows (as data-parallel rank 0 of 1) and the step deals them out.
class TokenShardBatches final : public BatchSource {
 public:
  TokenShardBatches(LoaderOptions o, std::string path) : loader_(std::move(o)), path_(std::move(path)) {}
  TokenBatch next(int64_t rows) override { return loader_.next_batch(rows); }
  nlohmann::json state() const override { return nlohmann::json::parse(loader_.state_json()); }
  void restore(const nlohmann::json& s) override {
    if (s.is_null()) loader_.restore(LoaderState{});
    else loader_.restore_json(s.dump());
  }
  std::string describe() const override {
    std::ostringstream os;
    os << path_ << " (" << loader_.total_tokens() << " tokens, " << loader_.num_sequences()
       << " sequences per epoch)";
    return os.str();
  }

 private:
  DataLoader loader_;
  std::string path_;
};

}  // namespace

std::unique_ptr<BatchSource> open_token_batches(const std::string& path, const std::string& prefix, int64_t seq_len,
                                                const std::string& mode, uint64_t seed, int64_t vocab_size) {
  LoaderOptions o;
  o.shards = resolve_shards(path, prefix);
  o.seq_len = seq_len;
  o.mode = parse_loader_mode(mode);
  o.seed = seed;
  o.vocab_limit = vocab_size;
  return std::make_unique<TokenShardBatches>(std::move(o), path);
}

}  // namespace ulysses
