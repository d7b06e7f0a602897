// Hugging Face tokenizer.json, BPE models (byte-level, and SentencePiece-style with
// byte fallback): reading the file into the parts of tokenizer_parts.h, and
// encode/decode on top of them.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_depth.h"
#include "core/error.h"
#include "core/limits.h"
#include "io/regular_file.h"
#include "io/tokenizer.h"
#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"

namespace ulysses {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tok::AddedToken;
using tok::PreTokStep;

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

bool null_or_empty(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

class HfBpeTokenizer final : public Tokenizer {
 public:
  explicit HfBpeTokenizer(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::optional<int32_t> token_id(std::string_view content) const override;
  std::string name() const override { return name_; }

 private:
  void load_model(const json& model);
  void load_post_processor(const json& post);
  void load_special_ids(const json& root);
  void encode_normalized(std::string_view text, bool at_text_start, std::vector<int32_t>& ids,
                         std::vector<std::string>& pieces) const;

  std::string path_, name_;
  std::vector<tok::NormStep> normalizer_;
  std::vector<PreTokStep> steps_;
  std::vector<tok::DecodeStep> decoder_;
  bool byte_level_ = true;  // a ByteLevel pre-tokenizer: the vocabulary is spelled in its alphabet
  std::unique_ptr<tok::BpeModel> model_;
  std::unique_ptr<tok::AddedTokenSplitter> added_;
  std::vector<int32_t> prefix_, suffix_;  // the post-processor's ids around a single sequence
  std::unordered_map<std::string, int32_t> spelled_vocab_, added_ids_;
  std::vector<std::string> id_token_;  // each id's spelling: the vocabulary entry or the added token's content
  std::vector<uint8_t> id_kind_;       // 0: no such token, 1: ordinary, 2: special
  int64_t vocab_size_ = 0;
  std::optional<int32_t> bos_, eos_;
};

HfBpeTokenizer::HfBpeTokenizer(const std::string& path) : path_(path) {
  const std::string text = read_text_file(path, "tokenizer", limits::kMaxTokenizerBytes);
  json root;
  check_json_depth(text, path);
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    ULY_FAIL(path << ": invalid JSON (" << e.what() << ")");
  }
  ULY_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(),
            path << ": not a Hugging Face tokenizer.json (no 'model' object)");
  if (root.contains("normalizer")) normalizer_ = tok::parse_normalizer(root["normalizer"], path);
  if (root.contains("pre_tokenizer")) steps_ = tok::parse_pre_tokenizer(root["pre_tokenizer"], path_);
  byte_level_ = std::any_of(steps_.begin(), steps_.end(),
                            [](const PreTokStep& s) { return s.type == PreTokStep::Type::ByteLevel; });
  load_model(root["model"]);

  std::vector<AddedToken> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    ULY_CHECK(root["added_tokens"].is_array(), path << ": 'added_tokens' must be an array");
    for (const json& t : root["added_tokens"]) {
      const std::string where = path + ": added_tokens entry";
      ULY_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                    t["content"].is_string(),
                where << " " << t.dump() << " needs an integer 'id' and a string 'content'");
      AddedToken a;
      ULY_CHECK(t["id"].get<int64_t>() >= 0 && t["id"].get<int64_t>() <= limits::kMaxTokenizerId,
                where << " '" << t["content"].get<std::string>() << "' has id " << t["id"].dump()
                      << ", outside [0, " << limits::kMaxTokenizerId << "] (the supported token ids)");
      a.id = t["id"].get<int32_t>();
      a.content = t["content"].get<std::string>();
      a.special = tok::json_bool(t, "special", false, where);
      a.lstrip = tok::json_bool(t, "lstrip", false, where);
      a.rstrip = tok::json_bool(t, "rstrip", false, where);
      a.single_word = tok::json_bool(t, "single_word", false, where);
      a.normalized = tok::json_bool(t, "normalized", !a.special, where);
      added.push_back(a);
      added_ids_.emplace(a.content, a.id);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{a.id} + 1);
    }
  }
  // With a normalizer, HF matches a normalized=true token's normalized content in the
  // normalized text, and spells the token so (Llama 2's "Ωmega" is "▁Ωmega").
  if (!normalizer_.empty())
    for (AddedToken& a : added)
      if (a.normalized) a.content = tok::normalize(normalizer_, a.content);
  added_ = std::make_unique<tok::AddedTokenSplitter>(added);

  id_token_.resize(vocab_size_);
  id_kind_.assign(vocab_size_, 0);
  for (const auto& [spelled, id] : spelled_vocab_) {
    id_token_[id] = spelled;
    id_kind_[id] = 1;
  }
  for (const AddedToken& a : added) {
    id_token_[a.id] = a.content;
    id_kind_[a.id] = a.special ? 2 : 1;
  }

  if (root.contains("post_processor")) load_post_processor(root["post_processor"]);
  if (root.contains("decoder")) decoder_ = tok::parse_decoder(root["decoder"], path_);
  // Without a decoder a byte-level file still decodes its bytes (HF would join the spellings with spaces).
  if (decoder_.empty() && byte_level_) decoder_.push_back(tok::DecodeStep{});
  load_special_ids(root);
  // Fits the 192-byte name field of token shards whatever the folder is called.
  name_ = "hf-bpe:" + fs::absolute(path).parent_path().filename().string().substr(0, 120) + ":";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  name_ += hex;
}

