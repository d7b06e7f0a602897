// The pre-tokenizers: Split, ByteLevel and Metaspace. std::regex has neither
// Unicode classes nor lookahead, so the regexes in use (GPT-2's, Llama 3's and
// its single-digit variant, Mistral's tekken one) are implemented by hand: at each
// position the alternatives are tried in order, with the outcome Oniguruma's
// backtracking gives.
#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"

namespace ulysses::tok {

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3's regex with single digits (Qwen 2 and others).
static const char* const kLlama3SingleDigitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The split of Mistral's tekken.json as transformers converts it: Llama 3's without the
// contractions, words cut at case changes (marks belong to words), single digits, and
// slashes after punctuation's line breaks.
const char* const kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kTekkenWordsRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<KnownRegex> recognise_regex(std::string_view pattern) {
  if (pattern == kGpt2Regex) return KnownRegex{KnownRegex::Kind::Gpt2, 0};
  if (pattern == kTekkenRegex) return KnownRegex{KnownRegex::Kind::Tekken, 1, true};
  if (pattern == kTekkenWordsRegex) return KnownRegex{KnownRegex::Kind::Tekken, 1, false};
  if (pattern == kLlama3Regex) return KnownRegex{KnownRegex::Kind::Llama3, 3};
  if (pattern == kLlama3SingleDigitRegex) return KnownRegex{KnownRegex::Kind::Llama3, 1};
  return std::nullopt;
}

namespace {

using unicode::decode_utf8;
using unicode::is_letter;
using unicode::is_number;
using unicode::is_space;

constexpr size_t kNoMatch = static_cast<size_t>(-1);

// A cursor over the code points of a text.
struct Text {
  std::string_view s;
  uint32_t at(size_t i, size_t* len) const { return decode_utf8(s, i, len); }
  uint32_t at(size_t i) const {
    size_t len;
    return decode_utf8(s, i, &len);
  }
  size_t next(size_t i) const {
    size_t len;
    decode_utf8(s, i, &len);
    return i + len;
  }
  // End of the run of characters satisfying `pred` that starts at i.
  template <class Pred>
  size_t run(size_t i, Pred pred) const {
    while (i < s.size()) {
      size_t len;
      if (!pred(decode_utf8(s, i, &len))) break;
      i += len;
    }
    return i;
  }
};

bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }  // [^\s\p{L}\p{N}]
bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

// 's|'t|'re|'ve|'m|'ll|'d after an apostrophe at p; case-insensitive for Llama 3,
// where Unicode case folding also lets the long s (U+017F) stand for s.
size_t match_contraction(const Text& t, size_t p, bool ignore_case) {
  if (t.s[p] != '\'') return kNoMatch;
  auto lower = [&](size_t i, size_t* len) -> uint32_t {
    if (i >= t.s.size()) {
      *len = 0;
      return 0;
    }
    uint32_t c = t.at(i, len);
    if (ignore_case) {
      if (c >= 'A' && c <= 'Z') c += 32;
      if (c == 0x17F) c = 's';
    }
    return c;
  };
  size_t l1, l2;
  const uint32_t c1 = lower(p + 1, &l1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p + 1 + l1;
  if (l1 == 0) return kNoMatch;
  const uint32_t c2 = lower(p + 1 + l1, &l2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return p + 1 + l1 + l2;
  return kNoMatch;
}

// \s+(?!\S) then \s+ at p (c0 = the character at p, a space).
size_t match_space_run(const Text& t, size_t p) {
  const size_t e = t.run(p, is_space);
  if (e == t.s.size()) return e;
  // Give back the last space so that it can prefix the next word.
  size_t last = p, i = p;
  while (i < e) {
    last = i;
    i = t.next(i);
  }
  return last > p ? last : e;
}

size_t match_gpt2(const Text& t, size_t p) {
  size_t len0;
  const uint32_t c0 = t.at(p, &len0);
  const size_t m = match_contraction(t, p, false);
  if (m != kNoMatch) return m;
  const bool space = c0 == ' ' && p + 1 < t.s.size();
  const uint32_t c1 = space ? t.at(p + 1) : 0;
  if (space && is_letter(c1)) return t.run(p + 1, is_letter);  //  ?\p{L}+
  if (is_letter(c0)) return t.run(p, is_letter);
  if (space && is_number(c1)) return t.run(p + 1, is_number);  //  ?\p{N}+
  if (is_number(c0)) return t.run(p, is_number);
  if (space && is_other(c1)) return t.run(p + 1, is_other);  //  ?[^\s\p{L}\p{N}]+
  if (is_other(c0)) return t.run(p, is_other);
  return match_space_run(t, p);  // \s+(?!\S)|\s+
}

size_t match_llama3(const Text& t, size_t p, int max_digits) {
  size_t len0;
  const uint32_t c0 = t.at(p, &len0);
  const size_t m = match_contraction(t, p, true);
  if (m != kNoMatch) return m;
  const size_t p1 = p + len0;
  const uint32_t c1 = p1 < t.s.size() ? t.at(p1) : 0;
  const bool has_c1 = p1 < t.s.size();
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_crlf(c0) && !is_letter(c0) && !is_number(c0) && has_c1 && is_letter(c1)) return t.run(p1, is_letter);
  if (is_letter(c0)) return t.run(p, is_letter);
  // \p{N}{1,3}
  if (is_number(c0)) {
    size_t i = p;
    for (int k = 0; k < max_digits && i < t.s.size(); ++k) {
      size_t len;
      if (!is_number(t.at(i, &len))) break;
      i += len;
    }
    return i;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t q = kNoMatch;
  if (c0 == ' ' && has_c1 && is_other(c1)) q = p1;
  else if (is_other(c0)) q = p;
  if (q != kNoMatch) return t.run(t.run(q, is_other), is_crlf);
  // \s*[\r\n]+ : up to and including the last \r or \n of the space run
  const size_t e = t.run(p, is_space);
  size_t end = kNoMatch;
  for (size_t i = p; i < e;) {
    size_t len;
    if (is_crlf(t.at(i, &len))) end = i + len;
    i += len;
  }
  if (end != kNoMatch) return end;
  return match_space_run(t, p);  // \s+(?!\S)|\s+
}

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]: every letter but the
// lowercase (resp. upper- and titlecase) ones, and the marks.
bool is_case_upper(uint32_t c) { return (is_letter(c) && !unicode::is_lower_letter(c)) || unicode::is_mark(c); }
bool is_case_lower(uint32_t c) { return (is_letter(c) && !unicode::is_upper_or_title_letter(c)) || unicode::is_mark(c); }

// U*W+ at q (U, W: the two classes above, which overlap). U* takes its longest run; if
// W+ cannot follow, U* gives back one character at a time until one it gave back is in
// W, where W+ then matches that one character (the rest of the run is not in W).
size_t match_upper_then_lower(const Text& t, size_t q) {
  size_t i = q, last_lower = kNoMatch;
  while (i < t.s.size()) {
    size_t len;
    const uint32_t c = t.at(i, &len);
    if (!is_case_upper(c)) break;
    if (is_case_lower(c)) last_lower = i;
    i += len;
  }
  if (i < t.s.size() && is_case_lower(t.at(i))) return t.run(i, is_case_lower);
  return last_lower == kNoMatch ? kNoMatch : t.next(last_lower);
}

// U+W* at q.
size_t match_upper_word(const Text& t, size_t q) {
  const size_t e = t.run(q, is_case_upper);
  return e == q ? kNoMatch : t.run(e, is_case_lower);
}

// [\p{L}\p{M}]+ at q (the word of kTekkenWordsRegex).
bool is_letter_or_mark(uint32_t c) { return is_letter(c) || unicode::is_mark(c); }
size_t match_letters_and_marks(const Text& t, size_t q) {
  const size_t e = t.run(q, is_letter_or_mark);
  return e == q ? kNoMatch : e;
}

size_t match_tekken(const Text& t, size_t p, bool case_split) {
  size_t len0;
  const uint32_t c0 = t.at(p, &len0);
  const size_t p1 = p + len0;
  const bool has_c1 = p1 < t.s.size();
  // [^\r\n\p{L}\p{N}]? before each word alternative: taken first, then left out.
  const bool prefix = has_c1 && !is_crlf(c0) && !is_letter(c0) && !is_number(c0);
  using Word = size_t (*)(const Text&, size_t);
  const std::initializer_list<Word> words = {match_upper_then_lower, match_upper_word};
  const std::initializer_list<Word> plain = {match_letters_and_marks};
  for (Word word : case_split ? words : plain) {
    if (prefix) {
      const size_t e = word(t, p1);
      if (e != kNoMatch) return e;
    }
    const size_t e = word(t, p);
    if (e != kNoMatch) return e;
  }
  if (is_number(c0)) return p1;  // \p{N}
  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
  size_t q = kNoMatch;
  if (c0 == ' ' && has_c1 && is_other(t.at(p1))) q = p1;
  else if (is_other(c0)) q = p;
  if (q != kNoMatch) return t.run(t.run(q, is_other), [](uint32_t c) { return is_crlf(c) || c == '/'; });
  // \s*[\r\n]+ : up to and including the last \r or \n of the space run
  const size_t e = t.run(p, is_space);
  size_t end = kNoMatch;
  for (size_t i = p; i < e;) {
    size_t len;
    if (is_crlf(t.at(i, &len))) end = i + len;
    i += len;
  }
  if (end != kNoMatch) return end;
  return match_space_run(t, p);  // \s+(?!\S)|\s+
}

}  // namespace

void regex_matches(const KnownRegex& re, std::string_view text, std::vector<std::pair<size_t, size_t>>& out) {
  const Text t{text};
  size_t p = 0;
  while (p < text.size()) {
    const size_t e = re.kind == KnownRegex::Kind::Gpt2     ? match_gpt2(t, p)
                     : re.kind == KnownRegex::Kind::Tekken ? match_tekken(t, p, re.case_split)
                                                           : match_llama3(t, p, re.max_digits);
    if (e == kNoMatch || e <= p) {  // every character matches some alternative; kept for safety
      p = t.next(p);
      continue;
    }
    out.emplace_back(p, e);
    p = e;
  }
}

namespace {

struct Span {
  size_t begin, end;
  bool is_match;
};

// Cuts `text` at the matches and groups the parts by `behavior` (HF's SplitDelimiterBehavior).
void split_by(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
              bool invert, std::vector<std::string>& out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});

