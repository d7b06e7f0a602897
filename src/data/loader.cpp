#include "data/loader.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/split.h"
#include "data/permutation.h"
#include "io/regular_file.h"

namespace ulysses {

namespace fs = std::filesystem;

LoaderMode parse_loader_mode(const std::string& name) {
  if (name == "pack") return LoaderMode::Pack;
  if (name == "long") return LoaderMode::Long;
  ULY_FAIL("data loader: unknown mode '" << name << "' (expected 'pack' or 'long')");
}

const char* loader_mode_name(LoaderMode mode) { return mode == LoaderMode::Pack ? "pack" : "long"; }

DataLoader::DataLoader(LoaderOptions options) : options_(std::move(options)) {
  const int64_t S = options_.seq_len;
  ULY_CHECK(!options_.shards.empty(), "data loader: no token shards given");
  ULY_CHECK(S >= 1, "data loader: sequence length must be positive, got " << S);
  ULY_CHECK(options_.dp_size >= 1 && options_.dp_rank >= 0 && options_.dp_rank < options_.dp_size,
            "data loader: data-parallel rank " << options_.dp_rank << " of " << options_.dp_size << " is invalid");
  shard_start_.push_back(0);
  for (const std::string& path : options_.shards) {
    // Tokens are checked as rows are read (against vocab_limit too), not in a pass over everything here.
    shards_.push_back(TokenShard::open(path, /*check_tokens=*/false));
    const TokenShard& s = shards_.back();
    if (shards_.size() == 1) {
      vocab_size_ = s.vocab_size();
      tokenizer_ = s.tokenizer_name();
    }
    ULY_CHECK(s.tokenizer_name() == tokenizer_ && s.vocab_size() == vocab_size_,
              "data loader: " << path << " was made by tokenizer '" << s.tokenizer_name() << "' (vocab "
                              << s.vocab_size() << ") but " << options_.shards[0] << " by '" << tokenizer_
                              << "' (vocab " << vocab_size_ << "); all shards must share a tokenizer");
    shard_start_.push_back(shard_start_.back() + s.num_tokens());
  }
  total_tokens_ = shard_start_.back();
  check_model_vocabulary();
  if (options_.mode == LoaderMode::Pack) {
    num_sequences_ = total_tokens_ / S;
    ULY_CHECK(num_sequences_ > 0, "data loader: the shards hold " << total_tokens_ << " tokens, fewer than one sequence of "
                                                                 << S << "; use more data or a shorter data.seq_len");
  } else {
    int64_t longest = 0;
    for (size_t i = 0; i < shards_.size(); ++i)
      for (int64_t d = 0; d < shards_[i].num_documents(); ++d) {
        const int64_t len = shards_[i].document_end(d) - shards_[i].document_begin(d);
        longest = std::max(longest, len);
        if (len >= S) long_docs_.push_back({static_cast<int32_t>(i), d});
      }
    num_sequences_ = static_cast<int64_t>(long_docs_.size());
    ULY_CHECK(num_sequences_ > 0, "data loader: mode 'long' needs documents of at least " << S
                                      << " tokens; the longest has " << longest << "; use data.mode=pack or a shorter data.seq_len");
  }
}

void DataLoader::check_model_vocabulary() const {
  // Shards made with the model's tokenizer (or a smaller one) cannot hold a token the model lacks;
  // otherwise one pass finds the largest id now, rather than a step failing on it hours later.
  if (options_.vocab_limit <= 0 || vocab_size_ <= options_.vocab_limit) return;
  uint32_t largest = 0;
  size_t where = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const uint32_t* t = shards_[i].tokens();
    const uint32_t m = shards_[i].num_tokens() > 0 ? *std::max_element(t, t + shards_[i].num_tokens()) : 0;
    if (m > largest) {
      largest = m;
      where = i;
    }
  }
  ULY_CHECK(static_cast<int64_t>(largest) < options_.vocab_limit,
            shards_[where].path() << ": holds token id " << largest << " (tokenizer '" << tokenizer_ << "', vocab "
                                  << vocab_size_ << ") but the model's vocab_size is " << options_.vocab_limit
                                  << "; use a model whose vocabulary covers the data's, or prepare the data with the "
                                     "model's tokenizer");
}

