// Token shards: the tokenized training corpus, as written by `ulysses prepare`
// and read (memory-mapped) by the data loader. Layout (little-endian):
//
//   0    char[8]   magic "ULYTOKS1"
//   8    u32       version (1; 2 when the shard carries a loss mask)
//   12   u32       token dtype (1 = uint32)
//   16   u64       number of tokens N
//   24   u64       number of documents D
//   32   u64       vocabulary size (every token is below it)
//   40   u64       offset of the tokens (256)
//   48   u64       offset of the document index (256 + 4N, rounded up to 8)
//   56   u32       length of the tokenizer name (at most 192)
//   60   u32       flags: bit 0 = a loss mask follows the index (version 2); 0 in version 1
//   64   char[192] tokenizer name (Tokenizer::name()), zero-padded
//   256  u32[N]    tokens
//   ...  u64[D+1]  document start offsets into the tokens; the last one is N
//   ...  u8[N]     (version 2, flag bit 0) loss mask: 1 = the token is a training target
//                  (predicting it counts in the loss), 0 = context only (prompts, templates);
//                  starts 8-aligned after the index. Shards without masks stay version 1.
//
// docs/data.md describes the format for other readers.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace ulysses {

constexpr char kTokenShardMagic[9] = "ULYTOKS1";
constexpr uint32_t kTokenShardVersion = 1;        // without a loss mask
constexpr uint32_t kTokenShardMaskedVersion = 2;  // with one
constexpr uint32_t kTokenShardFlagLossMask = 1;
constexpr size_t kTokenShardHeaderBytes = 256;
constexpr size_t kTokenShardMaxNameBytes = 192;

// Writes a shard to `path` atomically: everything goes to a temporary file in
// the same folder, which finish() renames into place. A writer destroyed
// without finish() (e.g. by an exception) removes its temporary file.
class TokenShardWriter {
 public:
  TokenShardWriter(const std::string& path, int64_t vocab_size, const std::string& tokenizer_name);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  // ids: [n], each in [0, vocab_size). An empty document is recorded too.
  // mask: [n] or null (every token a target); any mask makes the shard version 2
  // (the mask is kept in memory until finish(): one byte per token of the shard).
  void add_document(const int32_t* ids, size_t n, const uint8_t* mask = nullptr);
  void add_document(const std::vector<int32_t>& ids) { add_document(ids.data(), ids.size()); }
  // A document given in pieces (streaming): append() any number of times, then end_document().
  void append(const int32_t* ids, size_t n, const uint8_t* mask = nullptr);
  void end_document();
  void finish();

  int64_t num_tokens() const { return static_cast<int64_t>(written_); }
  int64_t num_documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_, tokenizer_;
  int64_t vocab_size_;
  std::FILE* file_ = nullptr;
  std::vector<uint64_t> offsets_{0};
  std::vector<uint32_t> buffer_;
  std::vector<uint8_t> mask_;  // empty until a masked document arrives
  uint64_t written_ = 0;       // tokens appended so far (the open document included)
};

// A read-only, memory-mapped shard; copies share the mapping.
class TokenShard {
 public:
  // Validates the header, the size and the document index; with check_tokens
  // also that every token is below the vocabulary size (one pass over the data).
  // Errors name the file and say what is wrong (truncated, bad magic/version, ...).
  static TokenShard open(const std::string& path, bool check_tokens = true);

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_documents() const { return num_documents_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& tokenizer_name() const { return tokenizer_; }

  const uint32_t* tokens() const { return tokens_; }            // [num_tokens]
  const uint64_t* document_offsets() const { return offsets_; }  // [num_documents + 1]
  // [num_tokens] loss mask (1 = a target), or null when the shard has none (all targets).
  const uint8_t* loss_mask() const { return mask_; }
  int64_t document_begin(int64_t d) const { return static_cast<int64_t>(offsets_[d]); }
  int64_t document_end(int64_t d) const { return static_cast<int64_t>(offsets_[d + 1]); }
  // The document holding token t (for an empty document's offset, the next non-empty one).
  int64_t document_of(int64_t t) const;

 private:
  struct Mapping;
  std::shared_ptr<Mapping> map_;
  std::string path_, tokenizer_;
  int64_t num_tokens_ = 0, num_documents_ = 0, vocab_size_ = 0;
  const uint32_t* tokens_ = nullptr;
  const uint64_t* offsets_ = nullptr;
  const uint8_t* mask_ = nullptr;
};

}  // namespace ulysses
