// The GEMM tuning choices of earlier runs, kept in a small JSON file so that a
// later run's first step does not time the candidates again (issue 29: tuning
// cost the 8B step's first call most of a second). Entries live under a
// context string (the GPU, the cuBLASLt version, the workspace), so a choice
// is only reused where the same candidates are offered; within it a key names
// the GEMM (shape, transposes, dtypes, alignments) and the value identifies
// the chosen algorithm. The file is a cache: a missing, unreadable or malformed
// one is a warning and an empty cache, never an error, and writes are whole
// files renamed into place, so a reader never sees half of one.
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace ulysses {

class GemmTuningCache {
 public:
  // path: the file, or empty for no cache. At most max_entries are kept per context
  // (a run adds tens; the bound keeps a long-lived file small).
  GemmTuningCache(std::string path, std::string context, size_t max_entries = 4096);

  // The file by the environment: ULYSSES_GEMM_TUNING_CACHE=0 turns the cache off (""),
  // another value is the file; else gemm_tuning.json in $ULYSSES_CACHE_DIR,
  // $XDG_CACHE_HOME/ulysses or $HOME/.cache/ulysses ("" when none is set).
  static std::string default_path();

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::optional<std::string> find(const std::string& key);
  // Records the choice and rewrites the file, merged with what other processes
  // wrote since (ranks of one run share it); a failure to write is one warning.
  void store(const std::string& key, const std::string& value);

 private:
  using Entries = std::map<std::string, std::string>;
  // This context's entries in the file; nullopt when the file is missing or unusable
  // (why in `why`, empty for a missing file).
  std::optional<Entries> read_file(std::string& why) const;
  void load();

  std::string path_;
  std::string context_;
  size_t max_entries_;
  bool loaded_ = false;
  bool write_failed_ = false;
  Entries entries_;
};

}  // namespace ulysses