std::string DataLoader::fingerprint_json() const {
  nlohmann::json shards = nlohmann::json::array();
  for (const TokenShard& s : shards_) {
    uint64_t h = mix64(static_cast<uint64_t>(s.num_tokens()) ^ 0x9E3779B97F4A7C15ull);
    for (int64_t d = 0; d <= s.num_documents(); ++d) h = mix64(h ^ s.document_offsets()[d]);
    const int64_t n = s.num_tokens(), samples = std::min<int64_t>(n, 4096);
    for (int64_t i = 0; i < samples; ++i) h = mix64(h ^ s.tokens()[i * n / samples]);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    shards.push_back({{"file", fs::path(s.path()).filename().string()},
                      {"tokens", s.num_tokens()},
                      {"documents", s.num_documents()},
                      {"hash", hex}});
  }
  return nlohmann::json({{"tokenizer", tokenizer_}, {"vocab_size", vocab_size_}, {"shards", shards}}).dump();
}

int64_t DataLoader::sequence_at(int64_t slot) const {
  const int64_t epoch = slot / num_sequences_, index = slot % num_sequences_;
  if (!options_.shuffle) return index;
  const IndexPermutation perm(static_cast<uint64_t>(num_sequences_),
                              mix64(options_.seed) ^ mix64(static_cast<uint64_t>(epoch) + 0x5EED));
  return static_cast<int64_t>(perm(static_cast<uint64_t>(index)));
}

int32_t DataLoader::checked(uint32_t token, int32_t shard, int64_t offset) const {
  const int64_t limit = options_.vocab_limit > 0 ? std::min(options_.vocab_limit, vocab_size_) : vocab_size_;
  ULY_CHECK(static_cast<int64_t>(token) < limit,
            shards_[shard].path() << ": token " << token << " at offset " << offset << " is outside the "
                                  << (options_.vocab_limit > 0 && options_.vocab_limit < vocab_size_ ? "model's " : "")
                                  << "vocabulary [0, " << limit << ")");
  return static_cast<int32_t>(token);
}

void DataLoader::read_stream(int64_t g, int64_t n, int64_t row_start, int32_t* ids, int32_t* positions,
                             uint8_t* targets_ok) const {
  if (n <= 0) return;
  auto si = static_cast<int32_t>(std::upper_bound(shard_start_.begin(), shard_start_.end(), g) - shard_start_.begin() - 1);
  int64_t t = g - shard_start_[si];
  int64_t d = shards_[si].document_of(t);
  for (int64_t i = 0; i < n; ++i, ++t) {
    while (t >= shards_[si].num_tokens()) {  // next non-empty shard
      ++si;
      t = 0;
      d = shards_[si].document_of(0);
    }
    const TokenShard& s = shards_[si];
    while (t >= s.document_end(d)) ++d;
    const int64_t doc_start = shard_start_[si] + s.document_begin(d);
    ids[i] = checked(s.tokens()[t], si, t);
    positions[i] = static_cast<int32_t>(g + i - std::max(doc_start, row_start));
    targets_ok[i] = s.loss_mask() == nullptr || s.loss_mask()[t] != 0;
  }
}

