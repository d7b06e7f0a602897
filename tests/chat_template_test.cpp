// Chat templates: fixtures/chat/<style>/cases.jsonl (tools/make_chat_fixtures.py,
// transformers' apply_chat_template) must render to the same text and, with the
// folder's tokenizer, the same ids; conversations the template refuses fail with
// its message. Plus the Jinja rules that templates lean on, case by case.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "core/error.h"
#include "core/limits.h"
#include "expect_error.h"
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
  for (const char* style : {"llama3", "qwen2", "mistral", "qwen3", "mistral_v3", "mistral_v7"}) {
    int style_cases = 0;
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
      if (c.contains("kwargs"))  // apply_chat_template's extra keyword arguments, e.g. enable_thinking
        for (const auto& [k, v] : c["kwargs"].items()) x[k] = v;
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
      ++style_cases;
    }
    EXPECT_GE(style_cases, 15) << style;
    ++styles;
  }
  EXPECT_EQ(styles, 6);
  EXPECT_GE(cases, 150);
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

TEST(ChatTemplate, StringsInsideTags) {
  // A tag ends at the first "}}" or "%}" outside a string literal, as Jinja's lexer reads it.
  EXPECT_EQ(render("{{- \"}}\" }}|{{ '%}' }}"), "}}|%}");
  EXPECT_EQ(render("{% if '%}' %}x{% endif %}{{ 'a\\'}}' }}"), "xa'}}");
  EXPECT_THROW(render("{{ '}} }}"), Error);  // the string never ends
}

TEST(ChatTemplate, SelectRejectAndMap) {
  const json ctx = {{"ms", {{{"role", "user"}, {"content", "a"}, {"f", {{"name", "x"}}}},
                            {{"role", "assistant"}, {"content", ""}},
                            {{"role", "user"}, {"content", "b"}}}}};
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}", ctx), "['a', 'b']");
  EXPECT_EQ(render("{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }}", ctx), "assistant");
  EXPECT_EQ(render("{{ ms|selectattr('content')|length }} {{ ms|rejectattr('content')|length }}", ctx), "2 1");
  EXPECT_EQ(render("{{ ms|selectattr('f.name', 'in', ['x', 'y'])|length }}", ctx), "1");
  EXPECT_EQ(render("{{ ms|map(attribute='f.name', default='-')|list }}", ctx), "['x', '-', '-']");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('ge', 2)|list }}"), "[1, 3] [1]");
  EXPECT_EQ(render("{{ ['a', 'b']|map('upper')|join }} {{ [0, 1, '']|select|list }}"), "AB [1]");
  // The user message that is the last one, found by value as Mistral's templates do.
  EXPECT_EQ(render("{% set us = ms|selectattr('role', 'equalto', 'user')|list %}"
                   "{% for m in ms %}{{ m == us[-1] }} {% endfor %}", ctx), "False False True ");
  EXPECT_THROW(render("{{ 3|selectattr('x')|list }}"), Error);
}

TEST(ChatTemplate, StringsAreCharacters) {
  // Python's str counts, indexes and slices code points, not UTF-8 bytes.
  const json ctx = {{"s", "h\u00e9llo \u65e5\u672c"}};
  EXPECT_EQ(render("{{ s|length }}|{{ s[1] }}|{{ s[-1] }}|{{ s[:-1] }}|{{ s[::-1] }}", ctx),
            "8|\u00e9|\u672c|h\u00e9llo \u65e5|\u672c\u65e5 oll\u00e9h");
  EXPECT_EQ(render("{{ s|reverse }}|{{ 'a\u00e9'|list }}|{% for c in '\u65e5\u672c' %}<{{ c }}>{% endfor %}", ctx),
            "\u672c\u65e5 oll\u00e9h|['a', '\u00e9']|<\u65e5><\u672c>");
}

