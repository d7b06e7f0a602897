// Raw text corpora for `ulysses prepare`: files, folders of them, JSON Lines, each
// plain or compressed (.gz, .zst: io/text_input.h), read as a stream; and Parquet
// files (io/parquet_rows.h), read row group by row group.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/parquet_rows.h"
#include "io/text_input.h"

namespace ulysses {

struct CorpusFile {
  std::string path;
  bool jsonl = false;  // .jsonl / .ndjson (also .jsonl.gz, .jsonl.zst): one record a line; otherwise one document
  bool parquet = false;  // starts with the magic PAR1: one record a row (whatever its name)
  uint64_t bytes = 0;  // on disk (compressed, when it is)
};

// Expands the inputs in order: a file stands for itself; a folder for every file
// below it (recursively, sorted by path, hidden names skipped). Errors name the
// missing input.
std::vector<CorpusFile> list_corpus_files(const std::vector<std::string>& inputs);

// One document, or one piece of a long plain-text document.
struct CorpusDocument {
  std::string text;               // the text (empty for an SFT record)
  std::string where;              // "file" or "file:line"
  bool sft = false;               // a JSON Lines record with messages or prompt + completion
  nlohmann::ordered_json record;  // that record
  bool first = true, last = true; // pieces of one plain-text document: the first, the last
};

// Streams documents from the files in order. A plain text file is one document,
// given in pieces of about chunk_bytes, cut after a newline that a non-space follows
// (else before a space that a non-space precedes, else at a UTF-8 character edge): places
// where the byte-level pre-tokenizers cut anyway, so memory stays bounded whatever the
// file's size.
class CorpusReader {
 public:
  explicit CorpusReader(std::vector<CorpusFile> files, std::string text_key = "text",
                        size_t chunk_bytes = size_t(1) << 20);
  // The next document or piece. False at the end. A JSON Lines line or a Parquet row
  // must have a string `text_key`, or `messages`, or `prompt` and `completion` (an error
  // names file:line or file:row otherwise); blank lines are skipped.
  bool next(CorpusDocument& doc);
  // Bytes of the input files consumed (compressed bytes for compressed files).
  uint64_t bytes_read() const;

 private:
  std::vector<CorpusFile> files_;
  std::string key_;
  size_t chunk_;
  size_t file_ = 0;
  bool record(nlohmann::ordered_json j, CorpusDocument& doc) const;

  std::unique_ptr<TextInput> in_;
  std::unique_ptr<ParquetRows> parquet_;
  bool first_piece_ = true;
  std::string carry_;
  int64_t line_ = 0;
  uint64_t done_bytes_ = 0;  // of the files already finished
  std::string line_buf_;
};

}  // namespace ulysses
