#include "data/sft.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ulysses {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

SftEncoder::SftEncoder(const Tokenizer& tokenizer, const std::string& template_path, std::optional<int32_t> eos)
    : tok_(tokenizer), eos_(eos) {
  if (template_path.empty()) return;
  std::error_code ec;
  const fs::path p = template_path;
  std::string origin;
  std::optional<std::string> source;
  if (fs::is_regular_file(p, ec) && p.extension() == ".jinja") {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
    origin = p.string();
  } else {
    source = find_chat_template(template_path, &origin);
  }
  if (!source) return;
  template_ = std::make_unique<ChatTemplate>(*source, origin);
  template_origin_ = origin;
  specials_ = chat_special_tokens(fs::is_directory(p, ec) ? p.string() : p.parent_path().string());
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
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    ULY_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
              where << ": message " << i << " needs a \"role\" (system, user or assistant)");
    const std::string role = m["role"];
    ULY_CHECK(role == "system" || role == "user" || role == "assistant" || role == "tool",
              where << ": message " << i << " has role '" << role << "'; expected system, user, assistant or tool");
    ULY_CHECK(m.contains("content") && (m["content"].is_string() || m["content"].is_null()),
              where << ": message " << i << " needs a string \"content\"");
  }
  auto render = [&](size_t n, bool generation_prompt) {
    ojson ctx = specials_;
    ctx["messages"] = ojson(std::vector<ojson>(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(n)));
    ctx["add_generation_prompt"] = generation_prompt;
    if (!tools.is_null()) ctx["tools"] = tools;
    try {
      return template_->render(ctx);
    } catch (const Error& e) {
      ULY_FAIL(where << ": " << e.message());
    }
  };
  const std::string full = render(messages.size(), false);
  SftDocument d;
  size_t done = 0;  // characters of `full` emitted
  for (size_t i = first_trained; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::string before = render(i, true), through = render(i + 1, false);
    ULY_CHECK(through.size() >= before.size() && through.compare(0, before.size(), before) == 0 &&
                  full.compare(0, through.size(), through) == 0 && before.size() >= done,
              where << ": the chat template (" << template_origin_ << ") does not render this conversation turn by "
                    << "turn (the text up to assistant message " << i << " is not a prefix of the whole), so the "
                    << "assistant tokens cannot be told apart");
    add(d, full.substr(done, before.size() - done), false);
    add(d, through.substr(before.size()), true);
    done = through.size();
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
