// Internal parts of the Hugging Face BPE tokenizer (tokenizer_hf.cpp): the
// normalizer (tokenizer_normalizer.cpp), the pre-tokenizer (tokenizer_pretok.cpp),
// the BPE model (tokenizer_bpe.cpp), the decoder (tokenizer_decoder.cpp) and the
// added-token splitter (tokenizer_added.cpp). Exposed for the tests.
//
// Two families: byte-level BPE (GPT-2, Llama 3, Qwen 2: a ByteLevel pre-tokenizer,
// the vocabulary spelled in ByteLevel's 256-character alphabet) and SentencePiece-style
// BPE (Llama 2, Mistral, Gemma: text with spaces as U+2581 "▁" through a Metaspace
// pre-tokenizer or Prepend/Replace normalizers, the vocabulary spelled in plain UTF-8,
// characters outside it spelled as <0xNN> byte tokens when byte_fallback is set).
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

// ---- normalizer ---------------------------------------------------------------

struct NormStep {
  enum class Type { NFD, NFC, NFKD, NFKC, Prepend, Replace, Strip } type = Type::NFC;
  std::string text, content;  // Prepend: text; Replace: text -> content
  bool left = false, right = false;  // Strip
};

// Reads tokenizer.json's "normalizer" (null: none). Supported: NFC, NFD, NFKC, NFKD,
// Prepend, Replace (a String pattern), Strip, and a Sequence of them.
// depth: of the Sequence being read; one nested deeper than limits::kMaxTokenizerSequenceDepth is
// refused before recursing (a hostile file could otherwise nest until the stack overflows).
std::vector<NormStep> parse_normalizer(const nlohmann::json& norm, const std::string& path, int depth = 0);
std::string normalize(const std::vector<NormStep>& steps, std::string_view text);
// A Replace step's String pattern and its content (a Regex pattern is refused, naming `where`).
std::string replace_pattern(const nlohmann::json& step, const std::string& where, std::string* content);
void replace_in(std::string& s, std::string_view from, std::string_view to);  // every occurrence

// ---- pre-tokenizer ------------------------------------------------------------

// The pre-tokenizer regexes implemented here, spelled as in tokenizer.json.
extern const char* const kGpt2Regex;
extern const char* const kLlama3Regex;
extern const char* const kTekkenRegex;  // Mistral's tekken tokenizers (NeMo and later)
// A variant of the tekken split that some of Mistral's published tokenizer.json files are
// reported to carry: words as [\p{L}\p{M}]+, without the split at case changes (transformers
// warns about such folders and swaps in kTekkenRegex when loaded with fix_mistral_regex=True).
extern const char* const kTekkenWordsRegex;

struct KnownRegex {
  enum class Kind { Gpt2, Llama3, Tekken } kind = Kind::Gpt2;
  int max_digits = 3;  // Llama 3's \p{N}{1,3}; 1 for the \p{N} variant (Qwen 2)
  bool case_split = true;  // Tekken: words cut at case changes (false: kTekkenWordsRegex)
};
std::optional<KnownRegex> recognise_regex(std::string_view pattern);

// Non-overlapping matches [begin, end) of `re` in `text`, leftmost first, as
// Oniguruma's find_iter gives them (alternatives tried in order, backtracking).
void regex_matches(const KnownRegex& re, std::string_view text, std::vector<std::pair<size_t, size_t>>& out);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

enum class PrependScheme { Always, First, Never };

struct PreTokStep {
  enum class Type { Split, ByteLevel, Metaspace } type = Type::Split;
  // Split: a known regex or a literal string
  bool literal = false;
  std::string literal_text;
  KnownRegex regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  // Metaspace: spaces become `replacement`, which is put in front as `prepend` says
  // (First: only before the text's first piece), and the text split before each one.
  std::string replacement = "\xE2\x96\x81";  // U+2581
  PrependScheme prepend = PrependScheme::Always;
  bool split = true;
};

// Runs the steps over one stretch of text (between added tokens). The pieces
// are raw bytes: ByteLevel's byte-to-char mapping is not applied, because the
// BPE model keeps its vocabulary in raw bytes. `at_text_start`: the stretch begins
// the text (Metaspace's prepend_scheme "first").
void pre_tokenize(const std::vector<PreTokStep>& steps, std::string_view text, std::vector<std::string>& pieces,
                  bool at_text_start = true);

// Reads tokenizer.json's "pre_tokenizer" (`path` names the file in errors; null: no
// steps). Supported: ByteLevel, Split (a known regex or a string), Metaspace, and a
// Sequence of them; a ByteLevel step, when there is one, comes last.
std::vector<PreTokStep> parse_pre_tokenizer(const nlohmann::json& pre, const std::string& path);
// Metaspace's replacement and prepend_scheme (add_prefix_space in older files).
void parse_metaspace(const nlohmann::json& j, const std::string& where, std::string* replacement,
                     PrependScheme* scheme);
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

struct BpeOptions {
  bool byte_level = true;     // symbols start as bytes (else as UTF-8 characters)
  bool byte_fallback = false;  // a character outside the vocabulary becomes its <0xNN> tokens
  int32_t unk_id = -1;         // what an unknown character becomes (-1: it is dropped)
  bool fuse_unk = false;       // consecutive unknown characters become one unk
  bool ignore_merges = false;  // a pre-token found whole in the vocabulary is one token
};

class BpeModel {
 public:
  // vocab: for byte_level, raw-byte spelling -> id (the entries spelled in the
  // byte-level alphabet); else the vocabulary as spelled.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<Merge>& merges, const BpeOptions& options);
  // Appends the ids of one pre-token (raw bytes). Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, result)
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;

  std::array<int32_t, 256> byte_id_{};      // -1: byte not in the vocabulary
  std::array<int32_t, 256> fallback_id_{};  // <0xNN>; -1: absent
  BpeOptions options_;

  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  static constexpr size_t kCacheShards = 16;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

// ---- decoder ------------------------------------------------------------------

struct DecodeStep {
  enum class Type { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip } type = Type::ByteLevel;
  std::string text, content;  // Replace: text -> content; Metaspace: text = replacement; Strip: text = content
  PrependScheme prepend = PrependScheme::Always;  // Metaspace
  size_t start = 0, stop = 0;                     // Strip
};

// Reads tokenizer.json's "decoder" (null: no steps). Supported: ByteLevel, Metaspace,
// Replace (a String pattern), ByteFallback, Fuse, Strip, and a Sequence of them.
// depth: as parse_normalizer's.
std::vector<DecodeStep> parse_decoder(const nlohmann::json& dec, const std::string& path, int depth = 0);
// HF's decode_chain over the tokens' spellings, then concatenated; without steps the
// tokens are joined with spaces (as HF does). Always valid UTF-8.
std::string decode_tokens(const std::vector<DecodeStep>& steps, std::vector<std::string> tokens);

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
  // Tokens with normalized=false in the raw text, then those with normalized=true in
  // what is left (for tokenizers without a normalizer).
  std::vector<Segment> split(std::string_view text) const;
  // The two steps apart, for a normalizer in between (HF normalizes each stretch
  // of raw text between the first kind, then finds the second kind in it).
  std::vector<Segment> split_unnormalized(std::string_view text) const;
  std::vector<Segment> split_normalized(std::string_view text) const;
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
