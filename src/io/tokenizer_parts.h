// Internal parts of the Hugging Face byte-level BPE tokenizer (tokenizer_hf.cpp):
// the pre-tokenizer (tokenizer_pretok.cpp), the BPE model (tokenizer_bpe.cpp)
// and the added-token splitter (tokenizer_added.cpp). Exposed for the tests.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ulysses::tok {

// ---- pre-tokenizer ------------------------------------------------------------

// The pre-tokenizer regexes implemented here, spelled as in tokenizer.json.
extern const char* const kGpt2Regex;
extern const char* const kLlama3Regex;

struct KnownRegex {
  enum class Kind { Gpt2, Llama3 } kind = Kind::Gpt2;
  int max_digits = 3;  // Llama 3's \p{N}{1,3}; 1 for the \p{N} variant (Qwen 2)
};
std::optional<KnownRegex> recognise_regex(std::string_view pattern);

// Non-overlapping matches [begin, end) of `re` in `text`, leftmost first, as
// Oniguruma's find_iter gives them (alternatives tried in order, backtracking).
void regex_matches(const KnownRegex& re, std::string_view text, std::vector<std::pair<size_t, size_t>>& out);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokStep {
  enum class Type { Split, ByteLevel } type = Type::Split;
  // Split: a known regex or a literal string
  bool literal = false;
  std::string literal_text;
  KnownRegex regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
};

// Runs the steps over one stretch of text (between added tokens). The pieces
// are raw bytes: ByteLevel's byte-to-char mapping is not applied, because the
// BPE model keeps its vocabulary in raw bytes.
void pre_tokenize(const std::vector<PreTokStep>& steps, std::string_view text, std::vector<std::string>& pieces);

// Reads tokenizer.json's "pre_tokenizer" (`path` names the file in errors). Supported:
// ByteLevel, Split (a known regex or a string), and a Sequence of them ending with ByteLevel.
std::vector<PreTokStep> parse_pre_tokenizer(const nlohmann::json& pre, const std::string& path);
std::string json_type(const nlohmann::json& j);  // j["type"], or "" if none
bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where);

// ByteLevel's table of 256 printable characters standing for the bytes (GPT-2's bytes_to_unicode).
uint32_t byte_to_char(uint8_t b);
int char_to_byte(uint32_t cp);  // -1 if `cp` is not one of the 256
std::string to_byte_level(std::string_view raw);
// Undoes the mapping; false if some character is not one of the 256.
bool from_byte_level(std::string_view spelled, std::string* raw);

// ---- BPE model ----------------------------------------------------------------

struct Merge {
  int32_t left, right, result;  // ids; the merge's rank is its index in the list
};

class BpeModel {
 public:
  // vocab: raw-byte spelling -> id, for the entries spelled in the byte-level alphabet.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<Merge>& merges, bool ignore_merges);
  // Appends the ids of one pre-token (raw bytes). Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, result)
  std::array<int32_t, 256> byte_id_{};                                // -1: byte not in the vocabulary
  bool ignore_merges_;

  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  static constexpr size_t kCacheShards = 16;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

// ---- added tokens ---------------------------------------------------------------

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// Finds added tokens in raw text before pre-tokenisation, as HF's AddedVocabulary
// does: tokens with normalized=false first, then those with normalized=true in the
// text left over; leftmost-longest match; lstrip/rstrip swallow the white space
// beside a match; single_word requires no word character beside it.
class AddedTokenSplitter {
 public:
  explicit AddedTokenSplitter(const std::vector<AddedToken>& tokens);
  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: ordinary text
  };
  std::vector<Segment> split(std::string_view text) const;
  bool empty() const { return groups_[0].nodes.size() <= 1 && groups_[1].nodes.size() <= 1; }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ when a token ends here
  };
  struct Trie {
    std::vector<Node> nodes{Node{}};
  };
  void add(Trie& trie, int32_t token_index);
  void split_group(const Trie& trie, std::string_view text, size_t begin, size_t end,
                   std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  std::array<Trie, 2> groups_;  // [0]: normalized=false, [1]: normalized=true
};

}  // namespace ulysses::tok
