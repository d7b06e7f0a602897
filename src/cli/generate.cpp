// ulysses generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--chat] [--max-new-tokens N]
//                  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eos] [--ids]
// Greedy (temperature 0, the default) or sampled decoding with a KV cache (model/decoder.h)
// from a Hugging Face folder or a training checkpoint's model/, with the folder's tokenizer.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "comm/launch_env.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/limits.h"
#include "io/chat_template.h"
#include "io/model_folder.h"
#include "io/regular_file.h"
#include "io/tokenizer.h"
#include "model/decoder.h"
#include "train/engine.h"

namespace ulysses {

namespace {

namespace fs = std::filesystem;

struct SamplingOptions {
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: off
  double top_p = 1.0;      // 1: off
};

int32_t pick_token(const std::vector<float>& logits, const SamplingOptions& o, std::mt19937_64& rng) {
  const auto V = static_cast<int32_t>(logits.size());
  if (o.temperature <= 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (o.top_k > 0 && o.top_k < V) order.resize(static_cast<size_t>(o.top_k));
  std::vector<double> p(order.size());
  const double m = logits[order[0]];
  double z = 0;
  for (size_t i = 0; i < order.size(); ++i) z += (p[i] = std::exp((logits[order[i]] - m) / o.temperature));
  size_t keep = order.size();
  if (o.top_p < 1.0) {  // the smallest prefix whose probability reaches top_p
    double acc = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      acc += p[i] / z;
      if (acc >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<size_t> dist(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep));
  return order[dist(rng)];
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    int64_t id = 0;
    try {
      size_t used = 0;
      id = std::stoll(part, &used);
      ULY_CHECK(used == part.size(), "");
    } catch (...) {
      ULY_FAIL("generate: --prompt-ids expects comma-separated integers, got '" << part << "'");
    }
    ids.push_back(static_cast<int32_t>(check_in_range("generate: --prompt-ids: id", id, limits::kTokenId)));
  }
  return ids;
}

// EOS ids: generation_config.json's eos_token_id (an id or a list), else the tokenizer's EOS.
std::vector<int32_t> eos_ids(const std::string& dir, const Tokenizer& tok) {
  std::vector<int32_t> out;
  const fs::path g = fs::path(dir) / "generation_config.json";
  std::error_code ec;
  if (fs::is_regular_file(g, ec)) {
    try {
      // Read whole within the JSON limit and depth-checked: the value is copied below.
      const std::string text = read_text_file(g.string(), "generation config", limits::kMaxJsonBytes);
      check_json_depth(text, g.string());
      const nlohmann::json j = nlohmann::json::parse(text);
      const nlohmann::json e = j.value("eos_token_id", nlohmann::json());
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
      if (e.is_array())
        for (const auto& v : e)
          if (v.is_number_integer()) out.push_back(v.get<int32_t>());
    } catch (const nlohmann::json::exception& e) {
      ULY_FAIL(g.string() << ": invalid JSON (" << e.what() << ")");
    }
  }
  if (out.empty() && tok.eos_id()) out.push_back(*tok.eos_id());
  return out;
}

}  // namespace

int run_generate(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", true, false, "a Hugging Face folder or a checkpoint's model/ folder"},
      {"tokenizer", true, false, "tokenizer.json or its folder, or 'byte' (default: the model folder's, else byte)"},
      {"prompt", true, false, "the prompt text", /*empty_ok=*/true},
      {"prompt-ids", true, false, "the prompt as comma-separated token ids (instead of --prompt)"},
      {"chat", false, false, "wrap the prompt as one user message in the model's chat template"},
      {"chat-template-kwargs", true, false, "with --chat: more template variables as a JSON object, e.g. "
                                            "'{\"enable_thinking\": false}'"},
      {"add-special-tokens", false, false, "apply the tokenizer's post-processor to the prompt (Llama 3: BOS)"},
      {"max-new-tokens", true, false, "tokens to generate (default 64)"},
      {"temperature", true, false, "0 = greedy (default); > 0 samples from softmax(logits / T)"},
      {"top-k", true, false, "sample among the k most likely tokens (default 0 = all)"},
      {"top-p", true, false, "sample among the most likely tokens whose probability reaches p (default 1)"},
      {"seed", true, false, "sampling seed (default 0)"},
      {"ignore-eos", false, false, "do not stop at an end-of-sequence token"},
      {"ids", false, false, "print the generated ids as a JSON array on a second line"},
      {"backend", true, false, "cpu (default) or cuda"},
      {"help", false, false, "show this help"},
  };
  Args args("generate", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("generate", specs)
              << "\nPrints the generated text (not the prompt) on stdout.\n";
    return 0;
  }
  const std::string dir = args.require("model");
  ULY_CHECK(args.has("prompt") != args.has("prompt-ids"), "generate: give --prompt TEXT or --prompt-ids IDS (one of them)");
  std::error_code ec;
  const std::string tok_spec =
      args.get("tokenizer", fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec) ? dir : std::string("byte"));
  const auto tok = open_tokenizer(tok_spec);
  SamplingOptions so;
  so.temperature = args.get_double("temperature", 0.0);
  so.top_k = args.get_int("top-k", 0);
  so.top_p = args.get_double("top-p", 1.0);
  ULY_CHECK(std::isfinite(so.temperature) && so.temperature >= 0, "generate: --temperature must be >= 0, got " << so.temperature);
  ULY_CHECK(so.top_k >= 0, "generate: --top-k must be >= 0, got " << so.top_k);
  ULY_CHECK(so.top_p > 0 && so.top_p <= 1, "generate: --top-p must be in (0, 1], got " << so.top_p);
  const int64_t max_new = args.get_int("max-new-tokens", 64, limits::kNewTokens);
  const int64_t seed = args.get_int("seed", 0);

