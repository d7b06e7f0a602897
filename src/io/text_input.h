// Text inputs for `ulysses prepare`, read as a stream: plain, gzip (.gz, zlib) or
// zstd (.zst, libzstd), told apart by their magic bytes, not their names. The first
// 64 KiB are checked on open: a NUL byte, or a majority of bytes that are not valid
// UTF-8, means a binary file, refused with a message naming it (Parquet files as
// such: prepare reads them with io/parquet_rows.h); so an image or an archive is never tokenized as bytes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace ulysses {

class TextInput {
 public:
  explicit TextInput(const std::string& path);
  ~TextInput();
  TextInput(const TextInput&) = delete;
  TextInput& operator=(const TextInput&) = delete;

  // Appends up to n bytes to out; returns how many (0 at the end).
  size_t read(std::string& out, size_t n);
  // The next line without its '\n'; false at the end.
  bool getline(std::string& line);
  // Bytes of the file (compressed, when it is) consumed so far: for progress against its size.
  uint64_t file_bytes_read() const;
  const char* compression() const;  // "none", "gzip" or "zstd"
  const std::string& path() const { return path_; }

 private:
  bool fill();  // more decompressed bytes into buf_; false at the end
  struct Codec;
  std::string path_;
  std::unique_ptr<Codec> codec_;
  std::string buf_;
  size_t pos_ = 0;
};

// The length of the longest valid UTF-8 prefix-free count: how many bytes of s[0, n) lie in
// well-formed UTF-8 sequences (a sequence cut by the end counts as valid).
size_t utf8_valid_bytes(const char* s, size_t n);

}  // namespace ulysses
