// Byte-pair encoding of one pre-token: start from one symbol per byte (byte-level
// BPE) or per character (SentencePiece-style BPE) and repeatedly apply the
// lowest-ranked merge among adjacent pairs (leftmost first on ties) until none
// applies. A heap of candidate pairs keeps this O(n log n) in the pre-token's
// length, so a megabyte without spaces is fine.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>

#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"

namespace ulysses::tok {

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

constexpr size_t kMaxCachedPiece = 256;     // bytes; longer pre-tokens are rare and not worth keeping
constexpr size_t kMaxCacheEntries = 1 << 15;  // per shard

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<Merge>& merges,
                   const BpeOptions& options)
    : vocab_(std::move(vocab)), options_(options) {
  byte_id_.fill(-1);
  fallback_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it != vocab_.end()) byte_id_[b] = it->second;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    it = vocab_.find(name);
    if (it != vocab_.end()) fallback_id_[b] = it->second;
  }
  merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r)
    merges_.emplace(pair_key(merges[r].left, merges[r].right),
                    std::make_pair(static_cast<int32_t>(r), merges[r].result));  // first occurrence wins
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedPiece) {
    merge_word(piece, out);
    return;
  }
  std::string key(piece);
  CacheShard& shard = cache_[std::hash<std::string>{}(key) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kMaxCacheEntries) shard.map.clear();
  shard.map.emplace(std::move(key), std::move(ids));
}

// The symbols before any merge: one per byte (byte-level), or one per character with
// HF's fallbacks for a character outside the vocabulary: its <0xNN> byte tokens when
// byte_fallback is set and all exist, else the unk token (consecutive ones fused when
// fuse_unk is set), else nothing.
void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  if (options_.byte_level) {
    for (char c : piece) {
      const int32_t id = byte_id_[static_cast<uint8_t>(c)];
      if (id >= 0) ids.push_back(id);  // a byte missing from the vocabulary is dropped, as HF does without unk_token
    }
    return;
  }
  bool unk_pending = false;
  std::string ch;
  for (size_t i = 0; i < piece.size();) {
    size_t len;
    unicode::decode_utf8(piece, i, &len);
    ch.assign(piece.substr(i, len));
    i += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (unk_pending) ids.push_back(options_.unk_id);
      unk_pending = false;
      ids.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(ch.begin(), ch.end(), [&](char b) { return fallback_id_[static_cast<uint8_t>(b)] >= 0; })) {
      for (char b : ch) ids.push_back(fallback_id_[static_cast<uint8_t>(b)]);  // (a pending unk follows, as in HF)
      continue;
    }
    if (options_.unk_id < 0) continue;
    if (unk_pending && !options_.fuse_unk) ids.push_back(options_.unk_id);
    unk_pending = true;
  }
  if (unk_pending) ids.push_back(options_.unk_id);
}

void BpeModel::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<int32_t> ids;
  initial_symbols(piece, ids);
  if (ids.empty()) return;
  std::vector<Symbol> sym(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto i = static_cast<int32_t>(k);
    sym[k] = {ids[k], i - 1, k + 1 < ids.size() ? i + 1 : -1, true};
  }

  // Candidate (rank, left symbol index); stale entries are skipped when popped.
  using Cand = std::pair<int32_t, int32_t>;
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || sym[left].next < 0) return;
    auto it = merges_.find(pair_key(sym[left].id, sym[sym[left].next].id));
    if (it != merges_.end()) heap.emplace(it->second.first, left);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);

  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    if (!sym[left].alive || sym[left].next < 0) continue;
    const int32_t right = sym[left].next;
    auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it == merges_.end() || it->second.first != rank) continue;  // the pair changed since it was pushed
    sym[left].id = it->second.second;
    sym[right].alive = false;
    sym[left].next = sym[right].next;
    if (sym[right].next >= 0) sym[sym[right].next].prev = left;
    push(sym[left].prev);
    push(left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace ulysses::tok
