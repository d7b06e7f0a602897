// Chat templates: fixtures/chat/<style>/cases.jsonl (tools/make_chat_fixtures.py,
// transformers' apply_chat_template) must render to the same text and, with the
// folder's tokenizer, the same ids; conversations the template refuses fail with
// its message. Plus the Jinja rules that templates lean on, case by case.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace ulysses {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object()) {
  return ChatTemplate(src, "test").render(ctx);
}

TEST(ChatTemplate, FixturesEqualTransformers) {
  int styles = 0, cases = 0;
  for (const char* style : {"llama3", "qwen2", "mistral"}) {
    const std::string dir = test::fixtures_dir() + "/chat/" + style;
    std::string origin;
    const auto src = find_chat_template(dir, &origin);
    ASSERT_TRUE(src.has_value()) << dir;
    const ChatTemplate t(*src, origin);
    const auto tok = load_hf_tokenizer(dir);
    json ctx = chat_special_tokens(dir);
    std::ifstream in(dir + "/cases.jsonl");
    for (std::string line; std::getline(in, line);) {
      const json c = json::parse(line);
      json x = ctx;
      x["messages"] = c["messages"];
      x["add_generation_prompt"] = c.value("add_generation_prompt", false);
      if (c.contains("tools")) x["tools"] = c["tools"];
      if (c.contains("error")) {
        try {
          t.render(x);
          ADD_FAILURE() << style << ": expected an error for " << c["messages"].dump();
        } catch (const Error& e) {
          EXPECT_NE(e.message().find(c["error"].get<std::string>()), std::string::npos) << e.message();
        }
      } else {
        const std::string text = t.render(x);
        EXPECT_EQ(text, c["text"].get<std::string>()) << style << ": " << c["messages"].dump();
        EXPECT_EQ(tok->encode(text), c["ids"].get<std::vector<int32_t>>()) << style;
      }
      ++cases;
    }
    ++styles;
  }
  EXPECT_EQ(styles, 3);
  EXPECT_GE(cases, 45);
}

TEST(ChatTemplate, WhitespaceControl) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it goes.
  EXPECT_EQ(render("{% if true %}\n  a\n{% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x\n    {% if true %}y{% endif %}"), "x\ny");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a {{- 'b' -}} c"), "abc");
  EXPECT_EQ(render("a{# comment #}\nb"), "ab");
  EXPECT_EQ(render("{{ 'x' }}\ny"), "x\ny");  // no trim after an expression
}

TEST(ChatTemplate, Expressions) {
  const json ctx = {{"m", {{"role", "user"}, {"content", " hi "}}}, {"xs", {1, 2, 3}}, {"s", "a,b"}};
  EXPECT_EQ(render("{{ m.content|trim }}|{{ m['role'] }}|{{ xs|length }}", ctx), "hi|user|3");
  EXPECT_EQ(render("{{ xs[1:] }} {{ xs[::-1] }} {{ xs[-1] }}", ctx), "[2, 3] [3, 2, 1] 3");
  EXPECT_EQ(render("{{ 'yes' if 'role' in m else 'no' }}{{ 4 // 3 }}{{ 7 % 4 }}{{ 1 ~ 'x' }}", ctx), "yes131x");
  EXPECT_EQ(render("{{ m.missing is defined }} {{ none is none }} {{ s.split(',') }}", ctx),
            "False True ['a', 'b']");
  EXPECT_EQ(render("{{ {'b': [1, 2.5, none, true], 'a': 'é'}|tojson }}"), "{\"b\": [1, 2.5, null, true], \"a\": \"é\"}");
  EXPECT_EQ(render("{{ not true or false and true }}"), "False");
}

TEST(ChatTemplate, LoopsAndNamespaces) {
  const json ctx = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", ctx),
            "0a,1b,2c");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", ctx),
            "3");
  EXPECT_EQ(render("{% set n = 0 %}{% for x in xs %}{% set n = 5 %}{% endfor %}{{ n }}", ctx), "0");  // loop scope
  EXPECT_EQ(render("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", ctx), "a2c2");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "a");
  EXPECT_EQ(render("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}"), "a=1");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
}

TEST(ChatTemplate, ErrorsNameTheConstruct) {
  try {
    ChatTemplate("{% macro m() %}{% endmacro %}", "DIR/tokenizer_config.json: chat_template");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("DIR/tokenizer_config.json: chat_template"), std::string::npos);
    EXPECT_NE(e.message().find("'macro' is not supported"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ChatTemplate("{% if x %}", "t"), Error);
  EXPECT_THROW(ChatTemplate("{{ x ", "t"), Error);
  EXPECT_THROW(render("{{ raise_exception('nope') }}"), Error);
  EXPECT_THROW(render("{{ x|frobnicate }}"), Error);
}

}  // namespace
}  // namespace ulysses
