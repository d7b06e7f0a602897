// tokenizer.json's normalizer: Unicode normal forms and the string edits that
// SentencePiece-style files use (Llama 2's Prepend("▁") + Replace(" ", "▁"), Gemma's Replace).
#include "core/error.h"
#include "core/limits.h"
#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"
#include "io/unicode_normalization.h"

namespace ulysses::tok {

std::string replace_pattern(const nlohmann::json& step, const std::string& where, std::string* content) {
  ULY_CHECK(step.contains("pattern") && step["pattern"].is_object(), where << " Replace needs a 'pattern'");
  const nlohmann::json& pat = step["pattern"];
  ULY_CHECK(!pat.contains("Regex"), where << " Replace with a Regex pattern is not supported; supported: a String pattern");
  ULY_CHECK(pat.contains("String") && pat["String"].is_string() && !pat["String"].get<std::string>().empty(),
            where << " Replace pattern must be {\"String\": \"...\"} (not empty)");
  ULY_CHECK(step.contains("content") && step["content"].is_string(), where << " Replace needs a string 'content'");
  *content = step["content"].get<std::string>();
  return pat["String"].get<std::string>();
}

void replace_in(std::string& s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return;
  std::string out;
  size_t p = 0;
  for (size_t q; (q = s.find(from, p)) != std::string::npos; p = q + from.size()) {
    out.append(s, p, q - p);
    out.append(to);
  }
  out.append(s, p, std::string::npos);
  s.swap(out);
}

std::vector<NormStep> parse_normalizer(const nlohmann::json& norm, const std::string& path, int depth) {
  std::vector<NormStep> steps;
  if (norm.is_null()) return steps;
  const std::string type = json_type(norm);
  const std::string where = path + ": normalizer";
  if (type == "Sequence") {
    ULY_CHECK(norm.contains("normalizers") && norm["normalizers"].is_array(),
              where << " Sequence needs a 'normalizers' array");
    if (depth + 1 > limits::kMaxTokenizerSequenceDepth)
      refuse_nesting(path, limits::kMaxTokenizerSequenceDepth, "normalizer Sequence");
    for (const nlohmann::json& n : norm["normalizers"]) {
      auto inner = parse_normalizer(n, path, depth + 1);
      steps.insert(steps.end(), inner.begin(), inner.end());
    }
    return steps;
  }
  NormStep s;
  using T = NormStep::Type;
  if (type == "NFC") s.type = T::NFC;
  else if (type == "NFD") s.type = T::NFD;
  else if (type == "NFKC") s.type = T::NFKC;
  else if (type == "NFKD") s.type = T::NFKD;
  else if (type == "Prepend") {
    s.type = T::Prepend;
    ULY_CHECK(norm.contains("prepend") && norm["prepend"].is_string(), where << " Prepend needs a string 'prepend'");
    s.text = norm["prepend"].get<std::string>();
  } else if (type == "Replace") {
    s.type = T::Replace;
    s.text = replace_pattern(norm, where, &s.content);
  } else if (type == "Strip") {
    s.type = T::Strip;
    s.left = json_bool(norm, "strip_left", false, where + " Strip");
    s.right = json_bool(norm, "strip_right", false, where + " Strip");
  } else {
    ULY_FAIL(where << " '" << type
                   << "' is not supported; supported: NFC, NFD, NFKC, NFKD, Prepend, Replace (a String pattern), "
                      "Strip, and a Sequence of them");
  }
  steps.push_back(s);
  return steps;
}

std::string normalize(const std::vector<NormStep>& steps, std::string_view text) {
  std::string s(text);
  using T = NormStep::Type;
  using unicode::NormalForm;
  for (const NormStep& step : steps) {
    switch (step.type) {
      case T::NFC: s = unicode::normalize(s, NormalForm::NFC); break;
      case T::NFD: s = unicode::normalize(s, NormalForm::NFD); break;
      case T::NFKC: s = unicode::normalize(s, NormalForm::NFKC); break;
      case T::NFKD: s = unicode::normalize(s, NormalForm::NFKD); break;
      case T::Prepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case T::Replace: replace_in(s, step.text, step.content); break;
      case T::Strip: {
        size_t b = 0, e = s.size();
        if (step.left)
          while (b < e) {
            size_t len;
            if (!unicode::is_space(unicode::decode_utf8(s, b, &len))) break;
            b += len;
          }
        if (step.right)
          while (e > b) {
            size_t start = e - 1;
            while (start > b && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
            size_t len;
            if (!unicode::is_space(unicode::decode_utf8(s, start, &len)) || start + len != e) break;
            e = start;
          }
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

}  // namespace ulysses::tok
