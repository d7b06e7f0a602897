// Tokenizers against Hugging Face `tokenizers`: every committed case in
// fixtures/tokenizers/<name>/cases.jsonl (tools/make_tokenizer_fixtures.py) must
// give HF's ids, HF's pre-tokens and HF's decoded text. Extra fixture folders
// (e.g. made with --random-texts N --seed K) are checked when listed in
// ULYSSES_TOKENIZER_FIXTURES (colon-separated).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "expect_error.h"
#include "io/tokenizer.h"
#include "io/tokenizer_parts.h"
#include "io/tokenizer_unicode.h"
#include "io/unicode_normalization.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses;
using ulysses::test::expect_error;

namespace {

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(test::fixtures_dir() + "/tokenizers"))
    if (fs::exists(e.path() / "cases.jsonl")) dirs.push_back(e.path().string());
  if (const char* extra = std::getenv("ULYSSES_TOKENIZER_FIXTURES")) {
    std::string s = extra;
    for (size_t p = 0; p <= s.size();) {
      size_t q = s.find(':', p);
      if (q == std::string::npos) q = s.size();
      const std::string root = s.substr(p, q - p);
      if (!root.empty())
        for (const auto& e : fs::directory_iterator(root))
          if (fs::exists(e.path() / "cases.jsonl")) dirs.push_back(e.path().string());
      p = q + 1;
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::vector<json> read_cases(const std::string& dir) {
  std::ifstream f(dir + "/cases.jsonl");
  std::vector<json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::string show(const std::string& s) { return json(s).dump(); }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

}  // namespace

TEST(Tokenizer, FixturesExist) {
  const auto dirs = fixture_dirs();
  ASSERT_GE(dirs.size(), 8u) << "expected fixtures/tokenizers/{llama3,gpt2,qwen2,llama2,mistral,nfkc,tekken,tekken_words}";
}

TEST(Tokenizer, MatchesHuggingFaceOnEveryCase) {
  for (const std::string& dir : fixture_dirs()) {
    SCOPED_TRACE(dir);
    auto tok = load_hf_tokenizer(dir);
    const json root = json::parse(std::ifstream(dir + "/tokenizer.json"));
    const auto steps = tok::parse_pre_tokenizer(root["pre_tokenizer"], dir);
    const bool byte_level = std::any_of(steps.begin(), steps.end(), [](const tok::PreTokStep& s) {
      return s.type == tok::PreTokStep::Type::ByteLevel;
    });
    int encodes = 0, decodes = 0, pretoks = 0, failures = 0;
    for (const json& c : read_cases(dir)) {
      if (failures > 10) break;
      if (c.contains("ids")) {
        const std::string text = c["text"];
        const bool add = c["add_special_tokens"];
        const auto want = c["ids"].get<std::vector<int32_t>>();
        const auto got = tok->encode(text, add);
        EXPECT_EQ(got, want) << "text " << show(text) << " add_special_tokens " << add;
        failures += got != want;
        // HF's decode of its own ids: the text itself unless lstrip/rstrip tokens ate white space.
        EXPECT_EQ(tok->decode(want), c["decoded"].get<std::string>()) << "decode of the ids of " << show(text);
        ++encodes;
      } else if (c.contains("decode_ids")) {
        const auto ids = c["decode_ids"].get<std::vector<int32_t>>();
        const std::string got = tok->decode(ids, c["skip_special_tokens"].get<bool>());
        EXPECT_EQ(got, c["text"].get<std::string>()) << "decode of " << c["decode_ids"].dump();
        failures += got != c["text"].get<std::string>();
        ++decodes;
      } else if (c.contains("pretokenize")) {
        std::vector<std::string> pieces;
        tok::pre_tokenize(steps, c["pretokenize"].get<std::string>(), pieces);
        if (byte_level)
          for (auto& p : pieces) p = tok::to_byte_level(p);
        const auto want = c["pieces"].get<std::vector<std::string>>();
        EXPECT_EQ(pieces, want) << "pre-tokens of " << show(c["pretokenize"]);
        failures += pieces != want;
        ++pretoks;
      }
    }
    EXPECT_GT(encodes, 50);
    EXPECT_GT(decodes, 20);
    if (!root["pre_tokenizer"].is_null()) EXPECT_GT(pretoks, 20);
  }
}

TEST(Tokenizer, Llama3StyleSpecialsAndIgnoreMerges) {
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/llama3/tokenizer.json");
  const auto bos = tok->token_id("<|begin_of_text|>"), eot = tok->token_id("<|end_of_text|>");
  ASSERT_TRUE(bos && eot);
  EXPECT_EQ(tok->bos_id(), bos);  // from the TemplateProcessing post-processor
  EXPECT_EQ(tok->eos_id(), eot);  // by its usual name
  EXPECT_EQ(tok->encode("", true), std::vector<int32_t>{*bos});
  const auto ids = tok->encode("a<|end_of_text|>b", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], *eot);
  // An entry that no merge reaches comes out whole only thanks to ignore_merges.
  const auto whole = tok->token_id(" unmergeable");
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(tok->encode("x unmergeable", false).back(), *whole);
  EXPECT_EQ(tok->decode(tok->encode("x<|end_of_text|>y", true), true), "xy");
  EXPECT_EQ(tok->name().rfind("hf-bpe:llama3:", 0), 0u) << tok->name();
  EXPECT_EQ(tok->vocab_size(), 1 + *tok->token_id("<|reserved_special_token_3|>"));  // the last added token
}

TEST(Tokenizer, Gpt2StyleAddedTokens) {
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/gpt2");  // a folder works too
  const auto eot = tok->token_id("<|endoftext|>"), mask = tok->token_id("<mask>");
  ASSERT_TRUE(eot && mask);
  EXPECT_EQ(tok->eos_id(), eot);
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_EQ(tok->encode("hi", true), tok->encode("hi", false));  // ByteLevel post-processor adds nothing
  // lstrip: the space before <mask> belongs to the token.
  const auto ids = tok->encode("a <mask>", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1], *mask);
}

