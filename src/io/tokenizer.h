// Tokenizers: text <-> token ids.
//
//   byte   every byte is a token (ids 0..255), BOS = 256, EOS = 257, vocab 258.
//          Needs no file; the default of `ulysses prepare`.
//   HF     a Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2, Llama 3,
//          Qwen 2/3, Mistral's tekken and the many models that copy them) or SentencePiece-style with
//          byte fallback (Llama 2, Mistral, Gemma), with NFC/NFKC/... normalizers:
//          see docs/data.md for the exact subset, and load_hf_tokenizer for what is refused.
//
// encode/decode are const and safe to call from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ulysses {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special_tokens: apply the post-processor (e.g. Llama 3's leading
  // <|begin_of_text|>; the byte tokenizer's BOS). Special tokens written in the
  // text are recognised either way, as Hugging Face does.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const = 0;
  // Ids outside [0, vocab_size) are an error; ids inside it that name no token are skipped
  // (as HF does). The result is valid UTF-8 for HF tokenizers (ill-formed bytes become U+FFFD)
  // and the raw bytes for the byte tokenizer.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  // One past the largest id (model vocabulary and added tokens).
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // The id of the token spelled `content` (an added/special token, or a vocabulary entry).
  virtual std::optional<int32_t> token_id(std::string_view content) const = 0;
  // Identifies the tokenizer in token shards: "byte", or "hf-bpe:<folder>:<content hash>".
  virtual std::string name() const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

// `path` is a tokenizer.json or a folder holding one. BOS/EOS come from a
// tokenizer_config.json beside it (bos_token/eos_token) when there is one, else
// from the post-processor template (BOS) and the usual end-of-text token names (EOS).
// Throws ulysses::Error naming the file for a missing file, invalid JSON, or a
// tokenizer outside the supported subset (which part, and what is supported).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);

// "byte" (or empty) -> the byte tokenizer; anything else -> load_hf_tokenizer(spec).
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec);

}  // namespace ulysses
