// libFuzzer target: a chat template (the Jinja subset: lexer, parser with its nesting
// bound, evaluator with its step, size and value-depth bounds) rendered over a fixed
// conversation with a tool call, and the same bytes as --chat-template-kwargs JSON.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What is 2+2?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "assistant", "content": "4."}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  try {
    // A smaller step budget than a real render's: the same bounds on every path, each input's
    // time bounded under the sanitizers (16M steps of nested loops take minutes there).
    (void)ChatTemplate(text, "fuzz.jinja").render(context, int64_t{1} << 14);
  } catch (const Error&) {
  }
  try {
    (void)parse_chat_template_kwargs(text, "--chat-template-kwargs");
  } catch (const Error&) {
  }
  return 0;
}