  std::vector<Span> parts;
  switch (behavior) {
    case SplitBehavior::Isolated:
      parts = spans;
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) parts.push_back(s);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !parts.empty()) parts.back().end = s.end;
        else parts.push_back(s);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool next_match = false;  // walking backwards
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !next_match && !parts.empty()) parts.back().begin = it->begin;
        else parts.push_back(*it);
        next_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match == prev_match && !parts.empty()) parts.back().end = s.end;
        else parts.push_back(s);
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (const Span& s : parts)
    if (s.end > s.begin) out.emplace_back(text.substr(s.begin, s.end - s.begin));
}

void literal_matches(std::string_view text, std::string_view needle, std::vector<std::pair<size_t, size_t>>& out) {
  if (needle.empty()) return;
  for (size_t p = text.find(needle); p != std::string_view::npos; p = text.find(needle, p + needle.size()))
    out.emplace_back(p, p + needle.size());
}

}  // namespace

void pre_tokenize(const std::vector<PreTokStep>& steps, std::string_view text, std::vector<std::string>& pieces,
                  bool at_text_start) {
  pieces.clear();
  if (text.empty()) return;
  pieces.emplace_back(text);
  std::vector<std::string> next;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const PreTokStep& step : steps) {
    next.clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& piece = pieces[i];
      matches.clear();
      if (step.type == PreTokStep::Type::Metaspace) {
        replace_in(piece, " ", step.replacement);
        const bool first = at_text_start && i == 0;
        if (piece.compare(0, step.replacement.size(), step.replacement) != 0 &&
            (step.prepend == PrependScheme::Always || (step.prepend == PrependScheme::First && first)))
          piece.insert(0, step.replacement);
        if (!step.split) {
          next.push_back(std::move(piece));
          continue;
        }
        literal_matches(piece, step.replacement, matches);
        split_by(piece, matches, SplitBehavior::MergedWithNext, false, next);
      } else if (step.type == PreTokStep::Type::ByteLevel) {
        if (step.add_prefix_space && piece[0] != ' ') piece.insert(piece.begin(), ' ');
        if (!step.use_regex) {
          next.push_back(std::move(piece));
          continue;
        }
        regex_matches(KnownRegex{KnownRegex::Kind::Gpt2, 0}, piece, matches);
        split_by(piece, matches, SplitBehavior::Isolated, false, next);
      } else {
        if (step.literal) literal_matches(piece, step.literal_text, matches);
        else regex_matches(step.regex, piece, matches);
        split_by(piece, matches, step.behavior, step.invert, next);
      }
    }
    pieces.swap(next);
  }
}

