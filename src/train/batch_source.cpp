#include "train/batch_source.h"

#include <sstream>

#include "core/error.h"
#include "data/loader.h"

namespace ulysses {
namespace {

// The data loader as a stream of global batches: rank (dp, sp) reads only its
// DP group's rows and, of each, only its SP slice.
class TokenShardBatches final : public BatchSource {
 public:
  TokenShardBatches(LoaderOptions o, std::string path, MeshPosition where)
      : loader_(std::move(o)), path_(std::move(path)), where_(where) {}
  std::vector<SequenceShard> next(int64_t rows) override {
    ULY_CHECK(rows % where_.dp_size == 0, "a step of " << rows << " sequences cannot be dealt evenly to "
                                                       << where_.dp_size
                                                       << " data-parallel groups; make batch_size x grad_accum a "
                                                          "multiple of the data-parallel degree");
    return loader_.next_shards(rows / where_.dp_size, where_.sp_rank,
                               TokenLayout(where_.sp_size, where_.ring, where_.zigzag));
  }
  nlohmann::json state() const override { return nlohmann::json::parse(loader_.state_json()); }
  void restore(const nlohmann::json& s) override {
    if (s.is_null()) loader_.restore(LoaderState{});
    else loader_.restore_json(s.dump());
  }
  nlohmann::json fingerprint() const override { return nlohmann::json::parse(loader_.fingerprint_json()); }
  std::string describe() const override {
    std::ostringstream os;
    os << path_ << " (" << loader_.total_tokens() << " tokens, " << loader_.num_sequences()
       << " sequences per epoch)";
    return os.str();
  }

 private:
  DataLoader loader_;
  std::string path_;
  MeshPosition where_;
};

}  // namespace

std::unique_ptr<BatchSource> open_token_batches(const std::string& path, const std::string& prefix, int64_t seq_len,
                                                const std::string& mode, uint64_t seed, int64_t vocab_size,
                                                MeshPosition where) {
  LoaderOptions o;
  o.shards = resolve_shards(path, prefix);
  o.seq_len = seq_len;
  o.mode = parse_loader_mode(mode);
  o.seed = seed;
  o.vocab_limit = vocab_size;
  o.dp_rank = where.dp_rank;
  o.dp_size = where.dp_size;
  return std::make_unique<TokenShardBatches>(std::move(o), path, where);
}

}  // namespace ulysses
