// The byte tokenizer: token = byte value, plus BOS (256) and EOS (257).
#include "core/error.h"
#include "io/tokenizer.h"

namespace ulysses {

namespace {

constexpr int32_t kByteBos = 256, kByteEos = 257, kByteVocab = 258;

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() + 1);
    if (add_special_tokens) ids.push_back(kByteBos);
    for (char c : text) ids.push_back(static_cast<uint8_t>(c));
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      ULY_CHECK(id >= 0 && id < kByteVocab,
                "byte tokenizer: id " << id << " is outside the vocabulary [0, " << kByteVocab << ")");
      if (id < 256) {
        out += static_cast<char>(id);
      } else if (!skip_special_tokens) {
        out += id == kByteBos ? "<|bos|>" : "<|eos|>";
      }
    }
    return out;
  }

  int64_t vocab_size() const override { return kByteVocab; }
  std::optional<int32_t> bos_id() const override { return kByteBos; }
  std::optional<int32_t> eos_id() const override { return kByteEos; }
  std::optional<int32_t> token_id(std::string_view content) const override {
    if (content == "<|bos|>") return kByteBos;
    if (content == "<|eos|>") return kByteEos;
    if (content.size() == 1) return static_cast<uint8_t>(content[0]);
    return std::nullopt;
  }
  std::string name() const override { return "byte"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec) {
  if (spec.empty() || spec == "byte") return make_byte_tokenizer();
  return load_hf_tokenizer(spec);
}

}  // namespace ulysses