  std::vector<int32_t> prompt;
  if (args.has("prompt-ids")) {
    prompt = parse_ids(args.get("prompt-ids"));
  } else {
    std::string text = args.get("prompt");
    if (args.has("chat")) {
      std::string origin;
      const auto src = find_chat_template(tok_spec == "byte" ? dir : tok_spec, &origin);
      ULY_CHECK(src.has_value(), "generate: --chat needs a chat template; " << dir << " has none (tokenizer_config.json "
                                                                            << "chat_template or chat_template.jinja)");
      nlohmann::ordered_json ctx = chat_special_tokens(tok_spec == "byte" ? dir : tok_spec);
      if (args.has("chat-template-kwargs")) {
        const auto kwargs = parse_chat_template_kwargs(args.get("chat-template-kwargs"), "generate: --chat-template-kwargs");
        for (const auto& [k, v] : kwargs.items()) ctx[k] = v;
      }
      ctx["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
      ctx["add_generation_prompt"] = true;
      text = ChatTemplate(*src, origin).render(ctx);
    }
    prompt = tok->encode(text, args.has("add-special-tokens"));
  }
  ULY_CHECK(!prompt.empty(), "generate: the prompt is empty; give some text or --add-special-tokens for a BOS");

  const ModelFolder folder = ModelFolder::open(dir);
  const std::string backend_name = args.get("backend", "cpu");
  ULY_CHECK(backend_name == "cpu" || backend_name == "cuda", "generate: --backend must be cpu or cuda");
  EngineConfig engine;  // one process: bf16 on cuda, the fp32 reference on the cpu
  engine.backend = backend_name == "cuda" ? BackendKind::Cuda : BackendKind::Cpu;
  engine.act_dtype = backend_name == "cuda" ? DType::BF16 : DType::F32;
  std::unique_ptr<Backend> backend = make_backend(engine, 0);
  LlamaWeights weights(folder.config());
  weights.load(folder, *backend);
  const int64_t budget = static_cast<int64_t>(prompt.size()) + max_new;
  if (budget > folder.config().max_position_embeddings)
    std::cerr << "generate: warning: " << budget << " tokens exceed the model's max_position_embeddings ("
              << folder.config().max_position_embeddings << ")\n";
  KvCacheDecoder decoder(weights, *backend, budget);
  const std::vector<int32_t> stop = args.has("ignore-eos") ? std::vector<int32_t>{} : eos_ids(dir, *tok);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<int32_t> out;
  std::vector<float> logits = decoder.feed(prompt);
  for (int64_t i = 0; i < max_new; ++i) {
    const int32_t next = pick_token(logits, so, rng);
    out.push_back(next);
    if (std::find(stop.begin(), stop.end(), next) != stop.end()) break;
    if (i + 1 < max_new) logits = decoder.feed({next});
  }
  std::cout << tok->decode(out, true) << "\n";
  if (args.has("ids")) {
    std::cout << "[";
    for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? ", " : "") << out[i];
    std::cout << "]\n";
  }
  return 0;
}

}  // namespace ulysses