// ---- reading the pre_tokenizer of tokenizer.json -----------------------------------

std::string json_type(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  ULY_CHECK(j[key].is_boolean(), where << ": field '" << key << "' must be true or false");
  return j[key].get<bool>();
}

std::vector<PreTokStep> parse_pre_tokenizer(const nlohmann::json& pre, const std::string& path) {
  std::vector<PreTokStep> steps;
  const char* supported =
      "supported: ByteLevel, Split (the GPT-2, Llama 3 or tekken regex, or a string), Metaspace, and a Sequence of "
      "them";
  if (pre.is_null()) return steps;
  std::vector<const nlohmann::json*> items;
  if (json_type(pre) == "Sequence") {
    ULY_CHECK(pre.contains("pretokenizers") && pre["pretokenizers"].is_array(),
              path << ": pre_tokenizer Sequence needs a 'pretokenizers' array");
    for (const nlohmann::json& p : pre["pretokenizers"]) items.push_back(&p);
  } else {
    items.push_back(&pre);
  }
  for (const nlohmann::json* p : items) {
    const std::string type = json_type(*p);
    PreTokStep step;
    if (type == "ByteLevel") {
      step.type = PreTokStep::Type::ByteLevel;
      step.add_prefix_space = json_bool(*p, "add_prefix_space", false, path + ": pre_tokenizer ByteLevel");
      step.use_regex = json_bool(*p, "use_regex", true, path + ": pre_tokenizer ByteLevel");
    } else if (type == "Metaspace") {
      step.type = PreTokStep::Type::Metaspace;
      const std::string where = path + ": pre_tokenizer Metaspace";
      parse_metaspace(*p, where, &step.replacement, &step.prepend);
      step.split = json_bool(*p, "split", true, where);
    } else if (type == "Split") {
      step.type = PreTokStep::Type::Split;
      ULY_CHECK(p->contains("pattern") && (*p)["pattern"].is_object(), path << ": pre_tokenizer Split needs a 'pattern'");
      const nlohmann::json& pat = (*p)["pattern"];
      if (pat.contains("Regex") && pat["Regex"].is_string()) {
        const std::string re = pat["Regex"].get<std::string>();
        auto known = tok::recognise_regex(re);
        ULY_CHECK(known.has_value(), path << ": unsupported pre-tokenizer regex '" << re
                                           << "'; supported: the GPT-2 and Llama 3 patterns (and Llama 3's with single "
                                              "digits), and Mistral's tekken pattern (with or without the split at "
                                              "case changes)");
        step.regex = *known;
      } else if (pat.contains("String") && pat["String"].is_string()) {
        step.literal = true;
        step.literal_text = pat["String"].get<std::string>();
      } else {
        ULY_FAIL(path << ": pre_tokenizer Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
      }
      const std::string behavior = p->contains("behavior") && (*p)["behavior"].is_string()
                                       ? (*p)["behavior"].get<std::string>() : "";
      using B = tok::SplitBehavior;
      if (behavior == "Isolated") step.behavior = B::Isolated;
      else if (behavior == "Removed") step.behavior = B::Removed;
      else if (behavior == "MergedWithPrevious") step.behavior = B::MergedWithPrevious;
      else if (behavior == "MergedWithNext") step.behavior = B::MergedWithNext;
      else if (behavior == "Contiguous") step.behavior = B::Contiguous;
      else ULY_FAIL(path << ": pre_tokenizer Split behavior '" << behavior << "' is not one of Isolated, Removed, "
                                "MergedWithPrevious, MergedWithNext, Contiguous");
      step.invert = json_bool(*p, "invert", false, path + ": pre_tokenizer Split");
    } else {
      ULY_FAIL(path << ": pre_tokenizer '" << type << "' is not supported; " << supported);
    }
    steps.push_back(step);
  }
  int byte_levels = 0;
  for (const PreTokStep& s : steps) byte_levels += s.type == PreTokStep::Type::ByteLevel;
  ULY_CHECK(byte_levels == 0 || (byte_levels == 1 && steps.back().type == PreTokStep::Type::ByteLevel),
            path << ": a ByteLevel pre_tokenizer step must be the last one, and only one (a byte-level BPE "
                    "tokenizer); " << supported);
  return steps;
}

// ---- ByteLevel's byte <-> character table ----------------------------------------

namespace {

struct ByteTable {
  std::array<uint32_t, 256> to_char{};
  ByteTable() {
    // Printable bytes stand for themselves; the others take the code points from 256 up, in order.
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_char[b] = printable ? static_cast<uint32_t>(b) : extra++;
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

}  // namespace

uint32_t byte_to_char(uint8_t b) { return byte_table().to_char[b]; }

int char_to_byte(uint32_t cp) {
  if (cp < 256) return byte_table().to_char[cp] == cp ? static_cast<int>(cp) : -1;
  if (cp >= 256 + 68) return -1;  // 68 = number of non-printable bytes
  for (int b = 0; b < 256; ++b)
    if (byte_table().to_char[b] == cp) return b;
  return -1;
}

std::string to_byte_level(std::string_view raw) {
  std::string out;
  for (char c : raw) unicode::append_utf8(out, byte_to_char(static_cast<uint8_t>(c)));
  return out;
}

bool from_byte_level(std::string_view spelled, std::string* raw) {
  raw->clear();
  for (size_t i = 0; i < spelled.size();) {
    size_t len;
    const uint32_t cp = decode_utf8(spelled, i, &len);
    const int b = cp == unicode::kInvalid ? -1 : char_to_byte(cp);
    if (b < 0) return false;
    raw->push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

}  // namespace ulysses::tok
