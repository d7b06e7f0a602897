// Every output file is written whole or not at all: into PATH.tmp next to it, every
// write, the flush, the fsync and the close checked, then renamed over PATH. Only a
// regular file (or nothing) is replaced: renaming over a symlink, a device node or a
// FIFO would destroy what stands there (as root, --out /dev/null would replace the
// device). A failure (a full disk) removes PATH.tmp and leaves PATH as it was.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace ulysses {

class AtomicFile {
 public:
  // Refuses (nothing written) when PATH or PATH.tmp exists and is not a regular file.
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes PATH.tmp unless committed

  // `total` (when known) is only for the message: "after W of TOTAL bytes".
  void write(const void* data, size_t bytes, size_t total = 0);
  void commit(size_t total = 0);  // flush, fsync, close, rename into place

 private:
  [[noreturn]] void fail(const char* what, size_t total);

  std::string final_, tmp_;
  std::FILE* fp_ = nullptr;
  size_t written_ = 0;
  bool committed_ = false;
};

// The whole of `text` as PATH, by the rules above.
void write_file_atomic(const std::string& path, const std::string& text);

// A log that grows by whole lines (metrics.jsonl): each append is written and flushed
// with every result checked, sync() fsyncs; an error names the file and the cause.
class AppendFile {
 public:
  explicit AppendFile(std::string path);  // the file must be regular or absent
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();
  void append(const std::string& text);
  void sync();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* what);

  std::string path_;
  std::FILE* fp_ = nullptr;
};

}  // namespace ulysses
