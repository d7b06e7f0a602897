// Added (special) tokens are cut out of the raw text before pre-tokenisation:
// "<|end_of_text|>" written in a document becomes that one token, never the
// BPE pieces of its characters (HF's behaviour for encode()).
#include <algorithm>

#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"

namespace ulysses::tok {

namespace {

bool is_word_char(uint32_t c) { return c == '_' || unicode::is_letter(c) || unicode::is_number(c); }

// The code point that ends just before byte offset i.
uint32_t char_before(std::string_view s, size_t i, size_t* start) {
  size_t b = i;
  do {
    --b;
  } while (b > 0 && i - b < 4 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80);
  size_t len;
  uint32_t c = unicode::decode_utf8(s, b, &len);
  if (b + len != i) {  // not a well-formed character: treat the last byte alone
    b = i - 1;
    c = unicode::kInvalid;
  }
  *start = b;
  return c;
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].content.empty()) add(groups_[tokens_[i].normalized ? 1 : 0], static_cast<int32_t>(i));
}

void AddedTokenSplitter::add(Trie& trie, int32_t token_index) {
  int32_t node = 0;
  for (char ch : tokens_[token_index].content) {
    const auto c = static_cast<uint8_t>(ch);
    auto& next = trie.nodes[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), c,
                               [](const std::pair<uint8_t, int32_t>& e, uint8_t v) { return e.first < v; });
    if (it != next.end() && it->first == c) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(trie.nodes.size());
      next.insert(it, {c, child});
      trie.nodes.emplace_back();  // invalidates `next`; not used after this
      node = child;
    }
  }
  if (trie.nodes[node].token < 0) trie.nodes[node].token = token_index;  // duplicates: the first one wins
}

void AddedTokenSplitter::split_group(const Trie& trie, std::string_view text, size_t begin, size_t end,
                                     std::vector<Segment>& out) const {
  if (trie.nodes[0].next.empty()) {  // no tokens in this group
    if (end > begin) out.push_back({begin, end, -1});
    return;
  }
  size_t last = begin, pos = begin;
  while (pos < end) {
    // Longest token starting at pos.
    int32_t node = 0, best = -1;
    size_t best_end = pos;
    for (size_t j = pos; j < end; ++j) {
      const auto& next = trie.nodes[node].next;
      const auto c = static_cast<uint8_t>(text[j]);
      auto it = std::lower_bound(next.begin(), next.end(), c,
                                 [](const std::pair<uint8_t, int32_t>& e, uint8_t v) { return e.first < v; });
      if (it == next.end() || it->first != c) break;
      node = it->second;
      if (trie.nodes[node].token >= 0) {
        best = trie.nodes[node].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    size_t s = pos, e = best_end;
    if (tok.single_word) {
      size_t unused, len;
      const bool word_before = s > begin && is_word_char(char_before(text, s, &unused));
      const bool word_after = e < end && is_word_char(unicode::decode_utf8(text, e, &len));
      if (word_before || word_after) {  // not a word of its own: the match stays ordinary text
        pos = e;
        continue;
      }
    }
    if (tok.lstrip) {
      while (s > last) {
        size_t start;
        if (!unicode::is_space(char_before(text, s, &start))) break;
        s = start;
      }
    }
    if (tok.rstrip) {
      while (e < end) {
        size_t len;
        if (!unicode::is_space(unicode::decode_utf8(text, e, &len))) break;
        e += len;
      }
    }
    if (s > last) out.push_back({last, s, -1});
    out.push_back({s, e, tok.id});
    last = pos = e;
  }
  if (end > last) out.push_back({last, end, -1});
}

std::vector<AddedTokenSplitter::Segment> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<Segment> first, out;
  split_group(groups_[0], text, 0, text.size(), first);
  for (const Segment& seg : first) {
    if (seg.id >= 0) out.push_back(seg);
    else split_group(groups_[1], text, seg.begin, seg.end, out);
  }
  return out;
}

std::vector<AddedTokenSplitter::Segment> AddedTokenSplitter::split_unnormalized(std::string_view text) const {
  std::vector<Segment> out;
  split_group(groups_[0], text, 0, text.size(), out);
  return out;
}

std::vector<AddedTokenSplitter::Segment> AddedTokenSplitter::split_normalized(std::string_view text) const {
  std::vector<Segment> out;
  split_group(groups_[1], text, 0, text.size(), out);
  return out;
}

}  // namespace ulysses::tok
