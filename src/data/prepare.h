// Corpus -> token shards (`ulysses prepare`): tokenizes documents in parallel,
// writes train-NNNNN.tokens / val-NNNNN.tokens and manifest.json into a folder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, folders (recursive, sorted), .jsonl/.ndjson = JSON Lines
  std::string out_dir;
  std::string tokenizer = "byte";   // "byte" or a tokenizer.json (or its folder)
  bool append_eos = true;           // EOS after every document
  std::string eos_token;            // overrides the tokenizer's EOS (its content, e.g. "<|eot_id|>")
  bool add_special_tokens = false;  // the tokenizer's post-processor (e.g. Llama 3's BOS) on every document
  std::string text_key = "text";    // the JSON Lines field holding the document
  int64_t shard_tokens = 100'000'000;  // a new shard starts before a document would cross this
  double val_fraction = 0.0;        // documents held out, chosen by a hash of (seed, document number)
  uint64_t seed = 0;
  int threads = 0;                  // 0: OpenMP's default
  bool force = false;               // replace an earlier prepare output in out_dir
  double progress_interval_s = -1;  // < 0: 0.25 s on a terminal, 5 s otherwise; 0: no progress
  std::string chat_template;        // for `messages` records: a .jinja, tokenizer_config.json or folder (default: the tokenizer's)
  std::string chat_template_kwargs;  // a JSON object of more template variables, e.g. {"enable_thinking": false}
  size_t chunk_bytes = size_t(1) << 20;  // plain-text documents are read and tokenized in pieces of about this size
  size_t batch_bytes = size_t(8) << 20;  // text tokenized in parallel at a time: with chunk_bytes, bounds the memory
};

struct PreparedSplit {
  std::vector<std::string> files;  // relative to out_dir
  int64_t documents = 0, tokens = 0;
};

struct PrepareResult {
  PreparedSplit train, val;
  int64_t skipped_empty = 0;
  int64_t sft_documents = 0;  // records with messages or prompt + completion (tokens with a loss mask)
  uint64_t bytes = 0;
};

PrepareResult prepare_corpus(const PrepareOptions& options);

}  // namespace ulysses
