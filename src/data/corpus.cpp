#include "data/corpus.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/json_depth.h"
#include "core/error.h"
#include "data/sft.h"

namespace ulysses {

namespace fs = std::filesystem;

namespace {

bool is_jsonl(fs::path p) {
  std::string ext = p.extension().string();
  if (ext == ".gz" || ext == ".zst" || ext == ".zstd") ext = p.stem().extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

bool starts_with_par1(const fs::path& p) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) return false;  // TextInput reports an unreadable file
  char magic[4] = {};
  const bool par1 = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "PAR1", 4) == 0;
  std::fclose(f);
  return par1;
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Where to cut a piece of text [0, n) so that the next piece starts a pre-token.
size_t cut_point(const std::string& s) {
  const size_t n = s.size(), low = n / 2;
  for (size_t i = n - 1; i > low; --i)
    if (s[i - 1] == '\n' && !space(s[i])) return i;
  for (size_t i = n - 1; i > low; --i)
    if (s[i] == ' ' && !space(s[i - 1])) return i;
  size_t i = n - 1;
  while (i > low && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;  // a UTF-8 lead byte
  return i;
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
      for (const fs::path& f : found) out.push_back({f.string(), is_jsonl(f), starts_with_par1(f), fs::file_size(f, ec)});
    } else {
      out.push_back({p.string(), is_jsonl(p), fs::is_regular_file(p, ec) && starts_with_par1(p), fs::file_size(p, ec)});
    }
  }
  return out;
}

CorpusReader::CorpusReader(std::vector<CorpusFile> files, std::string text_key, size_t chunk_bytes)
    : files_(std::move(files)), key_(std::move(text_key)), chunk_(std::max<size_t>(chunk_bytes, 64)) {}

uint64_t CorpusReader::bytes_read() const {
  return done_bytes_ + (in_ ? in_->file_bytes_read() : 0) + (parquet_ ? parquet_->file_bytes_read() : 0);
}

// A JSON Lines record or Parquet row (doc.where set): an SFT record, or the text in key_.
bool CorpusReader::record(nlohmann::ordered_json j, CorpusDocument& doc) const {
  doc.first = doc.last = true;
  if (j.is_object() && !j.contains(key_) && SftEncoder::is_sft_record(j)) {
    doc.sft = true;
    doc.text.clear();
    doc.record = std::move(j);
    return true;
  }
  ULY_CHECK(j.is_object() && j.contains(key_),
            doc.where << ": no \"" << key_ << "\" field (each record must be an object with the document in \""
                      << key_ << "\", or a chat in \"messages\", or \"prompt\" and \"completion\")");
  ULY_CHECK(j[key_].is_string(), doc.where << ": \"" << key_ << "\" must be a string, got " << j[key_].type_name());
  doc.text = j[key_].get<std::string>();
  return true;
}

bool CorpusReader::next(CorpusDocument& doc) {
  while (file_ < files_.size()) {
    const CorpusFile& f = files_[file_];
    doc.sft = false;
    doc.record = nullptr;
    if (f.parquet) {
      if (!parquet_) parquet_ = std::make_unique<ParquetRows>(f.path, std::vector<std::string>{
                                                                          key_, "messages", "prompt", "completion", "tools"});
      nlohmann::ordered_json row;
      if (parquet_->next(row)) {
        doc.where = f.path + ":row " + std::to_string(parquet_->row_number());
        // A null text (or other field) is as if absent, so that a row can be SFT-only.
        for (auto it = row.begin(); it != row.end();) it = it->is_null() ? row.erase(it) : std::next(it);
        return record(std::move(row), doc);
      }
      done_bytes_ += f.bytes;
      parquet_.reset();
      ++file_;
      continue;
    }
    if (!in_) {
      in_ = std::make_unique<TextInput>(f.path);
      line_ = 0;
      first_piece_ = true;
      carry_.clear();
    }
    if (!f.jsonl) {
      std::string piece = std::move(carry_);
      carry_.clear();
      in_->read(piece, chunk_ > piece.size() ? chunk_ - piece.size() : 0);
      std::string probe;
      const bool more = in_->read(probe, 1) == 1;
      doc.where = f.path;
      doc.first = first_piece_;
      first_piece_ = false;
      if (more) {
        piece += probe;
        const size_t cut = cut_point(piece);
        carry_ = piece.substr(cut);
        piece.resize(cut);
      }
      doc.text = std::move(piece);
      doc.last = !more;
      if (!more) {
        done_bytes_ += in_->file_bytes_read();
        in_.reset();
        ++file_;
      }
      return true;
    }
    while (in_->getline(line_buf_)) {
      ++line_;
      if (line_buf_.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::ordered_json j;
      check_json_depth(line_buf_, f.path + ":" + std::to_string(line_));
      try {
        j = nlohmann::ordered_json::parse(line_buf_);
      } catch (const nlohmann::json::exception& e) {
        ULY_FAIL(f.path << ":" << line_ << ": invalid JSON (" << e.what() << ")");
      }
      doc.where = f.path + ":" + std::to_string(line_);
      return record(std::move(j), doc);
    }
    done_bytes_ += in_->file_bytes_read();
    in_.reset();
    ++file_;
  }
  return false;
}

}  // namespace ulysses
