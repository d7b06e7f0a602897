// Supervised fine-tuning documents: JSON Lines records with `messages` (a chat:
// roles system/user/assistant[/tool]) or `prompt` + `completion`, turned into
// tokens and a loss mask (1 = a training target).
//
//   messages            rendered with the model's chat template; the text of each
//                       assistant turn (what the template adds between the generation
//                       prompt and the end of the turn, its end token included) is
//                       trained, everything else (system, user, template text) is context.
//                       The targets are the whole conversation's text: where a template
//                       renders a turn otherwise once later turns follow (Qwen 3 drops
//                       the reasoning of turns before the last user query, and gives only
//                       the last turn an empty think block), a turn starts after its
//                       generation prompt, found in the whole text, and ends with the
//                       template's text from the eos_token on (e.g. "<|im_end|>\n").
//   prompt, completion  strings: prompt + completion, the completion (and the EOS, when
//                       one is appended) trained. Lists of messages: the chat
//                       prompt + completion, the completion's assistant turns trained.
//
// Each masked/unmasked span is tokenized on its own and the ids concatenated (span
// edges are turn edges, which chat templates mark with special tokens or newlines).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace ulysses {

struct SftDocument {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // [ids.size()]
};

class SftEncoder {
 public:
  // template_path: a chat_template.jinja, a tokenizer_config.json, or a folder holding either;
  // empty: none (then only string prompt/completion records work). template_kwargs: more
  // variables for the template (a JSON object, e.g. {"enable_thinking": false}), as
  // apply_chat_template's **kwargs; a record's own "tools" win over a "tools" here.
  SftEncoder(const Tokenizer& tokenizer, const std::string& template_path, std::optional<int32_t> eos,
             const nlohmann::ordered_json& template_kwargs = nlohmann::ordered_json::object());
  // True for a record this encoder handles (has messages, or prompt and completion).
  static bool is_sft_record(const nlohmann::ordered_json& record);
  // where: "file:line", for errors.
  SftDocument encode(const nlohmann::ordered_json& record, const std::string& where) const;
  bool has_template() const { return template_ != nullptr; }
  // A job of many records rendered on several threads (prepare): once `stop` is set (the job's
  // first refusal), every render in flight stops at its next clock check, so the job's time in a
  // runaway template is one render's bound (core/limits.h), not one per record.
  void stop_renders_on(const std::atomic<bool>* stop) { stop_ = stop; }

 private:
  void add(SftDocument& d, const std::string& text, bool trained) const;
  SftDocument encode_chat(const nlohmann::ordered_json& messages, size_t first_trained, const nlohmann::ordered_json& tools,
                          const std::string& where) const;

  const Tokenizer& tok_;
  std::unique_ptr<ChatTemplate> template_;
  std::string template_origin_;
  nlohmann::ordered_json specials_;
  std::optional<int32_t> eos_;
  const std::atomic<bool>* stop_ = nullptr;
};

}  // namespace ulysses
