// ulysses prepare --input FILE|DIR[,...] --out DIR [--tokenizer tokenizer.json|byte] ...
// Tokenizes a text corpus into token shards for training (docs/data.md).
#include <cmath>
#include <cstring>
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/split.h"
#include "data/prepare.h"
#include "io/parquet_rows.h"

namespace ulysses {

namespace {

// Inputs may be repeated (--input a --input b), comma-separated, or positional.
// Args keeps one value per option, so the repeats are collected from argv here.
std::vector<std::string> collect_inputs(int argc, char** argv, int first, const Args& args) {
  std::vector<std::string> raw;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--input" && i + 1 < argc) raw.push_back(argv[++i]);
    else if (a.rfind("--input=", 0) == 0) raw.push_back(a.substr(8));
  }
  for (const std::string& p : args.positional()) raw.push_back(p);
  std::vector<std::string> out;
  for (const std::string& r : raw)
    for (std::string& piece : split_commas(r)) out.push_back(std::move(piece));
  return out;
}

// 100M, 2G, 500K or a plain integer.
int64_t parse_count(const std::string& option, const std::string& text) {
  double scale = 1;
  std::string digits = text;
  if (!digits.empty()) {
    const char c = digits.back();
    if (c == 'K' || c == 'k') scale = 1e3;
    if (c == 'M' || c == 'm') scale = 1e6;
    if (c == 'G' || c == 'g') scale = 1e9;
    if (scale != 1) digits.pop_back();
  }
  // Decimal notation only: stod also reads hexadecimal (0x10 was 16), "inf" and leading blanks.
  const bool decimal = !digits.empty() && digits.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (decimal) try {
    size_t used = 0;
    const double v = std::stod(digits, &used);
    if (used == digits.size() && v > 0 && v * scale <= 1e18) return static_cast<int64_t>(std::llround(v * scale));
  } catch (...) {
  }
  ULY_FAIL("prepare: --" << option << " expects a positive count such as 100M, got '" << text << "'");
}

bool parse_switch(const std::string& option, const std::string& v) {
  if (v.empty() || v == "on" || v == "true" || v == "1" || v == "yes") return true;
  if (v == "off" || v == "false" || v == "0" || v == "no") return false;
  ULY_FAIL("prepare: --" << option << " takes on/off, got '" << v << "'");
}

}  // namespace

