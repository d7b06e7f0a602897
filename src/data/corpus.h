// Raw text corpora for `ulysses prepare`: files, folders of them, JSON Lines.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ulysses {

struct CorpusFile {
  std::string path;
  bool jsonl = false;  // .jsonl / .ndjson: one {"text": ...} document a line; otherwise the file is one document
  uint64_t bytes = 0;
};

// Expands the inputs in order: a file stands for itself; a folder for every file
// below it (recursively, sorted by path, hidden names skipped). Errors name the
// missing input.
std::vector<CorpusFile> list_corpus_files(const std::vector<std::string>& inputs);

// Streams documents from the files in order.
class CorpusReader {
 public:
  explicit CorpusReader(std::vector<CorpusFile> files, std::string text_key = "text");
  // The next document's text, and where it came from ("file" or "file:line").
  // False at the end. A JSON Lines line that is not an object with a string
  // `text_key` is an error naming file:line; blank lines are skipped.
  bool next(std::string& text, std::string& where);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::vector<CorpusFile> files_;
  std::string key_;
  size_t file_ = 0;
  bool open_ = false;
  std::ifstream in_;
  int64_t line_ = 0;
  uint64_t bytes_read_ = 0;
  std::string line_buf_;
};

}  // namespace ulysses