void HfBpeTokenizer::load_model(const json& m) {
  const std::string type = tok::json_type(m);
  ULY_CHECK(type == "BPE" || (type.empty() && m.contains("merges")),
            path_ << ": model.type '" << type << "' is not supported; supported: BPE (byte-level, or with byte_fallback)");
  ULY_CHECK(null_or_empty(m, "dropout"), path_ << ": model.dropout is set; BPE dropout is not supported (set it to null)");
  ULY_CHECK(null_or_empty(m, "continuing_subword_prefix") && null_or_empty(m, "end_of_word_suffix"),
            path_ << ": model.continuing_subword_prefix/end_of_word_suffix are not supported (neither byte-level "
                     "nor SentencePiece-style BPE has them)");
  tok::BpeOptions options;
  options.byte_level = byte_level_;
  options.byte_fallback = tok::json_bool(m, "byte_fallback", false, path_ + ": model");
  options.fuse_unk = tok::json_bool(m, "fuse_unk", false, path_ + ": model");
  options.ignore_merges = tok::json_bool(m, "ignore_merges", false, path_ + ": model");
  ULY_CHECK(m.contains("vocab") && m["vocab"].is_object(), path_ << ": model.vocab must be an object {token: id}");
  ULY_CHECK(m.contains("merges") && m["merges"].is_array(), path_ << ": model.merges must be an array");

  std::unordered_map<std::string, int32_t> raw_vocab;
  for (const auto& [spelled, v] : m["vocab"].items()) {
    ULY_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= limits::kMaxTokenizerId,
              path_ << ": model.vocab['" << spelled << "'] must be an integer id in [0, " << limits::kMaxTokenizerId
                    << "], got " << v.dump());
    const auto id = v.get<int32_t>();
    spelled_vocab_.emplace(spelled, id);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{id} + 1);
    std::string raw;
    if (!byte_level_) raw_vocab.emplace(spelled, id);
    else if (tok::from_byte_level(spelled, &raw)) raw_vocab.emplace(std::move(raw), id);
  }
  ULY_CHECK(!byte_level_ || !raw_vocab.empty(), path_ << ": model.vocab has no entry spelled in the ByteLevel alphabet, "
                                                         "yet the pre_tokenizer is ByteLevel");
  if (!null_or_empty(m, "unk_token")) {
    ULY_CHECK(m["unk_token"].is_string(), path_ << ": model.unk_token must be a string");
    const auto it = spelled_vocab_.find(m["unk_token"].get<std::string>());
    ULY_CHECK(it != spelled_vocab_.end(),
              path_ << ": model.unk_token '" << m["unk_token"].get<std::string>() << "' is not in model.vocab");
    options.unk_id = it->second;
  }

  std::vector<tok::Merge> merges;
  merges.reserve(m["merges"].size());
  size_t index = 0;
  for (const json& e : m["merges"]) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      ULY_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                path_ << ": model.merges[" << index << "] '" << s << "' is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      ULY_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                path_ << ": model.merges[" << index << "] must be \"a b\" or [\"a\", \"b\"], got " << e.dump());
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    auto ia = spelled_vocab_.find(a), ib = spelled_vocab_.find(b), iab = spelled_vocab_.find(a + b);
    ULY_CHECK(ia != spelled_vocab_.end() && ib != spelled_vocab_.end(),
              path_ << ": model.merges[" << index << "] (" << a << ", " << b << ") uses a token not in model.vocab");
    ULY_CHECK(iab != spelled_vocab_.end(), path_ << ": model.merges[" << index << "] (" << a << ", " << b
                                                 << ") makes '" << a + b << "', which is not in model.vocab");
    merges.push_back({ia->second, ib->second, iab->second});
    ++index;
  }
  model_ = std::make_unique<tok::BpeModel>(std::move(raw_vocab), merges, options);
}

