// Chat templates: the Jinja subset that Hugging Face models' `chat_template`
// (tokenizer_config.json or chat_template.jinja) are written in, rendered as
// transformers' apply_chat_template renders them (trim_blocks, lstrip_blocks,
// loop controls, tojson as json.dumps, raise_exception, strftime_now).
//
// Supported: text, {{ expr }}, {# comments #}, whitespace control (-), and the
// tags if/elif/else, for (one or two targets, `if` filter, else, loop.index,
// index0, first, last, length, revindex), break, continue, set (name or
// namespace attribute), generation (rendered as its body). Expressions: literals
// (strings, numbers, true/false/none, lists, dicts), names, attributes,
// subscripts and slices (negative steps too), calls (namespace, raise_exception,
// range, strftime_now; string methods strip/lstrip/rstrip, startswith, endswith,
// split, replace, upper, lower; dict items/keys/values/get), filters (trim, length,
// count, tojson, upper, lower, capitalize, title, first, last, join, default,
// string, int, list, items, replace, reverse, safe, select, reject, selectattr,
// rejectattr, map), tests (defined, undefined, none, string, number, integer,
// float, boolean, mapping, sequence, iterable, true, false, even, odd, equalto/eq,
// ne, in, lt/le/gt/ge), not/and/or, comparisons, in / not in, + - * / // % ~, and
// `a if c else b`. Strings are sequences of characters (code points) as in Python:
// length, indexes and slices count characters, not bytes. A "}}" or "%}" inside a
// string literal does not end its tag. Anything else is refused at parse time with
// the origin and the construct named.
//
// Bounded (core/limits.h): tags and expressions nest at most kMaxTemplateDepth levels
// (refused when parsed), a render takes at most kMaxTemplateSteps evaluation steps, and
// no string it builds (the output included) exceeds kMaxTemplateBytes, no list
// kMaxTemplateItems; a value it prints or gives to tojson (built, or given in the context)
// nests at most kMaxTemplateDepth levels; past a bound the render stops with an error naming
// the template.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/limits.h"

namespace ulysses {

class ChatTemplate {
 public:
  // origin names the template in errors (e.g. "DIR/tokenizer_config.json: chat_template").
  ChatTemplate(const std::string& source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  // context: the template's variables, e.g. {"messages": [...], "add_generation_prompt": false,
  // "bos_token": "<s>", "eos_token": "</s>"}. raise_exception in the template throws an
  // Error carrying its message.
  // max_steps: the evaluation budget (limits::kMaxTemplateSteps; the fuzz target gives a smaller
  // one so that each input's time stays bounded under the sanitizers).
  // stop: when given and set (by another thread: a job of many renders whose first refusal ends
  // it, as prepare), the render stops at its next clock check (every 64 steps) with an Error.
  std::string render(const nlohmann::ordered_json& context, int64_t max_steps = limits::kMaxTemplateSteps,
                     const std::atomic<bool>* stop = nullptr) const;
  const std::string& origin() const { return origin_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string origin_;
};

// The chat template of a model or tokenizer folder (or of the folder of a tokenizer.json
// path): chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or a
// list of {"name", "template"} whose "default" entry is taken). nullopt when there is none.
// *origin is set to where it came from.
std::optional<std::string> find_chat_template(const std::string& path, std::string* origin = nullptr);

// A chat template file (chat_template.jinja, --chat-template FILE.jinja), refused when it is not
// UTF-8 text.
std::string read_chat_template_file(const std::string& path);

// bos_token / eos_token of tokenizer_config.json beside `path` as strings ("" when absent).
nlohmann::ordered_json chat_special_tokens(const std::string& path);

// The extra template variables of a --chat-template-kwargs option (apply_chat_template's
// **kwargs, e.g. {"enable_thinking": false}): a JSON object, without the variables the caller
// sets itself (messages, add_generation_prompt). `option` names the option in errors.
nlohmann::ordered_json parse_chat_template_kwargs(const std::string& text, const std::string& option);

}  // namespace ulysses
