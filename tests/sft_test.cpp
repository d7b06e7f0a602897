// SFT records: which text of a rendered chat is trained (the loss mask), on the chat
// fixtures (fixtures/chat/<style>, tools/make_chat_fixtures.py). The trained spans are
// decoded back to text and compared with what each template gives the assistant turns;
// the whole document must always decode to the template's rendering of the whole chat.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>


#include "core/error.h"
#include "core/limits.h"
#include "expect_error.h"
#include "data/sft.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace ulysses {
namespace {

using ojson = nlohmann::ordered_json;

struct Encoded {
  std::string whole;                 // every token decoded
  std::vector<std::string> trained;  // each run of targets decoded
};

std::string dir_of(const std::string& style) { return test::fixtures_dir() + "/chat/" + style; }

Encoded encode(const std::string& style, const ojson& record, const ojson& kwargs = ojson::object()) {
  const auto tok = load_hf_tokenizer(dir_of(style));
  const SftEncoder enc(*tok, dir_of(style), tok->eos_id(), kwargs);
  const SftDocument d = enc.encode(record, "test:1");
  EXPECT_EQ(d.ids.size(), d.mask.size());
  Encoded e;
  e.whole = tok->decode(d.ids);
  std::vector<int32_t> run;
  for (size_t i = 0; i <= d.ids.size(); ++i) {
    if (i < d.ids.size() && d.mask[i]) {
      run.push_back(d.ids[i]);
    } else if (!run.empty()) {
      e.trained.push_back(tok->decode(run));
      run.clear();
    }
  }
  return e;
}

// The template's rendering of the whole chat (add_generation_prompt false).
std::string rendered(const std::string& style, const ojson& record, const ojson& kwargs = ojson::object()) {
  std::string origin;
  const auto src = find_chat_template(dir_of(style), &origin);
  ojson ctx = chat_special_tokens(dir_of(style));
  for (const auto& [k, v] : kwargs.items()) ctx[k] = v;
  ctx["messages"] = record["messages"];
  ctx["add_generation_prompt"] = false;
  if (record.contains("tools")) ctx["tools"] = record["tools"];
  return ChatTemplate(*src, origin).render(ctx);
}

ojson msg(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

TEST(Sft, TurnByTurnTemplates) {
  const ojson r = {{"messages", {msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                                 msg("user", "Bye"), msg("assistant", "Bye!")}}};
  Encoded e = encode("llama3", r);
  EXPECT_EQ(e.whole, rendered("llama3", r));
  EXPECT_EQ(e.trained, (std::vector<std::string>{"Hello.<|eot_id|>", "Bye!<|eot_id|>"}));
  e = encode("qwen2", r);
  EXPECT_EQ(e.whole, rendered("qwen2", r));
  EXPECT_EQ(e.trained, (std::vector<std::string>{"Hello.<|im_end|>\n", "Bye!<|im_end|>\n"}));
  // Mistral NeMo without a system prompt: each answer and its </s>.
  const ojson m = {{"messages", {msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye"),
                                 msg("assistant", "Bye!")}}};
  e = encode("mistral_v3", m);
  EXPECT_EQ(e.whole, rendered("mistral_v3", m));
  EXPECT_EQ(e.trained, (std::vector<std::string>{"Hello.</s>", "Bye!</s>"}));
}

TEST(Sft, Qwen3ReasoningOfEarlierTurnsIsDropped) {
  // The whole chat drops the first turn's reasoning and gives it no think block, while the
  // chat cut after that turn would show both: the targets are the whole chat's text.
  ojson a1 = msg("assistant", "Hello.");
  a1["reasoning_content"] = "greet back";
  ojson a2 = msg("assistant", "Bye!");
  a2["reasoning_content"] = "\nsay bye\n";
  const ojson r = {{"messages", {msg("system", "Be brief."), msg("user", "Hi"), a1, msg("user", "Bye"), a2}}};
  const Encoded e = encode("qwen3", r);
  EXPECT_EQ(e.whole, rendered("qwen3", r));
  EXPECT_EQ(e.trained, (std::vector<std::string>{"Hello.<|im_end|>\n",
                                                 "<think>\nsay bye\n</think>\n\nBye!<|im_end|>\n"}));
  // No reasoning anywhere: the last turn alone has the empty think block.
  const ojson plain = {{"messages", {msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye"),
                                     msg("assistant", "<think>\nwhy\n</think>\n\nBye!")}}};
  EXPECT_EQ(encode("qwen3", plain).trained,
            (std::vector<std::string>{"Hello.<|im_end|>\n", "<think>\nwhy\n</think>\n\nBye!<|im_end|>\n"}));
}

TEST(Sft, Qwen3ToolChainBeforeALaterQuery) {
  // A tool chain with reasoning, then another user query: in the whole chat the chain's
  // reasoning is gone, though the chat cut before its second answer would show the first's.
  ojson call = msg("assistant", "");
  call["reasoning_content"] = "need the weather";
  call["tool_calls"] = {{{"type", "function"},
                         {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}};
  ojson answer = msg("assistant", "It is 21.5.");
  answer["reasoning_content"] = "got it";
  const ojson r = {{"messages", {msg("user", "Weather?"), call, msg("tool", "{\"temp\": 21.5}"), answer,
                                 msg("user", "Thanks"), msg("assistant", "You're welcome.")}},
                   {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}};
  const Encoded e = encode("qwen3", r);
  EXPECT_EQ(e.whole, rendered("qwen3", r));
  EXPECT_EQ(e.trained,
            (std::vector<std::string>{
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n",
                "It is 21.5.<|im_end|>\n", "<think>\n\n</think>\n\nYou're welcome.<|im_end|>\n"}));
  // The same chain as the last exchange keeps its reasoning.
  const ojson last = {{"messages", {msg("user", "Weather?"), call, msg("tool", "{\"temp\": 21.5}"), answer}}};
  const Encoded l = encode("qwen3", last);
  EXPECT_EQ(l.whole, rendered("qwen3", last));
  ASSERT_EQ(l.trained.size(), 2u);
  EXPECT_EQ(l.trained[0].rfind("<think>\nneed the weather\n</think>\n\n<tool_call>", 0), 0u) << l.trained[0];
  EXPECT_EQ(l.trained[1], "<think>\ngot it\n</think>\n\nIt is 21.5.<|im_end|>\n");
}

TEST(Sft, TemplateKwargs) {
  // enable_thinking=false: the empty think block belongs to the generation prompt (context).
  const ojson r = {{"messages", {msg("user", "Hi"), msg("assistant", "Hello.")}}};
  const ojson off = {{"enable_thinking", false}};
  Encoded e = encode("qwen3", r, off);
  EXPECT_EQ(e.whole, rendered("qwen3", r, off));
  EXPECT_EQ(e.trained, (std::vector<std::string>{"Hello.<|im_end|>\n"}));
  e = encode("qwen3", r);
  EXPECT_EQ(e.trained, (std::vector<std::string>{"<think>\n\n</think>\n\nHello.<|im_end|>\n"}));
  // Several turns: the earlier ones have no think block in the whole chat, though the
  // generation prompt has one; the last keeps reasoning it was given.
  ojson a1 = msg("assistant", "Hello.");
  a1["reasoning_content"] = "greet";
  const ojson multi = {{"messages", {msg("user", "Hi"), a1, msg("user", "Bye"),
                                     msg("assistant", "<think>\nleaving\n</think>\n\nBye!")}}};
  e = encode("qwen3", multi, off);
  EXPECT_EQ(e.whole, rendered("qwen3", multi, off));
  EXPECT_EQ(e.trained,
            (std::vector<std::string>{"Hello.<|im_end|>\n", "<think>\nleaving\n</think>\n\nBye!<|im_end|>\n"}));
  const ojson two = {{"messages", {msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye"),
                                   msg("assistant", "Bye!")}}};
  e = encode("qwen3", two, off);
  EXPECT_EQ(e.whole, rendered("qwen3", two, off));
  EXPECT_EQ(e.trained, (std::vector<std::string>{"Hello.<|im_end|>\n", "Bye!<|im_end|>\n"}));
  EXPECT_THROW(parse_chat_template_kwargs("[1]", "--chat-template-kwargs"), Error);
  EXPECT_THROW(parse_chat_template_kwargs("{\"messages\": []}", "--chat-template-kwargs"), Error);
  EXPECT_THROW(parse_chat_template_kwargs("{nope", "--chat-template-kwargs"), Error);
  EXPECT_EQ(parse_chat_template_kwargs("{\"enable_thinking\": false}", "x")["enable_thinking"], false);
}

TEST(Sft, ToolCallsWithoutContent) {
  // Mistral's tool-call turns carry no "content" at all.
  ojson call = {{"role", "assistant"},
                {"tool_calls", {{{"id", "call00001"}, {"type", "function"},
                                 {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}};
  ojson result = msg("tool", "{\"temp\": 21.5}");
  result["tool_call_id"] = "call00001";
  const ojson r = {{"messages", {msg("user", "Weather?"), call, result, msg("assistant", "21.5.")}}};
  const Encoded e = encode("mistral_v3", r);
  EXPECT_EQ(e.whole, rendered("mistral_v3", r));
  EXPECT_EQ(e.trained,
            (std::vector<std::string>{
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"call00001\"}]</s>",
                "21.5.</s>"}));
}

TEST(Sft, TemplatesThatCannotBeSplitAreRefused) {
  // Mistral NeMo puts the system prompt in the last user turn, and has no generation
  // prompt: the chat cut after the first answer is no prefix of the whole, and nothing
  // tells where the answer starts.
  const ojson r = {{"messages", {msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                                 msg("user", "Bye"), msg("assistant", "Bye!")}}};
  try {
    encode("mistral_v3", r);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("test:1: the chat template"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("assistant message 2 cannot be told apart"), std::string::npos) << e.message();
  }
}

// A template that renders nothing is an error naming the template and the record, not an empty
// document (a dataset of 0 tokens, prepared with exit 0); a record of more messages than the
// stated limit is refused before its turns are rendered (issue 28).
TEST(Sft, EmptyRenderingsAndTooManyMessagesAreRefused) {
  const std::string dir = test::temp_dir("sft_empty");
  std::ofstream(dir + "/silent.jinja") << "{% for m in messages %}{% if false %}{{ m.content }}{% endif %}{% endfor %}";
  const auto tok = make_byte_tokenizer();
  const SftEncoder silent(*tok, dir + "/silent.jinja", std::nullopt, ojson::object());
  const ojson r = {{"messages", {msg("user", "Hi"), msg("assistant", "Hello.")}}};
  EXPECT_ERROR(silent.encode(r, "chat.jsonl:3"), "chat.jsonl:3: the chat template (" + dir + "/silent.jinja) renders nothing");
  std::ofstream(dir + "/plain.jinja") << "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}";
  const SftEncoder plain(*tok, dir + "/plain.jinja", std::nullopt, ojson::object());
  ojson many = ojson::array();
  for (size_t i = 0; i < limits::kMaxChatMessages + 1; ++i) many.push_back(msg(i % 2 ? "assistant" : "user", "x"));
  EXPECT_ERROR(plain.encode({{"messages", many}}, "chat.jsonl:4"),
               "chat.jsonl:4: 1025 messages, more than the 1024-message limit of one record");
  many.erase(many.size() - 1);
  // 512 "<user>x\n" (8 bytes) and 512 "<assistant>x\n" (13 bytes), one token a byte.
  EXPECT_EQ(plain.encode({{"messages", many}}, "chat.jsonl:5").ids.size(), 512u * 21);
}

}  // namespace
}  // namespace ulysses
