// Normalization: full decomposition (canonical, or compatibility for the K forms),
// canonical ordering of combining marks, then for NFC/NFKC canonical composition.
// Hangul syllables are decomposed and composed arithmetically (Unicode §3.12).
#include "io/unicode_normalization.h"

#include <algorithm>
#include <vector>

#include "io/tokenizer_unicode.h"

namespace ulysses::unicode {

namespace tables {
extern const CombiningRange kCombining[];
extern const size_t kCombiningCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const uint32_t kDecompositionData[];
extern const Composition kCompositions[];
extern const size_t kCompositionCount;
}  // namespace tables

namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(uint32_t cp, bool compat, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp < 0xC0) {  // nothing below U+00A0 decomposes; U+00A0..U+00BF are compatibility mappings
    if (cp < 0xA0 || !compat) {
      out.push_back(cp);
      return;
    }
  }
  const tables::Decomposition* end = tables::kDecompositions + tables::kDecompositionCount;
  const tables::Decomposition* it = std::lower_bound(
      tables::kDecompositions, end, cp, [](const tables::Decomposition& d, uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp || (it->compat && !compat)) {
    out.push_back(cp);
    return;
  }
  for (uint8_t k = 0; k < it->length; ++k) decompose(tables::kDecompositionData[it->offset + k], compat, out);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const tables::Composition* end = tables::kCompositions + tables::kCompositionCount;
  const tables::Composition* it =
      std::lower_bound(tables::kCompositions, end, std::make_pair(a, b), [](const tables::Composition& c, auto key) {
        return c.first < key.first || (c.first == key.first && c.second < key.second);
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// Stable sort of each run of non-starters by combining class (the canonical ordering).
void reorder(std::vector<uint32_t>& cps, std::vector<uint8_t>& ccc) {
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)  // insertion sort: runs are short
      for (size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(ccc[b - 1], ccc[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    i = j;
  }
}

void compose(std::vector<uint32_t>& cps, std::vector<uint8_t>& ccc) {
  size_t out = 0;
  long starter = -1;  // index (in the output) of the last starter
  uint8_t last_cc = 0;  // class of the last character kept after that starter
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    const uint8_t cc = ccc[i];
    if (starter >= 0) {
      const bool adjacent = static_cast<size_t>(starter) + 1 == out;
      if (adjacent || (last_cc != 0 && last_cc < cc)) {  // not blocked from the starter
        if (const uint32_t comp = compose_pair(cps[starter], c)) {
          cps[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) {
      starter = static_cast<long>(out);
      last_cc = 0;
    } else {
      last_cc = cc;
    }
    cps[out] = c;
    ccc[out] = cc;
    ++out;
  }
  cps.resize(out);
  ccc.resize(out);
}

}  // namespace

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const tables::CombiningRange* end = tables::kCombining + tables::kCombiningCount;
  const tables::CombiningRange* it = std::upper_bound(
      tables::kCombining, end, cp, [](uint32_t c, const tables::CombiningRange& r) { return c < r.first; });
  return it != tables::kCombining && cp <= (it - 1)->last ? (it - 1)->cls : 0;
}

std::string normalize(std::string_view text, NormalForm form) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; }))
    return std::string(text);  // ASCII is in every normal form
  const bool compat = form == NormalForm::NFKD || form == NormalForm::NFKC;
  const bool composed = form == NormalForm::NFC || form == NormalForm::NFKC;
  std::string out;
  out.reserve(text.size());
  std::vector<uint32_t> cps;
  std::vector<uint8_t> ccc;
  // Runs of well-formed text are normalized; an ill-formed byte is copied as it is and
  // ends the run (nothing composes across it).
  auto flush = [&] {
    ccc.resize(cps.size());
    for (size_t k = 0; k < cps.size(); ++k) ccc[k] = combining_class(cps[k]);
    reorder(cps, ccc);
    if (composed) compose(cps, ccc);
    for (uint32_t c : cps) append_utf8(out, c);
    cps.clear();
  };
  for (size_t i = 0; i < text.size();) {
    size_t len;
    const uint32_t cp = decode_utf8(text, i, &len);
    if (cp == kInvalid) {
      flush();
      out += text[i];
    } else {
      decompose(cp, compat, cps);
    }
    i += len;
  }
  flush();
  return out;
}

}  // namespace ulysses::unicode
