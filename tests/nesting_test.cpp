// Every recursive reader has a stated depth, checked before it goes one level deeper
// (docs/reliability.md, Limits): a JSON file of any kind, a tokenizer's normalizer and
// decoder Sequences, a chat template's tags, expressions and the values it builds. Deep
// inputs are refused with one line "<file>: nesting deeper than N at ...", never a stack
// overflow.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/json_depth.h"
#include "core/limits.h"
#include "expect_error.h"
#include "io/chat_template.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace ulysses {
namespace {

using nlohmann::json;

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string nested(int levels) { return std::string(levels, '[') + "1" + std::string(levels, ']'); }

TEST(JsonDepth, LimitCheckedBeforeParsing) {
  EXPECT_NO_THROW(check_json_depth(nested(limits::kMaxJsonDepth), "f.json"));
  EXPECT_ERROR(check_json_depth(nested(limits::kMaxJsonDepth + 1), "f.json"), "f.json: nesting deeper than 128 at line 1, column 129");
  EXPECT_ERROR(check_json_depth("{\"a\":\n" + std::string(500000, '{'), "f.json"), "f.json: nesting deeper than 128 at line 2");
  // Brackets inside strings, escaped quotes included, are text.
  EXPECT_NO_THROW(check_json_depth("[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]", "f.json"));
}

TEST(JsonDepth, EveryJsonFileIsBounded) {
  const std::string dir = test::temp_dir("json_depth");
  const std::string deep = "{\"model_type\": \"llama\", \"x\": " + nested(1000000) + "}";
  put(dir + "/config.json", deep);
  EXPECT_ERROR(load_hf_config(dir + "/config.json"), "config.json: nesting deeper than 128 at line 1");
  put(dir + "/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": " + nested(1000000) + "}}");
  EXPECT_ERROR(load_hf_tokenizer(dir + "/tokenizer.json"), "tokenizer.json: nesting deeper than 128");
  // A safetensors header.
  const std::string header = "{\"__metadata__\": " + nested(100000) + "}";
  std::string st(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  put(dir + "/m.safetensors", st + header);
  EXPECT_ERROR(SafetensorsFile::open(dir + "/m.safetensors"), "m.safetensors: nesting deeper than 128");
  EXPECT_ERROR(parse_chat_template_kwargs(nested(1000), "--chat-template-kwargs"),
               "--chat-template-kwargs: nesting deeper than 128");
}

TEST(TokenizerSequences, NestingIsBounded) {
  const std::string dir = test::temp_dir("tok_sequences");
  json good = json::parse(std::ifstream(test::fixtures_dir() + "/tokenizers/llama3/tokenizer.json"));
  auto wrap = [](json inner, const char* list, int levels) {
    for (int i = 0; i < levels; ++i) inner = {{"type", "Sequence"}, {list, json::array({inner})}};
    return inner;
  };
  json t = good;
  t["normalizer"] = wrap(json{{"type", "NFC"}}, "normalizers", limits::kMaxTokenizerSequenceDepth);
  put(dir + "/tokenizer.json", t.dump());
  EXPECT_NO_THROW(load_hf_tokenizer(dir + "/tokenizer.json"));
  t["normalizer"] = wrap(json{{"type", "NFC"}}, "normalizers", limits::kMaxTokenizerSequenceDepth + 1);
  put(dir + "/tokenizer.json", t.dump());
  EXPECT_ERROR(load_hf_tokenizer(dir + "/tokenizer.json"), "tokenizer.json: nesting deeper than 16 at normalizer Sequence");
  t = good;
  t["decoder"] = wrap(json{{"type", "ByteLevel"}}, "decoders", 40);
  put(dir + "/tokenizer.json", t.dump());
  EXPECT_ERROR(load_hf_tokenizer(dir + "/tokenizer.json"), "tokenizer.json: nesting deeper than 16 at decoder Sequence");
}

TEST(ChatTemplateNesting, TagsExpressionsAndBuiltValues) {
  auto render = [](const std::string& source) {
    return ChatTemplate(source, "t.jinja").render(nlohmann::ordered_json{{"messages", nlohmann::ordered_json::array()}});
  };
  EXPECT_ERROR(render("{{ " + std::string(500, '[') + std::string(500, ']') + " }}"), "t.jinja", "nesting deeper than 100");
  // A value nested one level per loop iteration: walking it (tojson, ==, printing) would recurse
  // once per level.
  EXPECT_ERROR(render("{% set ns = namespace(a=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}{% endfor %}"
                      "{{ ns.a | tojson }}"),
               "t.jinja", "nesting deeper than");
}

}  // namespace
}  // namespace ulysses