void HfBpeTokenizer::load_post_processor(const json& post) {
  if (post.is_null()) return;
  const std::string type = tok::json_type(post);
  auto wrap = [&](const std::vector<int32_t>& before, const std::vector<int32_t>& after) {
    for (const auto* ids : {&before, &after})
      for (int32_t id : *ids)
        ULY_CHECK(id >= 0 && id < vocab_size_, path_ << ": post_processor " << type << " adds id " << id
                                                     << ", outside the vocabulary [0, " << vocab_size_ << ")");
    prefix_.insert(prefix_.begin(), before.begin(), before.end());
    suffix_.insert(suffix_.end(), after.begin(), after.end());
  };
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    ULY_CHECK(post.contains("processors") && post["processors"].is_array(),
              path_ << ": post_processor Sequence needs a 'processors' array");
    for (const json& p : post["processors"]) load_post_processor(p);
    return;
  }
  if (type == "TemplateProcessing") {
    ULY_CHECK(post.contains("single") && post["single"].is_array(), path_ << ": TemplateProcessing needs 'single'");
    const json specials = post.value("special_tokens", json::object());
    std::vector<int32_t> before, after;
    bool seen_a = false;
    for (const json& item : post["single"]) {
      if (item.contains("Sequence")) {
        ULY_CHECK(item["Sequence"].value("id", "") == "A" && !seen_a,
                  path_ << ": TemplateProcessing 'single' must hold the sequence $A once, got " << item.dump());
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", "");
        ULY_CHECK(specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array(),
                  path_ << ": TemplateProcessing uses special token '" << name << "' missing from its special_tokens");
        for (const json& id : specials[name]["ids"]) (seen_a ? after : before).push_back(id.get<int32_t>());
      } else {
        ULY_FAIL(path_ << ": TemplateProcessing item " << item.dump() << " is neither a Sequence nor a SpecialToken");
      }
    }
    ULY_CHECK(seen_a, path_ << ": TemplateProcessing 'single' has no $A");
    wrap(before, after);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key) {
      ULY_CHECK(post.contains(key) && post[key].is_array() && post[key].size() == 2 && post[key][1].is_number_integer(),
                path_ << ": " << type << " needs '" << key << "': [token, id]");
      return post[key][1].get<int32_t>();
    };
    wrap({id_of("cls")}, {id_of("sep")});
    return;
  }
  ULY_FAIL(path_ << ": post_processor '" << type
                 << "' is not supported; supported: ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, "
                    "Sequence");
}

