#include "core/nearest.h"

#include <algorithm>

namespace ulysses {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// True when every character of `small` appears in `big` in order ("lr" in "learning_rate").
static bool is_subsequence(const std::string& small, const std::string& big) {
  size_t j = 0;
  for (size_t i = 0; i < big.size() && j < small.size(); ++i)
    if (big[i] == small[j]) ++j;
  return j == small.size();
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  // Plain typos first: edit distance, where a shared prefix ("sp-degree" / "sp")
  // counts for more than a few equal letters.
  std::string best;
  size_t best_d = static_cast<size_t>(-1);
  for (const auto& c : candidates) {
    const size_t e = edit_distance(word, c);
    const bool prefix = !c.empty() && (word.rfind(c, 0) == 0 || c.rfind(word, 0) == 0);
    const size_t d = prefix ? e - std::min(e, c.size()) : e;
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (best_d <= 2) return best;
  // Then abbreviations within the same dotted section ("optimizer.lr" for "optimizer.learning_rate").
  const size_t wdot = word.rfind('.');
  const std::string wsec = wdot == std::string::npos ? "" : word.substr(0, wdot);
  const std::string wleaf = word.substr(wdot == std::string::npos ? 0 : wdot + 1);
  for (const auto& c : candidates) {
    const size_t cdot = c.rfind('.');
    const std::string csec = cdot == std::string::npos ? "" : c.substr(0, cdot);
    const std::string cleaf = c.substr(cdot == std::string::npos ? 0 : cdot + 1);
    if (wsec == csec && !cleaf.empty() && cleaf[0] == wleaf[0] &&
        (is_subsequence(cleaf, wleaf) || is_subsequence(wleaf, cleaf)))
      return c;
  }
  return best;
}

}  // namespace ulysses