TEST(Tokenizer, TekkenStyleControlTokens) {
  // Mistral's byte-level "tekken" layout: the control tokens are ids 0..N-1, in the
  // vocabulary and as special added tokens; the split regex cuts words at case changes.
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/tekken");
  EXPECT_EQ(tok->token_id("<s>"), 1);
  EXPECT_EQ(tok->token_id("[INST]"), 3);
  EXPECT_EQ(tok->token_id("[/INST]"), 4);
  const auto sys = tok->token_id("[SYSTEM_PROMPT]"), calls = tok->token_id("[TOOL_CALLS]");
  ASSERT_TRUE(sys && calls);
  EXPECT_LT(*sys, 40);
  EXPECT_EQ(tok->eos_id(), 2);                      // "</s>" by its name
  EXPECT_FALSE(tok->bos_id().has_value());          // a ByteLevel post-processor adds none
  EXPECT_EQ(tok->encode("hi", true), tok->encode("hi", false));
  const auto ids = tok->encode("[INST]Hi[/INST][TOOL_CALLS]", false);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 3);
  EXPECT_EQ(ids.back(), *calls);
  EXPECT_EQ(tok->decode(ids, true), "Hi");
  EXPECT_EQ(tok->decode(ids, false), "[INST]Hi[/INST][TOOL_CALLS]");
  // Pre-tokens: case changes and marks, single digits, "/" after a line break.
  const json root = json::parse(std::ifstream(test::fixtures_dir() + "/tokenizers/tekken/tokenizer.json"));
  const auto steps = tok::parse_pre_tokenizer(root["pre_tokenizer"], "tekken");
  std::vector<std::string> pieces;
  tok::pre_tokenize({steps.front()}, "getHTTPResponse 2024!\n/x A\xCC\x81" "b", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string>{"get", "HTTPResponse", " ", "2", "0", "2", "4", "!\n/", "x", " A\xCC\x81" "b"}));
  // As many published tokenizer.json files spell the split: no cut at case changes.
  const json words = json::parse(std::ifstream(test::fixtures_dir() + "/tokenizers/tekken_words/tokenizer.json"));
  const auto word_steps = tok::parse_pre_tokenizer(words["pre_tokenizer"], "tekken_words");
  tok::pre_tokenize({word_steps.front()}, "getHTTPResponse 2024!\n/x \xCC\x81" "A", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string>{"getHTTPResponse", " ", "2", "0", "2", "4", "!\n/", "x", " \xCC\x81" "A"}));
}