void HfBpeTokenizer::load_special_ids(const json& root) {
  const fs::path config = fs::path(path_).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config, ec)) {
    json c;
    try {
      const std::string text = read_text_file(config.string(), "tokenizer config", limits::kMaxJsonBytes);
      check_json_depth(text, config.string());
      c = json::parse(text);
    } catch (const json::exception& e) {
      ULY_FAIL(config.string() << ": invalid JSON (" << e.what() << ")");
    }
    auto pick = [&](const char* key) -> std::optional<int32_t> {
      if (!c.is_object() || !c.contains(key) || c[key].is_null()) return std::nullopt;
      const json& v = c[key];
      const std::string content = v.is_string() ? v.get<std::string>() : v.value("content", "");
      auto id = token_id(content);
      ULY_CHECK(id.has_value(), config.string() << ": " << key << " '" << content << "' is not a token of " << path_);
      return id;
    };
    bos_ = pick("bos_token");
    eos_ = pick("eos_token");
    if (bos_ || eos_) return;
  }
  if (!prefix_.empty()) bos_ = prefix_.front();
  if (!suffix_.empty()) eos_ = suffix_.back();
  if (!eos_) {
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|im_end|>"}) {
      auto it = added_ids_.find(name);
      if (it != added_ids_.end()) {
        eos_ = it->second;
        break;
      }
    }
  }
}

std::optional<int32_t> HfBpeTokenizer::token_id(std::string_view content) const {
  const std::string key(content);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = spelled_vocab_.find(key); it != spelled_vocab_.end()) return it->second;
  if (auto it = spelled_vocab_.find(tok::to_byte_level(content)); it != spelled_vocab_.end()) return it->second;
  return std::nullopt;
}

// One stretch of normalized text between added tokens: its normalized=true added
// tokens, and the pre-tokens of the rest through the model.
void HfBpeTokenizer::encode_normalized(std::string_view text, bool at_text_start, std::vector<int32_t>& ids,
                                       std::vector<std::string>& pieces) const {
  for (const auto& seg : added_->split_normalized(text)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    tok::pre_tokenize(steps_, text.substr(seg.begin, seg.end - seg.begin), pieces, at_text_start && seg.begin == 0);
    for (const std::string& p : pieces) model_->encode(p, ids);
  }
}

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = prefix_;
  std::vector<std::string> pieces;
  if (normalizer_.empty()) {
    for (const auto& seg : added_->split(text)) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      tok::pre_tokenize(steps_, text.substr(seg.begin, seg.end - seg.begin), pieces, seg.begin == 0);
      for (const std::string& p : pieces) model_->encode(p, ids);
    }
  } else {
    for (const auto& seg : added_->split_unnormalized(text)) {
      if (seg.id >= 0) ids.push_back(seg.id);
      else encode_normalized(tok::normalize(normalizer_, text.substr(seg.begin, seg.end - seg.begin)),
                             seg.begin == 0, ids, pieces);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfBpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    ULY_CHECK(id >= 0 && id < vocab_size_,
              path_ << ": cannot decode id " << id << ": outside the vocabulary [0, " << vocab_size_ << ")");
    if (id_kind_[id] == 0 || (skip_special_tokens && id_kind_[id] == 2)) continue;
    tokens.push_back(id_token_[id]);
  }
  return tok::decode_tokens(decoder_, std::move(tokens));
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "tokenizer.json").string();
    ULY_CHECK(fs::exists(file, ec), path << ": folder has no tokenizer.json (give a tokenizer.json or 'byte')");
  }
  ULY_CHECK(fs::exists(file, ec), file << ": no such tokenizer file (give a tokenizer.json, a folder holding one, or 'byte')");
  return std::make_unique<HfBpeTokenizer>(file);
}

}  // namespace ulysses
