// The bits of Unicode the byte-level BPE tokenizers need: UTF-8 decoding and the
// character classes of the pre-tokenizer regexes (\p{L}, \p{N}, \s; \p{Ll},
// \p{Lu}/\p{Lt} and \p{M} for Mistral's tekken regex).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ulysses::unicode {

struct CodeRange {
  uint32_t lo, hi;  // inclusive
};

// A byte that does not start a valid UTF-8 sequence decodes to this, with length 1.
// It belongs to no class (not a letter, number or space), like a punctuation mark.
constexpr uint32_t kInvalid = 0xFFFFFFFFu;

// The code point at s[i] and its length in bytes (1 for an invalid byte).
uint32_t decode_utf8(std::string_view s, size_t i, size_t* length);
void append_utf8(std::string& out, uint32_t cp);

bool is_letter(uint32_t cp);  // general category L*
bool is_number(uint32_t cp);  // general category N*
bool is_space(uint32_t cp);   // the White_Space property (Oniguruma's \s, Rust's char::is_whitespace)
bool is_lower_letter(uint32_t cp);        // general category Ll
bool is_upper_or_title_letter(uint32_t cp);  // Lu or Lt
bool is_mark(uint32_t cp);                // general category M* (combining marks)

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal
// subpart (as Rust's String::from_utf8_lossy does).
std::string to_valid_utf8(std::string_view bytes);

}  // namespace ulysses::unicode
