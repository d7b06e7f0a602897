#include "data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace ulysses {

namespace fs = std::filesystem;

namespace {

bool is_jsonl(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

}  // namespace

std::vector<CorpusFile> list_corpus_files(const std::vector<std::string>& inputs) {
  std::vector<CorpusFile> out;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::path p(input);
    ULY_CHECK(fs::exists(p, ec), input << ": no such input file or folder");
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::follow_directory_symlink, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        ULY_CHECK(!ec, input << ": cannot list the folder (" << ec.message() << ")");
        if (hidden(it->path())) {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path());
      }
      std::sort(found.begin(), found.end());
      for (const fs::path& f : found) out.push_back({f.string(), is_jsonl(f), fs::file_size(f, ec)});
    } else {
      out.push_back({p.string(), is_jsonl(p), fs::file_size(p, ec)});
    }
  }
  return out;
}

CorpusReader::CorpusReader(std::vector<CorpusFile> files, std::string text_key)
    : files_(std::move(files)), key_(std::move(text_key)) {}

bool CorpusReader::next(std::string& text, std::string& where) {
  while (file_ < files_.size()) {
    const CorpusFile& f = files_[file_];
    if (!open_) {
      in_ = std::ifstream(f.path, std::ios::binary);
      ULY_CHECK(in_, f.path << ": cannot open the input file");
      open_ = true;
      line_ = 0;
      if (!f.jsonl) {
        std::ostringstream ss;
        ss << in_.rdbuf();
        text = ss.str();
        where = f.path;
        bytes_read_ += text.size();
        in_.close();
        open_ = false;
        ++file_;
        return true;
      }
    }
    while (std::getline(in_, line_buf_)) {
      ++line_;
      bytes_read_ += line_buf_.size() + 1;
      if (line_buf_.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line_buf_);
      } catch (const nlohmann::json::parse_error& e) {
        ULY_FAIL(f.path << ":" << line_ << ": invalid JSON (" << e.what() << ")");
      }
      ULY_CHECK(j.is_object() && j.contains(key_),
                f.path << ":" << line_ << ": no \"" << key_ << "\" field (each JSON Lines line must be an object "
                       << "with the document in \"" << key_ << "\")");
      ULY_CHECK(j[key_].is_string(), f.path << ":" << line_ << ": \"" << key_ << "\" must be a string, got "
                                            << j[key_].type_name());
      text = j[key_].get<std::string>();
      where = f.path + ":" + std::to_string(line_);
      return true;
    }
    ULY_CHECK(in_.eof(), f.path << ": read error after line " << line_);
    in_.close();
    open_ = false;
    ++file_;
  }
  return false;
}

}  // namespace ulysses