void DataLoader::read_row(int64_t seq, int64_t begin, int64_t end, int32_t* ids, int32_t* targets,
                          int32_t* positions) const {
  const int64_t S = options_.seq_len;
  ULY_CHECK(seq >= 0 && seq < num_sequences_ && begin >= 0 && begin <= end && end <= S,
            "data loader: read_row(" << seq << ", " << begin << ", " << end << ") out of range");
  const int64_t n = end - begin, n_read = std::min(end + 1, S) - begin;  // one more for the last target
  std::vector<int32_t> ids_buf(n_read), pos_buf(n_read);
  std::vector<uint8_t> mask_buf(n_read, 1);
  if (options_.mode == LoaderMode::Pack) {
    read_stream(seq * S + begin, n_read, seq * S, ids_buf.data(), pos_buf.data(), mask_buf.data());
  } else {
    const DocRef& ref = long_docs_[seq];
    const TokenShard& s = shards_[ref.shard];
    const int64_t base = s.document_begin(ref.doc);
    for (int64_t i = 0; i < n_read; ++i) {
      ids_buf[i] = checked(s.tokens()[base + begin + i], ref.shard, base + begin + i);
      pos_buf[i] = static_cast<int32_t>(begin + i);
      mask_buf[i] = s.loss_mask() == nullptr || s.loss_mask()[base + begin + i] != 0;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = ids_buf[i];
    positions[i] = pos_buf[i];
    targets[i] = (i + 1 < n_read && pos_buf[i + 1] != 0 && mask_buf[i + 1]) ? ids_buf[i + 1] : kIgnoreIndex;
  }
}

void DataLoader::row_doc_starts(int64_t seq, int64_t S_padded, int32_t* doc_start) const {
  const int64_t S = options_.seq_len;
  for (int64_t j = S; j < S_padded; ++j) doc_start[j] = static_cast<int32_t>(S);  // padding: its own document
  if (options_.mode == LoaderMode::Long) {
    std::fill(doc_start, doc_start + S, 0);
    return;
  }
  // From the document index alone: no token is read.
  const int64_t row_start = seq * S;
  int64_t j = 0;
  while (j < S) {
    const int64_t g = row_start + j;
    const auto si =
        static_cast<int32_t>(std::upper_bound(shard_start_.begin(), shard_start_.end(), g) - shard_start_.begin() - 1);
    const TokenShard& s = shards_[si];
    const int64_t d = s.document_of(g - shard_start_[si]);
    const int64_t begin = std::max(shard_start_[si] + s.document_begin(d), row_start) - row_start;
    const int64_t end = std::min(shard_start_[si] + s.document_end(d) - row_start, S);
    for (; j < end; ++j) doc_start[j] = static_cast<int32_t>(begin);
  }
}

TokenBatch DataLoader::next_batch(int64_t B) {
  ULY_CHECK(B >= 1, "data loader: batch size must be positive, got " << B);
  const int64_t S = options_.seq_len;
  TokenBatch b;
  b.B = B;
  b.S = S;
  b.ids.resize(B * S);
  b.targets.resize(B * S);
  b.positions.resize(B * S);
  const int64_t first = slot_ + options_.dp_rank * B;
  for (int64_t r = 0; r < B; ++r)
    read_row(sequence_at(first + r), 0, S, &b.ids[r * S], &b.targets[r * S], &b.positions[r * S]);
  slot_ += B * options_.dp_size;
  return b;
}

std::vector<SequenceShard> DataLoader::next_shards(int64_t B, int64_t sp_rank, int64_t sp_size) {
  ULY_CHECK(sp_size >= 1, "data loader: sequence-parallel size " << sp_size << " is invalid");
  return next_shards(B, sp_rank, TokenLayout(sp_size));
}

std::vector<SequenceShard> DataLoader::next_shards(int64_t B, int64_t sp_rank, const TokenLayout& layout) {
  const int64_t sp_size = layout.sp();
  ULY_CHECK(B >= 1, "data loader: batch size must be positive, got " << B);
  ULY_CHECK(sp_rank >= 0 && sp_rank < sp_size,
            "data loader: sequence-parallel rank " << sp_rank << " of " << sp_size << " is invalid");
  const int64_t S = options_.seq_len;
  if (layout.zigzag()) layout.check_length(S, "data.seq_len");
  const int64_t S_padded = layout.padded_length(S), S_l = S_padded / sp_size;
  const std::vector<TokenRange> ranges = layout.rank_ranges(S_padded, sp_rank);
  std::vector<SequenceShard> out(B);
  const int64_t first = slot_ + options_.dp_rank * B;
  for (int64_t r = 0; r < B; ++r) {
    SequenceShard& sh = out[r];
    const int64_t seq = sequence_at(first + r);
    sh.S_global = S_padded;
    sh.offset = ranges[0].start;
    sh.ids.assign(S_l, 0);
    sh.targets.assign(S_l, kIgnoreIndex);
    sh.positions.resize(S_l);
    int64_t local = 0;
    for (const TokenRange& g : ranges) {
      const int64_t real_begin = std::min(g.start, S), real_end = std::clamp<int64_t>(g.start + g.length, 0, S);
      if (real_begin < real_end)
        read_row(seq, real_begin, real_end, sh.ids.data() + local, sh.targets.data() + local,
                 sh.positions.data() + local);
      for (int64_t i = std::max<int64_t>(0, real_end - g.start); i < g.length; ++i)
        sh.positions[local + i] = static_cast<int32_t>(g.start + i - S);  // padding, numbered as shard_sequence does
      local += g.length;
    }
    sh.doc_start.resize(S_padded);
    row_doc_starts(seq, S_padded, sh.doc_start.data());
    // Positions count from 0 in each document (read_stream), so the longest one sets the length.
    for (int64_t g = 0; g < S; ++g) sh.rope_length = std::max<int64_t>(sh.rope_length, g - sh.doc_start[g] + 1);
  }
  slot_ += B * options_.dp_size;
  return out;
}

LoaderState DataLoader::state() const { return {slot_ / num_sequences_, slot_ % num_sequences_}; }

void DataLoader::restore(const LoaderState& s) {
  ULY_CHECK(s.epoch >= 0 && s.index >= 0 && s.index < num_sequences_,
            "data loader: state (epoch " << s.epoch << ", index " << s.index << ") is invalid for "
                                         << num_sequences_ << " sequences per epoch");
  slot_ = s.epoch * num_sequences_ + s.index;
}

std::string DataLoader::state_json() const {
  const LoaderState s = state();
  nlohmann::json j = {{"epoch", s.epoch},
                      {"index", s.index},
                      {"seed", options_.seed},
                      {"seq_len", options_.seq_len},
                      {"mode", loader_mode_name(options_.mode)},
                      {"shuffle", options_.shuffle},
                      {"num_sequences", num_sequences_}};
  return j.dump();
}

void DataLoader::restore_json(const std::string& text) {
  nlohmann::json j;
  check_json_depth(text, "data loader state");
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ULY_FAIL("data loader state: invalid JSON (" << e.what() << ")");
  }
  auto field = [&](const char* key) -> const nlohmann::json& {
    ULY_CHECK(j.is_object() && j.contains(key), "data loader state: missing field '" << key << "'");
    return j[key];
  };
  auto same = [&](const char* key, const nlohmann::json& mine) {
    ULY_CHECK(field(key) == mine, "data loader state: saved with " << key << " " << field(key).dump()
                                                                   << " but this run has " << mine.dump()
                                                                   << "; resume with the same data options");
  };
  same("seed", options_.seed);
  same("seq_len", options_.seq_len);
  same("mode", loader_mode_name(options_.mode));
  same("shuffle", options_.shuffle);
  same("num_sequences", num_sequences_);
  ULY_CHECK(field("epoch").is_number_integer() && field("index").is_number_integer(),
            "data loader state: 'epoch' and 'index' must be integers");
  restore({field("epoch").get<int64_t>(), field("index").get<int64_t>()});
}

