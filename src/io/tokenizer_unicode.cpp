#include "io/tokenizer_unicode.h"

#include <algorithm>

namespace ulysses::unicode {

extern const CodeRange kLetterRanges[];
extern const size_t kLetterRanges_count;
extern const CodeRange kNumberRanges[];
extern const size_t kNumberRanges_count;
extern const CodeRange kLowerRanges[];
extern const size_t kLowerRanges_count;
extern const CodeRange kUpperTitleRanges[];
extern const size_t kUpperTitleRanges_count;
extern const CodeRange kMarkRanges[];
extern const size_t kMarkRanges_count;

namespace {

bool in_ranges(const CodeRange* r, size_t n, uint32_t cp) {
  const CodeRange* end = r + n;
  const CodeRange* it = std::upper_bound(r, end, cp, [](uint32_t c, const CodeRange& x) { return c < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}

// The valid range of the second byte after lead byte `b0` (Unicode table 3-7),
// and the total length; length 0 = not a lead byte.
int sequence_shape(uint8_t b0, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return 2;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (b0 == 0xE0) *lo = 0xA0;
    if (b0 == 0xED) *hi = 0x9F;  // no surrogates
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (b0 == 0xF0) *lo = 0x90;
    if (b0 == 0xF4) *hi = 0x8F;  // nothing above U+10FFFF
    return 4;
  }
  return 0;
}

// Number of bytes of s[i..] that form a valid prefix of a sequence (at least 1),
// and whether it is complete.
size_t valid_prefix(std::string_view s, size_t i, bool* complete) {
  uint8_t lo, hi;
  const auto b0 = static_cast<uint8_t>(s[i]);
  const int n = sequence_shape(b0, &lo, &hi);
  *complete = false;
  if (n == 0) return 1;
  size_t k = 1;
  for (; k < static_cast<size_t>(n); ++k) {
    if (i + k >= s.size()) return k;
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return k;
  }
  *complete = true;
  return k;
}

}  // namespace

uint32_t decode_utf8(std::string_view s, size_t i, size_t* length) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  bool complete;
  const size_t n = valid_prefix(s, i, &complete);
  if (!complete) {
    *length = 1;
    return kInvalid;
  }
  uint32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  *length = n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp != kInvalid && in_ranges(kLetterRanges, kLetterRanges_count, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalid && in_ranges(kNumberRanges, kNumberRanges_count, cp);
}

bool is_lower_letter(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return cp != kInvalid && in_ranges(kLowerRanges, kLowerRanges_count, cp);
}

bool is_upper_or_title_letter(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return cp != kInvalid && in_ranges(kUpperTitleRanges, kUpperTitleRanges_count, cp);
}

bool is_mark(uint32_t cp) {
  if (cp < 0x300) return false;  // the first mark is U+0300
  return cp != kInvalid && in_ranges(kMarkRanges, kMarkRanges_count, cp);
}

bool is_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete;
    const size_t n = valid_prefix(bytes, i, &complete);
    if (complete) {
      out.append(bytes.substr(i, n));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal subpart
    }
    i += n;
  }
  return out;
}

}  // namespace ulysses::unicode
