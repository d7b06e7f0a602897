#include "train/rank_agreement.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ulysses {
namespace {

// "a.b[2].c=<json>\n" per leaf, in document order: comparable as text, readable per key.
void flatten(const nlohmann::json& j, const std::string& path, std::string& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(*it, path.empty() ? it.key() : path + "." + it.key(), out);
  } else if (j.is_array() && !j.empty()) {
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], path + "[" + std::to_string(i) + "]", out);
  } else {
    out += path + "=" + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::pair<std::string, std::string>> lines_of(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    const std::string line = text.substr(p, e - p);
    const size_t eq = line.find('=');
    out.emplace_back(line.substr(0, eq), eq == std::string::npos ? "" : line.substr(eq + 1));
    p = e + 1;
  }
  return out;
}

// The first key whose value differs, in a's order; then a key only one side has.
std::string first_difference(const std::string& a, const std::string& b, int rank_b, int* differing) {
  const auto la = lines_of(a), lb = lines_of(b);
  std::map<std::string, std::string> mb(lb.begin(), lb.end()), ma(la.begin(), la.end());
  std::string first;
  *differing = 0;
  auto note = [&](const std::string& d) {
    if (first.empty()) first = d;
    ++*differing;
  };
  for (const auto& [k, v] : la) {
    const auto it = mb.find(k);
    if (it == mb.end()) note("'" + k + "' is " + v + " on rank 0 but absent on rank " + std::to_string(rank_b));
    else if (it->second != v)
      note("'" + k + "' is " + v + " on rank 0 but " + it->second + " on rank " + std::to_string(rank_b));
  }
  for (const auto& [k, v] : lb)
    if (!ma.count(k)) note("'" + k + "' is absent on rank 0 but " + v + " on rank " + std::to_string(rank_b));
  return first;
}

}  // namespace

void check_ranks_agree(Communicator& world, const nlohmann::json& what, const std::string& context) {
  if (world.size() == 1) return;
  std::string text;
  flatten(what, "", text);
  // Fixed-size first (the same count on every rank whatever they hold): length and hash.
  const int64_t mine[2] = {static_cast<int64_t>(text.size()), static_cast<int64_t>(fnv1a(text))};
  std::vector<int64_t> all(2 * static_cast<size_t>(world.size()));
  world.all_gather(mine, all.data(), 2, DType::I64);
  bool same = true;
  int64_t longest = 0;
  for (int r = 0; r < world.size(); ++r) {
    same = same && all[2 * r] == all[0] && all[2 * r + 1] == all[1];
    longest = std::max(longest, all[2 * r]);
  }
  if (same) return;
  // They differ: every rank's text, padded to the longest (a size all ranks computed alike).
  std::vector<char> padded(static_cast<size_t>(longest), '\0'), texts(padded.size() * world.size());
  std::memcpy(padded.data(), text.data(), text.size());
  world.all_gather(padded.data(), texts.data(), padded.size(), DType::U8);
  auto text_of = [&](int r) { return std::string(texts.data() + padded.size() * r, static_cast<size_t>(all[2 * r])); };
  const std::string zero = text_of(0);
  int other = 1;
  while (other < world.size() && text_of(other) == zero) ++other;
  int differing = 0, ranks = 0;
  for (int r = 1; r < world.size(); ++r) ranks += text_of(r) != zero;
  const std::string first = first_difference(zero, text_of(other), other, &differing);
  std::ostringstream msg;
  msg << context << ": the ranks disagree at start-up: " << first;
  if (differing > 1) msg << " (and " << differing - 1 << " more key" << (differing > 2 ? "s" : "") << ")";
  if (ranks > 1) msg << "; " << ranks << " ranks differ from rank 0";
  msg << "; start every rank with the same config, model, data and options";
  if (world.rank() == 0) ULY_FAIL(msg.str());
  world.barrier();  // rank 0 reports and aborts the job; one line, not one per rank
  ULY_FAIL(msg.str());
}

}  // namespace ulysses