TEST(Tokenizer, ConfigFileChoosesSpecialTokens) {
  const std::string dir = test::temp_dir("tok_config");
  fs::copy_file(test::fixtures_dir() + "/tokenizers/llama3/tokenizer.json", dir + "/tokenizer.json");
  write_file(dir + "/tokenizer_config.json",
             R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|reserved_special_token_1|>"}})");
  auto tok = load_hf_tokenizer(dir);
  EXPECT_EQ(tok->eos_id(), tok->token_id("<|reserved_special_token_1|>"));
  write_file(dir + "/tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  EXPECT_NE(expect_error([&] { load_hf_tokenizer(dir); }).find("<|nope|>"), std::string::npos);
}

TEST(Tokenizer, Llama2StyleByteFallback) {
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/llama2");
  const auto bos = tok->token_id("<s>"), byte_e4 = tok->token_id("<0xE4>");
  ASSERT_TRUE(bos && byte_e4);
  EXPECT_EQ(tok->bos_id(), bos);
  EXPECT_EQ(tok->eos_id(), tok->token_id("</s>"));
  // U+4E2D (中, E4 B8 AD) is outside the trained alphabet: three byte tokens.
  const auto ids = tok->encode("\xE4\xB8\xAD", false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[ids.size() - 3], *byte_e4);
  EXPECT_EQ(tok->decode(ids), "\xE4\xB8\xAD");
  // An ill-formed byte run decodes to one U+FFFD a byte, as HF's ByteFallback does.
  EXPECT_EQ(tok->decode({*byte_e4, *tok->token_id("<0xB8>"), *tok->token_id("a")}), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  // A non-special added token is matched, and spelled, in the normalized text (HF: "▁Ωmega").
  const auto omega = tok->token_id("\xCE\xA9mega");
  ASSERT_TRUE(omega.has_value());
  EXPECT_EQ(tok->encode("a \xCE\xA9mega b", false).at(1), *omega);
  EXPECT_EQ(tok->encode("x\xCE\xA9mega", false).size(), 7u);  // no "▁Ωmega" in "▁xΩmega": not matched
  EXPECT_EQ(tok->decode(tok->encode("Hello world", true), true), "Hello world");
}

TEST(Tokenizer, UnicodeNormalForms) {
  using unicode::NormalForm;
  using unicode::normalize;
  EXPECT_EQ(normalize("e\xCC\x81", NormalForm::NFC), "\xC3\xA9");                   // e + U+0301 -> é
  EXPECT_EQ(normalize("\xC3\xA9", NormalForm::NFD), "e\xCC\x81");
  EXPECT_EQ(normalize("\xEF\xAC\x81", NormalForm::NFC), "\xEF\xAC\x81");           // ﬁ stays in NFC
  EXPECT_EQ(normalize("\xEF\xAC\x81", NormalForm::NFKC), "fi");                     // and not in NFKC
  EXPECT_EQ(normalize("\xE2\x84\xAB", NormalForm::NFC), "\xC3\x85");               // Ångström sign -> Å
  EXPECT_EQ(normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", NormalForm::NFC), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(normalize("\xEA\xB0\x81", NormalForm::NFD), "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
  // Canonical order: U+0323 (class 220) moves before U+0307 (class 230); q composes with neither.
  EXPECT_EQ(normalize("q\xCC\x87\xCC\xA3", NormalForm::NFC), "q\xCC\xA3\xCC\x87");
  EXPECT_EQ(normalize("ab\xFF\xC3", NormalForm::NFC), "ab\xFF\xC3");  // ill-formed bytes pass through
  EXPECT_EQ(unicode::combining_class(0x301), 230);
  EXPECT_EQ(unicode::combining_class('a'), 0);
}

TEST(Tokenizer, ByteTokenizer) {
  auto tok = open_tokenizer("byte");
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->eos_id(), 257);
  EXPECT_EQ(tok->name(), "byte");
  const std::string text("h\xC3\xA9\x00\xFF", 5);
  EXPECT_EQ(tok->encode(text, false), (std::vector<int32_t>{'h', 0xC3, 0xA9, 0, 0xFF}));
  EXPECT_EQ(tok->encode(text, true).front(), 256);
  EXPECT_EQ(tok->decode(tok->encode(text, true), true), text);
  EXPECT_EQ(tok->decode({'a', 257}), "a<|eos|>");
  EXPECT_NE(expect_error([&] { tok->decode({258}); }).find("258"), std::string::npos);
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/gpt2");
  const std::string msg = expect_error([&] { tok->decode({static_cast<int32_t>(tok->vocab_size())}); });
  EXPECT_NE(msg.find("outside the vocabulary"), std::string::npos) << msg;
}

TEST(Tokenizer, Errors) {
  const std::string dir = test::temp_dir("tok_errors");
  auto error_for = [&](const std::string& text) {
    write_file(dir + "/tokenizer.json", text);
    return expect_error([&] { load_hf_tokenizer(dir + "/tokenizer.json"); });
  };
  EXPECT_NE(expect_error([&] { load_hf_tokenizer(dir + "/missing.json"); }).find("missing.json"), std::string::npos);
  EXPECT_NE(expect_error([&] { load_hf_tokenizer(test::temp_dir("tok_empty")); }).find("no tokenizer.json"),
            std::string::npos);
  std::string m = error_for("{\"model\": ");
  EXPECT_NE(m.find("invalid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
  m = error_for(R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_NE(m.find("model.type 'Unigram' is not supported"), std::string::npos) << m;

  json good = json::parse(std::ifstream(test::fixtures_dir() + "/tokenizers/llama3/tokenizer.json"));
  json bad = good;
  bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+";
  m = error_for(bad.dump());
  EXPECT_NE(m.find("unsupported pre-tokenizer regex '\\w+|\\s+'; supported: the GPT-2 and Llama 3 patterns"),
            std::string::npos) << m;
  bad = good;
  bad["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  m = error_for(bad.dump());
  EXPECT_NE(m.find("normalizer 'Lowercase' is not supported; supported: NFC, NFD, NFKC, NFKD"), std::string::npos) << m;
  bad = good;
  bad["normalizer"] = json::parse(R"({"type": "Replace", "pattern": {"Regex": " +"}, "content": " "})");
  m = error_for(bad.dump());
  EXPECT_NE(m.find("normalizer Replace with a Regex pattern is not supported"), std::string::npos) << m;
  bad = good;
  bad["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(error_for(bad.dump()).find("pre_tokenizer 'Whitespace' is not supported"), std::string::npos);
  bad = good;
  bad["pre_tokenizer"] = json::parse(R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "sometimes"})");
  m = error_for(bad.dump());
  EXPECT_NE(m.find("prepend_scheme 'sometimes' is not one of always, first, never"), std::string::npos) << m;
  bad = good;
  bad["decoder"] = {{"type", "WordPiece"}};
  m = error_for(bad.dump());
  EXPECT_NE(m.find("decoder 'WordPiece' is not supported; supported: ByteLevel, Metaspace"), std::string::npos) << m;
  bad = good;
  bad["model"]["unk_token"] = "<nope>";
  EXPECT_NE(error_for(bad.dump()).find("model.unk_token '<nope>' is not in model.vocab"), std::string::npos);
  bad = good;
  bad["model"]["merges"].push_back("Ġt nosuchtoken");
  EXPECT_NE(error_for(bad.dump()).find("not in model.vocab"), std::string::npos);
  bad = good;
  bad["model"]["vocab"]["Ġhuge"] = 50000000;  // would size the id tables by it
  m = error_for(bad.dump());
  EXPECT_NE(m.find("model.vocab['Ġhuge'] must be an integer id in [0, 4194303], got 50000000"), std::string::npos) << m;
  bad = good;
  bad["added_tokens"].push_back({{"id", 50000000}, {"content", "<huge>"}});
  m = error_for(bad.dump());
  EXPECT_NE(m.find("'<huge>' has id 50000000, outside [0, 4194303]"), std::string::npos) << m;
  bad = good;
  bad["post_processor"] = {{"type", "Mystery"}};
  EXPECT_NE(error_for(bad.dump()).find("post_processor 'Mystery'"), std::string::npos);
}

TEST(Tokenizer, SplitBehaviorsMatchHuggingFace) {
  // Expected pieces from tokenizers' pre_tokenizers.Split("-", behavior, invert).pre_tokenize_str.
  struct Case {
    tok::SplitBehavior b;
    bool invert;
    std::vector<std::string> want;
  };
  using B = tok::SplitBehavior;
  const std::vector<Case> cases = {
      {B::Removed, false, {"a", "b", "c"}},
      {B::Removed, true, {"-", "-", "-", "-"}},
      {B::Isolated, false, {"a", "-", "-", "b", "-", "c", "-"}},
      {B::MergedWithPrevious, false, {"a-", "-", "b-", "c-"}},
      {B::MergedWithPrevious, true, {"a", "-", "-b", "-c", "-"}},
      {B::MergedWithNext, false, {"a", "-", "-b", "-c", "-"}},
      {B::MergedWithNext, true, {"a-", "-", "b-", "c-"}},
      {B::Contiguous, false, {"a", "--", "b", "-", "c", "-"}},
      {B::Contiguous, true, {"a", "--", "b", "-", "c", "-"}},
  };
  for (const Case& c : cases) {
    tok::PreTokStep s;
    s.literal = true;
    s.literal_text = "-";
    s.behavior = c.b;
    s.invert = c.invert;
    std::vector<std::string> pieces;
    tok::pre_tokenize({s}, "a--b-c-", pieces);
    EXPECT_EQ(pieces, c.want) << static_cast<int>(c.b) << " invert " << c.invert;
  }
}

TEST(Tokenizer, Utf8Helpers) {
  using unicode::to_valid_utf8;
  EXPECT_EQ(to_valid_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(to_valid_utf8("a\xC3"), "a\xEF\xBF\xBD");                     // truncated sequence
  EXPECT_EQ(to_valid_utf8("\xE2\x82z"), "\xEF\xBF\xBDz");                 // one U+FFFD for the maximal subpart
  EXPECT_EQ(to_valid_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");       // two invalid bytes
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  size_t len;
  EXPECT_EQ(unicode::decode_utf8("\xF0\x9F\x98\x80", 0, &len), 0x1F600u);
  EXPECT_EQ(len, 4u);
  EXPECT_TRUE(unicode::is_letter(0x4E2D));   // 中
  EXPECT_TRUE(unicode::is_number(0x0663));   // Arabic-Indic three
  EXPECT_FALSE(unicode::is_letter(0x0301));  // a combining mark is not a letter
  EXPECT_TRUE(unicode::is_space(0x3000));
  EXPECT_TRUE(unicode::is_lower_letter('a') && unicode::is_lower_letter(0x3C9));  // ω
  EXPECT_FALSE(unicode::is_lower_letter(0x1C5) || unicode::is_upper_or_title_letter(0x2B0));  // ǅ is Lt, ʰ is Lm
  EXPECT_TRUE(unicode::is_upper_or_title_letter(0x1C5) && unicode::is_upper_or_title_letter(0xC9));
  EXPECT_TRUE(unicode::is_mark(0x301) && unicode::is_mark(0x93F));  // combining acute, Devanagari vowel sign
  EXPECT_FALSE(unicode::is_mark('a') || unicode::is_mark(0x2B0));
  EXPECT_FALSE(unicode::is_space(0x1C));     // Python's isspace says yes; \s and Rust say no
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok::char_to_byte(tok::byte_to_char(static_cast<uint8_t>(b))), b);
}

TEST(Tokenizer, InvalidUtf8AndLongInputs) {
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/llama3");
  const std::string bad("ab\xFF\xC3 cd\xE2\x82", 9);
  EXPECT_EQ(tok->decode(tok->encode(bad, false)), unicode::to_valid_utf8(bad));
  // A megabyte with no pre-token boundary: the merge heap keeps this fast.
  std::string long_word;
  while (long_word.size() < (1u << 20)) long_word += "thequickbrownfoxjumpsoverthelazydog";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok->encode(long_word, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok->decode(ids), long_word);
  EXPECT_LT(ids.size(), long_word.size());
  std::printf("1 MiB single pre-token: %.3f s, %zu tokens\n", s, ids.size());
}

TEST(Tokenizer, ThreadSafeAndThroughput) {
  auto tok = load_hf_tokenizer(test::fixtures_dir() + "/tokenizers/gpt2");
  std::string text;
  for (const json& c : read_cases(test::fixtures_dir() + "/tokenizers/gpt2"))
    if (c.contains("text") && c.contains("ids")) text += c["text"].get<std::string>() + "\n";
  while (text.size() < (2u << 20)) text += text;
  const auto want = tok->encode(text, false);
  std::vector<std::vector<int32_t>> got(3);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back([&, t] { got[t] = tok->encode(text, false); });
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& g : got) EXPECT_EQ(g, want);
  std::printf("encode: %.1f MB/s over 3 threads (%zu bytes each)\n", 3 * text.size() / s / 1e6, text.size());
}