int run_prepare(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"input", true, false, "text file, folder (recursive), .jsonl or Parquet; repeatable or comma-separated"},
      {"out", true, false, "output folder: train-NNNNN.tokens, val-NNNNN.tokens, manifest.json"},
      {"tokenizer", true, false, "tokenizer.json (or its folder), or 'byte' (default)"},
      {"eos", true, true, "append EOS to every document: on (default) or off"},
      {"no-eos", false, false, "same as --eos=off"},
      {"eos-token", true, false, "the token to append as EOS (default: the tokenizer's EOS)"},
      {"add-special-tokens", false, false, "apply the tokenizer's post-processor to each document (Llama 3: BOS)"},
      {"text-column", true, false, "JSON Lines field or Parquet column holding the document (default text)"},
      {"text-key", true, false, "same as --text-column"},
      {"chat-template", true, false, "chat template for \"messages\" records: a .jinja, tokenizer_config.json or "
                                     "folder (default: the tokenizer's folder)"},
      {"chat-template-kwargs", true, false, "more chat-template variables as a JSON object, as apply_chat_template's "
                                            "kwargs, e.g. '{\"enable_thinking\": false}'"},
      {"chunk-bytes", true, false, "plain-text files are read and tokenized in pieces of about this size "
                                   "(default 1M; bounds the memory)"},
      {"shard-tokens", true, false, "tokens per shard before a new one starts (default 100M)"},
      {"val-fraction", true, false, "fraction of documents held out as the val split (default 0)"},
      {"seed", true, false, "seed of the train/val choice (default 0)"},
      {"threads", true, false, "tokenizer threads (default: all cores)"},
      {"force", false, false, "replace earlier prepared data in --out"},
      {"quiet", false, false, "no progress on stderr"},
      {"help", false, false, "show this help"},
  };
  Args args("prepare", specs, argc, argv, 2, static_cast<size_t>(-1));
  if (args.has("help")) {
    std::cout << Args::usage("prepare", specs)
              << "\nInputs: a file is one document, except .jsonl/.ndjson files (one record a line) and Parquet\n"
                 "files (one record a row, told by their magic PAR1, read row group by row group):\n"
                 "  {\"text\": ...}                         a document (every token a target)\n"
                 "  {\"messages\": [{\"role\", \"content\"}...]}  a chat, rendered with the chat template; only the\n"
                 "                                         assistant turns are targets (the rest is context)\n"
                 "  {\"prompt\": ..., \"completion\": ...}     the completion is the target\n"
                 "Files may be gzip or zstd compressed (.gz, .zst); binary files are refused.\n"
                 "Parquet needs a build with the Arrow/Parquet C++ libraries (scripts/fetch-pyarrow.sh; "
                 + std::string(parquet_supported() ? "this build has them" : "this build lacks them") + ").\n"
                 "Folders are read recursively in sorted order; hidden files are skipped.\n";
    return 0;
  }
  PrepareOptions o;
  o.inputs = collect_inputs(argc, argv, 2, args);
  o.out_dir = args.require("out");
  o.tokenizer = args.get("tokenizer", "byte");
  o.append_eos = !args.has("no-eos") && (!args.has("eos") || parse_switch("eos", args.get("eos")));
  o.eos_token = args.get("eos-token");
  o.add_special_tokens = args.has("add-special-tokens");
  o.text_key = args.get("text-column", args.get("text-key", "text"));
  ULY_CHECK(!args.has("text-column") || !args.has("text-key") || args.get("text-column") == args.get("text-key"),
            "prepare: --text-column and --text-key name the same thing; give one");
  o.chat_template = args.get("chat-template");
  o.chat_template_kwargs = args.get("chat-template-kwargs");
  if (args.has("chunk-bytes")) o.chunk_bytes = static_cast<size_t>(parse_count("chunk-bytes", args.get("chunk-bytes")));
  if (args.has("shard-tokens")) o.shard_tokens = parse_count("shard-tokens", args.get("shard-tokens"));
  if (args.has("val-fraction")) {
    const std::string v = args.get("val-fraction");
    char* end = nullptr;
    o.val_fraction = std::strtod(v.c_str(), &end);
    ULY_CHECK(!v.empty() && end && *end == '\0' && v.find_first_not_of("0123456789.eE+-") == std::string::npos,
              "prepare: --val-fraction expects a number in [0, 1), got '" << v << "'");
  }
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0, limits::kSeed));
  o.threads = static_cast<int>(args.get_int("threads", 0, IntRange{0, max_threads(), "0 = all cores; at most 4 x this host's hardware threads"}));
  o.force = args.has("force");
  if (args.has("quiet")) o.progress_interval_s = 0;

  const PrepareResult r = prepare_corpus(o);
  std::cout << "prepared " << r.train.documents << " train documents (" << r.train.tokens << " tokens, "
            << r.train.files.size() << " shard" << (r.train.files.size() == 1 ? "" : "s") << ") and "
            << r.val.documents << " val documents (" << r.val.tokens << " tokens) in " << o.out_dir;
  if (r.sft_documents > 0) std::cout << "; " << r.sft_documents << " SFT records (loss on the completions only)";
  std::cout << "\n";
  if (o.val_fraction > 0 && r.val.documents == 0)
    std::cerr << "prepare: warning: --val-fraction " << o.val_fraction << " selected no document (only "
              << r.train.documents << " documents); no val shard written\n";
  return 0;
}

}  // namespace ulysses