TEST(ChatTemplate, ReasoningSplitAndReversedLoops) {
  // The constructs of Qwen 3's template, one at a time.
  const json ctx = {{"c", "<think>\nwhy\n</think>\n\nanswer"}, {"xs", {"a", "b", "c"}}, {"flag", false}};
  EXPECT_EQ(render("[{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]"
                   "[{{ c.split('</think>')[-1].lstrip('\\n') }}]", ctx),
            "[why][answer]");
  EXPECT_EQ(render("{% for x in xs[::-1] %}{{ (xs|length - 1) - loop.index0 }}{{ x }}{% endfor %}", ctx), "2c1b0a");
  EXPECT_EQ(render("{{ flag is false }} {{ flag is defined and flag is false }} {{ missing is false }} "
                   "{{ c is string }} {{ xs is string }}", ctx),
            "True True False True False");
  EXPECT_EQ(render("{{ c.startswith('<think>') and c.endswith('answer') }} {{ '</think>' in c }}", ctx), "True True");
  EXPECT_EQ(render("{% set ns = namespace(last=xs|length - 1, found=false) %}"
                   "{% for x in xs[::-1] %}{% if not ns.found and x == 'b' %}{% set ns.found = true %}"
                   "{% set ns.last = (xs|length - 1) - loop.index0 %}{% endif %}{% endfor %}{{ ns.last }}", ctx),
            "1");
}