std::vector<std::string> resolve_shards(const std::string& spec, const std::string& split) {
  std::vector<std::string> out;
  if (spec.find(',') != std::string::npos) {
    for (const std::string& piece : split_commas(spec)) {
      auto part = resolve_shards(piece, split);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  std::error_code ec;
  if (!fs::is_directory(spec, ec)) {
    ULY_CHECK(fs::exists(spec, ec), spec << ": no such token shard or folder");
    return {spec};
  }
  const fs::path manifest = fs::path(spec) / "manifest.json";
  ULY_CHECK(fs::exists(manifest, ec), spec << ": folder has no manifest.json; is it the --out of 'ulysses prepare'?");
  nlohmann::json j;
  try {
    const std::string text = read_text_file(manifest.string(), "manifest", limits::kMaxJsonBytes);
    check_json_depth(text, manifest.string());
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ULY_FAIL(manifest.string() << ": invalid JSON (" << e.what() << ")");
  }
  ULY_CHECK(j.is_object() && j.contains(split) && j[split].is_array(),
            manifest.string() << ": no '" << split << "' list of shards");
  for (const auto& s : j[split]) {
    ULY_CHECK(s.is_object() && s.contains("file") && s["file"].is_string(),
              manifest.string() << ": each '" << split << "' entry needs a 'file'");
    // Shards live in the manifest's folder: "../x" or "/x" would read outside it.
    out.push_back(confined_path(spec, s["file"].get<std::string>(), manifest.string(), "a '" + split + "' shard entry"));
  }
  ULY_CHECK(!out.empty(), manifest.string() << ": the '" << split << "' split has no shards"
                                            << (split == "val" ? " (prepare with --val-fraction > 0)" : ""));
  return out;
}

}  // namespace ulysses
