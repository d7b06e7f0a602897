#include "data/sft.h"

#include <filesystem>

#include "core/error.h"
#include "core/limits.h"

namespace ulysses {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

SftEncoder::SftEncoder(const Tokenizer& tokenizer, const std::string& template_path, std::optional<int32_t> eos,
                       const ojson& template_kwargs)
    : tok_(tokenizer), eos_(eos) {
  if (template_path.empty()) return;
  std::error_code ec;
  const fs::path p = template_path;
  std::string origin;
  std::optional<std::string> source;
  if (fs::is_regular_file(p, ec) && p.extension() == ".jinja") {
    source = read_chat_template_file(p.string());
    origin = p.string();
  } else {
    source = find_chat_template(template_path, &origin);
  }
  if (!source) return;
  template_ = std::make_unique<ChatTemplate>(*source, origin);
  template_origin_ = origin;
  specials_ = chat_special_tokens(fs::is_directory(p, ec) ? p.string() : p.parent_path().string());
  if (template_kwargs.is_object())
    for (const auto& [k, v] : template_kwargs.items()) specials_[k] = v;
}

bool SftEncoder::is_sft_record(const ojson& r) {
  return r.is_object() && (r.contains("messages") || (r.contains("prompt") && r.contains("completion")));
}

void SftEncoder::add(SftDocument& d, const std::string& text, bool trained) const {
  if (text.empty()) return;
  const std::vector<int32_t> ids = tok_.encode(text, false);
  d.ids.insert(d.ids.end(), ids.begin(), ids.end());
  d.mask.insert(d.mask.end(), ids.size(), trained ? 1 : 0);
}

SftDocument SftEncoder::encode_chat(const ojson& messages, size_t first_trained, const ojson& tools,
                                    const std::string& where) const {
  ULY_CHECK(template_ != nullptr,
            where << ": \"messages\" need a chat template, and the tokenizer's folder has none (no chat_template in "
                     "tokenizer_config.json, no chat_template.jinja); give one with --chat-template FILE|DIR");
  ULY_CHECK(messages.is_array() && !messages.empty(), where << ": \"messages\" must be a non-empty list");
  // The turns are found by rendering the conversation up to each assistant message: work that
  // grows with the square of the messages, bounded by the limit (core/limits.h).
  ULY_CHECK(messages.size() <= limits::kMaxChatMessages,
            where << ": " << messages.size() << " messages, more than the " << limits::kMaxChatMessages
                  << "-message limit of one record; split the conversation");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    ULY_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
              where << ": message " << i << " needs a \"role\" (system, user or assistant)");
    const std::string role = m["role"];
    ULY_CHECK(role == "system" || role == "user" || role == "assistant" || role == "tool",
              where << ": message " << i << " has role '" << role << "'; expected system, user, assistant or tool");
    const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
    ULY_CHECK((m.contains("content") && (m["content"].is_string() || m["content"].is_null())) ||
                  (calls && !m.contains("content")),
              where << ": message " << i << " needs a string \"content\" (or \"tool_calls\" instead)");
  }
  auto render = [&](size_t n, bool generation_prompt) {
    ojson ctx = specials_;
    ctx["messages"] = ojson(std::vector<ojson>(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(n)));
    ctx["add_generation_prompt"] = generation_prompt;
    if (!tools.is_null()) ctx["tools"] = tools;
    try {
      return template_->render(ctx, limits::kMaxTemplateSteps, stop_);
    } catch (const Error& e) {
      ULY_FAIL(where << ": " << e.message());
    }
  };
  const std::string full = render(messages.size(), false);
  // A template that renders nothing would make every record an empty document: a dataset of 0
  // tokens, prepared with exit 0.
  ULY_CHECK(!full.empty(), where << ": the chat template (" << template_origin_
                                 << ") renders nothing for this conversation of " << messages.size() << " messages");
  const std::string eos_text = specials_.is_object() && specials_.contains("eos_token") &&
                                       specials_["eos_token"].is_string()
                                   ? specials_["eos_token"].get<std::string>() : std::string();
  SftDocument d;
  size_t done = 0;  // characters of `full` emitted
  for (size_t i = first_trained; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    auto refuse = [&](const std::string& why) {
      ULY_FAIL(where << ": the chat template (" << template_origin_ << ") does not render this conversation turn by "
                     << "turn (" << why << "), so the tokens of assistant message " << i << " cannot be told apart");
    };
    // The conversation up to this turn with the generation prompt, and through it.
    const std::string before = render(i, true), through = render(i + 1, false);
    size_t start = before.size(), end = through.size();
    const bool turn_by_turn = through.compare(0, before.size(), before) == 0 &&
                              full.compare(0, through.size(), through) == 0 && before.size() >= done;
    if (!turn_by_turn) {
      const std::string plain = render(i, false);  // without the generation prompt
      if (through.compare(0, plain.size(), plain) != 0) refuse("the turn does not follow the conversation before it");
      const std::string prompt = before.compare(0, plain.size(), plain) == 0 ? before.substr(plain.size()) : "";
      const size_t line = prompt.find('\n');
      const std::string header = line == std::string::npos ? prompt : prompt.substr(0, line + 1);
      // Where the turn starts in the whole conversation: after its generation prompt. When the
      // history renders otherwise once later turns follow (Qwen 3 drops the reasoning of the
      // turns before the last user query), the generation prompt is looked for; when the whole
      // has only its first line there (Qwen 3 with enable_thinking=false: the empty think
      // block of the prompt is on the last turn only), the turn starts after that line.
      size_t at = plain.size();
      if (full.compare(0, plain.size(), plain) != 0 || at < done) {
        at = prompt.empty() ? std::string::npos : full.find(prompt, done);
        if (at == std::string::npos && !header.empty()) at = full.find(header, done);
        if (at == std::string::npos)
          refuse("the text up to the turn is not a prefix of the whole, and no generation prompt tells where it starts");
      }
      if (full.compare(at, prompt.size(), prompt) == 0) start = at + prompt.size();
      else if (!header.empty() && full.compare(at, header.size(), header) == 0) start = at + header.size();
      else refuse("the whole does not have the generation prompt where the turn starts");
      if (start < done) refuse("the turn starts inside the previous one");
      // Where it ends: as the turn rendered last, when the whole holds it so; else (Qwen 3 gives
      // the last turn an empty think block, the others none) at the first end of a turn after
      // its start: the template's text from the eos_token on, as the turn rendered last ends.
      const bool follows = through.compare(0, before.size(), before) == 0;
      if (follows && full.compare(start, through.size() - before.size(), through, before.size()) == 0) {
        end = start + (through.size() - before.size());
      } else {
        const std::string turn = through.substr(plain.size());
        const size_t k = eos_text.empty() ? std::string::npos : turn.rfind(eos_text);
        const size_t close = k == std::string::npos ? std::string::npos : full.find(turn.substr(k), start);
        if (close == std::string::npos)
          refuse("the turn reads otherwise once later turns follow, and it does not end with the eos_token '" +
                 eos_text + "' to find its end by");
        end = close + (turn.size() - k);
      }
    }
    add(d, full.substr(done, start - done), false);
    add(d, full.substr(start, end - start), true);
    done = end;
  }
  add(d, full.substr(done), false);
  return d;
}

SftDocument SftEncoder::encode(const ojson& r, const std::string& where) const {
  const ojson tools = r.contains("tools") ? r["tools"] : ojson();
  if (r.contains("messages")) return encode_chat(r["messages"], 0, tools, where);
  const ojson& p = r["prompt"];
  const ojson& c = r["completion"];
  if (p.is_string() && c.is_string()) {
    SftDocument d;
    add(d, p.get<std::string>(), false);
    add(d, c.get<std::string>(), true);
    if (eos_) {
      d.ids.push_back(*eos_);
      d.mask.push_back(1);
    }
    return d;
  }
  ULY_CHECK(p.is_array() && c.is_array(), where << ": \"prompt\" and \"completion\" must both be strings, or both "
                                                   "lists of messages");
  ojson all = p;
  for (const ojson& m : c) all.push_back(m);
  return encode_chat(all, p.size(), tools, where);
}

}  // namespace ulysses