TEST(ChatTemplate, StatedLimits) {
  auto refused_with = [](const std::string& src, const json& ctx, const std::string& what) {
    try {
      render(src, ctx);
      ADD_FAILURE() << "expected a refusal: " << src.substr(0, 80);
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    }
  };
  auto refused = [&](const std::string& src, const std::string& what) { refused_with(src, json::object(), what); };
  const int d = limits::kMaxTemplateDepth + 5;
  refused("{{ " + std::string(d, '(') + "1" + std::string(d, ')') + " }}", "nesting deeper than 100 at");
  const int ok = limits::kMaxTemplateDepth - 10;  // each parenthesis is one level
  EXPECT_EQ(render("{{ " + std::string(ok, '(') + "1" + std::string(ok, ')') + " }}"), "1");
  std::string nots, minuses;
  for (int i = 0; i < d; ++i) nots += "not ", minuses += "- ";
  refused("{{ " + nots + "true }}", "nesting deeper than 100 at");
  refused("{{ " + minuses + "1 }}", "nesting deeper than 100 at");
  EXPECT_EQ(render("{{ not not true }} {{ - - 1 }} {{ -+-1 }}"), "True 1 1");
  std::string chain = "1";
  for (int i = 0; i < d; ++i) chain += " + 1";
  refused("{{ " + chain + " }}", "nesting deeper than 100 at");          // a long operator chain is a deep tree too
  refused("{{ x" + std::string(static_cast<size_t>(d) * 6, ' ').replace(0, std::string::npos, [&] {
            std::string f;
            for (int i = 0; i < d; ++i) f += "|trim";
            return f;
          }()) + " }}", "nesting deeper than 100 at");
  std::string ifs;
  for (int i = 0; i < d; ++i) ifs += "{% if true %}";
  for (int i = 0; i < d; ++i) ifs += "{% endif %}";
  refused(ifs, "nesting deeper than 100 at");
  refused("{{ range(2000000)|length }}", "list of more than");
  refused("{{ range(-9223372036854775807, 9223372036854775807)|length }}", "list of more than");
  refused("{{ 'ab' * 1000000000000 }}", "MiB");
  std::string sum = "0";
  for (int i = 0; i < 90; ++i) sum += " + 1";  // about 180 steps an iteration: the limit comes soon
  refused("{% for i in range(1000000) %}{% for j in range(1000000) %}{% set x = " + sum +
              " %}{% endfor %}{% endfor %}", "evaluation steps");
  refused("{% for i in range(1000000) %}{% for j in range(1000000) if j > 1000000 %}{% endfor %}{% endfor %}",
          "evaluation steps");
  refused("{{ {'a': 1}|tojson(indent=100000000) }}", "indent in [0, 64]");
  EXPECT_EQ(render("{{ range(3, -3, -2)|list }} {{ range(0)|list }} {{ 'ab' * 2 }}{{ 'x' * -1 }}"), "[3, 1, -1] [] abab");
  // The value depth bound holds for every value printed or given to tojson, not only for what a
  // render builds: a context value (a record's tool calls, --chat-template-kwargs) may nest the
  // 128 levels JSON allows, and was dumped whole. Within the bound it renders.
  auto nested = [](int levels) {
    json v = 1;
    for (int i = 0; i < levels; ++i) v = json::array({v});
    return v;
  };
  const int deep = limits::kMaxTemplateDepth + 10, within = limits::kMaxTemplateDepth - 10;
  refused_with("{{ x|tojson }}", {{"x", nested(deep)}}, "nesting deeper than 100 at a value printed or given to tojson");
  refused_with("{{ x }}", {{"x", nested(deep)}}, "nesting deeper than 100 at a value printed or given to tojson");
  refused_with("{{ x|string }}", {{"x", nested(deep)}}, "nesting deeper than 100");
  EXPECT_EQ(render("{{ x|tojson }}", {{"x", nested(within)}}).size(), 2 * static_cast<size_t>(within) + 1);
  // Built by the template: 90 levels in a namespace (91 counted from it) render; 100 do not.
  const std::string built = "{% set ns = namespace(a=1) %}{% for i in range(N) %}{% set ns.a = [ns.a] %}{% endfor %}"
                            "{{ ns.a|tojson(indent=64)|length > 0 }}";
  EXPECT_EQ(render(std::regex_replace(built, std::regex("N"), "90")), "True");
  refused(std::regex_replace(built, std::regex("N"), "100"), "nesting deeper than 100 at a value the template built");
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
  // An empty subscript (found by chat_template_fuzz: it was evaluated as a null operand).
  EXPECT_ERROR(ChatTemplate("{{ namespace(a=x[]) }}", "t.jinja"), "t.jinja: ", "an empty subscript '[]'");
  EXPECT_ERROR(ChatTemplate("{{ x[] }}", "t.jinja"), "an empty subscript");
  EXPECT_EQ(render("{{ 'abc'[:] }}"), "abc");
  // Numbers past their type: refused with the template's name, not std::out_of_range (found by
  // chat_template_fuzz); a string or a double too large for int clamps instead of overflowing.
  EXPECT_ERROR(ChatTemplate("{{ 99999999999999999999 }}", "t.jinja"), "t.jinja: ",
               "the integer 99999999999999999999 is out of the 64-bit range");
  EXPECT_ERROR(ChatTemplate("{{ 1" + std::string(400, '0') + ".5 }}", "t.jinja"), "is out of the double range");
  EXPECT_EQ(render("{{ 9223372036854775807 }}"), "9223372036854775807");
  // A template file is UTF-8 text (transformers reads it so); other bytes were rendered into the
  // tokens unseen (the hostile probe's finding).
  const std::string dir = ::testing::TempDir() + "/chat_template_utf8";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/chat_template.jinja") << "{{ '\xff\xfe' }}";
  EXPECT_ERROR(find_chat_template(dir), "chat_template.jinja: the chat template holds bytes that are not UTF-8 text");
  EXPECT_ERROR(read_chat_template_file(dir + "/chat_template.jinja"), "not UTF-8 text");
  std::ofstream(dir + "/chat_template.jinja") << "{{ 'caf\xc3\xa9' }}";
  EXPECT_EQ(ChatTemplate(*find_chat_template(dir), "t").render(json::object()), "caf\xc3\xa9");
  EXPECT_EQ(render("{{ '99999999999999999999'|int }}"), "0");
}

// A job of many renders (prepare on several threads) stops every render in flight once its
// first refusal sets the flag: a runaway template costs one render's bound, not one per record.
TEST(ChatTemplate, ARenderStopsWhenItsJobIsStopped) {
  const ChatTemplate t("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", "t.jinja");
  std::atomic<bool> stop{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  // Steps without bound here: only the flag (or the 4 s CPU bound, which fails the test) ends it.
  EXPECT_ERROR(t.render(json::object(), int64_t{1} << 40, &stop), "t.jinja: ", "the render was stopped");
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace ulysses
