// tokenizer.json's decoder: the chain HF runs over the tokens' spellings to give
// text back. Byte-level files use ByteLevel; SentencePiece-style files use
// Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0) (Llama 2, Mistral) or Metaspace.
#include "core/error.h"
#include "core/limits.h"
#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"

namespace ulysses::tok {

namespace {

PrependScheme metaspace_scheme(const nlohmann::json& j, const std::string& where) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    ULY_CHECK(j["prepend_scheme"].is_string(), where << ": 'prepend_scheme' must be a string");
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    ULY_FAIL(where << ": prepend_scheme '" << s << "' is not one of always, first, never");
  }
  // Files written before tokenizers 0.14 say add_prefix_space instead.
  return json_bool(j, "add_prefix_space", true, where) ? PrependScheme::Always : PrependScheme::Never;
}

// <0xNN> -> the byte, else -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[k];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

bool valid_utf8(std::string_view s) { return unicode::to_valid_utf8(s) == s; }

}  // namespace

void parse_metaspace(const nlohmann::json& j, const std::string& where, std::string* replacement,
                     PrependScheme* scheme) {
  *replacement = "\xE2\x96\x81";
  if (j.contains("replacement") && !j["replacement"].is_null()) {
    ULY_CHECK(j["replacement"].is_string(), where << ": 'replacement' must be a string");
    *replacement = j["replacement"].get<std::string>();
    size_t len = 0;
    ULY_CHECK(!replacement->empty() && unicode::decode_utf8(*replacement, 0, &len) != unicode::kInvalid &&
                  len == replacement->size(),
              where << ": 'replacement' must be one character");
  }
  *scheme = metaspace_scheme(j, where);
}

std::vector<DecodeStep> parse_decoder(const nlohmann::json& dec, const std::string& path, int depth) {
  std::vector<DecodeStep> steps;
  if (dec.is_null()) return steps;
  const std::string type = json_type(dec);
  const std::string where = path + ": decoder";
  using T = DecodeStep::Type;
  if (type == "Sequence") {
    ULY_CHECK(dec.contains("decoders") && dec["decoders"].is_array(), where << " Sequence needs a 'decoders' array");
    if (depth + 1 > limits::kMaxTokenizerSequenceDepth)
      refuse_nesting(path, limits::kMaxTokenizerSequenceDepth, "decoder Sequence");
    for (const nlohmann::json& d : dec["decoders"]) {
      auto inner = parse_decoder(d, path, depth + 1);
      steps.insert(steps.end(), inner.begin(), inner.end());
    }
    return steps;
  }
  DecodeStep s;
  if (type == "ByteLevel") {
    s.type = T::ByteLevel;
  } else if (type == "Metaspace") {
    s.type = T::Metaspace;
    parse_metaspace(dec, where + " Metaspace", &s.text, &s.prepend);
  } else if (type == "Replace") {
    s.type = T::Replace;
    s.text = replace_pattern(dec, where, &s.content);
  } else if (type == "ByteFallback") {
    s.type = T::ByteFallback;
  } else if (type == "Fuse") {
    s.type = T::Fuse;
  } else if (type == "Strip") {
    s.type = T::Strip;
    ULY_CHECK(dec.contains("content") && dec["content"].is_string(), where << " Strip needs a string 'content'");
    s.text = dec["content"].get<std::string>();
    size_t len = 0;
    ULY_CHECK(!s.text.empty() && unicode::decode_utf8(s.text, 0, &len) != unicode::kInvalid && len == s.text.size(),
              where << " Strip 'content' must be one character");
    for (const char* key : {"start", "stop"}) {
      ULY_CHECK(dec.contains(key) && dec[key].is_number_unsigned() && dec[key].get<uint64_t>() < 1000000,
                where << " Strip needs a non-negative integer '" << key << "'");
    }
    s.start = dec["start"].get<size_t>();
    s.stop = dec["stop"].get<size_t>();
  } else {
    ULY_FAIL(where << " '" << type
                   << "' is not supported; supported: ByteLevel, Metaspace, Replace (a String pattern), ByteFallback, "
                      "Fuse, Strip, and a Sequence of them");
  }
  steps.push_back(s);
  return steps;
}

std::string decode_tokens(const std::vector<DecodeStep>& steps, std::vector<std::string> tokens) {
  using T = DecodeStep::Type;
  if (steps.empty()) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return unicode::to_valid_utf8(out);
  }
  std::vector<std::string> next;
  for (const DecodeStep& step : steps) {
    next.clear();
    switch (step.type) {
      case T::ByteLevel: {  // a token all of whose characters are in the table becomes those bytes
        std::string bytes, raw;
        for (const std::string& t : tokens) bytes += from_byte_level(t, &raw) ? raw : t;
        next.push_back(unicode::to_valid_utf8(bytes));
        break;
      }
      case T::Metaspace:  // the first token loses its replacement characters (they were prepended)
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string t = tokens[i];
          replace_in(t, step.text, i == 0 && step.prepend != PrependScheme::Never ? "" : " ");
          next.push_back(std::move(t));
        }
        break;
      case T::Replace:
        for (std::string& t : tokens) {
          replace_in(t, step.text, step.content);
          next.push_back(std::move(t));
        }
        break;
      case T::ByteFallback: {  // runs of <0xNN>: their UTF-8 text, or one U+FFFD a byte if ill-formed
        std::string run;
        size_t run_tokens = 0;
        auto flush = [&] {
          if (run_tokens == 0) return;
          if (valid_utf8(run)) next.push_back(run);
          else
            for (size_t k = 0; k < run_tokens; ++k) next.push_back("\xEF\xBF\xBD");
          run.clear();
          run_tokens = 0;
        };
        for (std::string& t : tokens) {
          const int b = byte_token(t);
          if (b >= 0) {
            run += static_cast<char>(b);
            ++run_tokens;
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        break;
      }
      case T::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        next.push_back(std::move(all));
        break;
      }
      case T::Strip:  // up to `start` leading and `stop` trailing copies of the character, per token
        for (std::string& t : tokens) {
          size_t b = 0, e = t.size();
          for (size_t k = 0; k < step.start && t.compare(b, step.text.size(), step.text) == 0 && b < e; ++k)
            b += step.text.size();
          for (size_t k = 0; k < step.stop && e >= b + step.text.size() &&
                             t.compare(e - step.text.size(), step.text.size(), step.text) == 0;
               ++k)
            e -= step.text.size();
          next.push_back(t.substr(b, e - b));
        }
        break;
    }
    tokens.swap(next);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return unicode::to_valid_utf8(out);
}

}  // namespace ulysses::tok
