// Shared by the fuzz targets: the readers under test take paths, so each input is
// written to a file of this process's own first. Only ulysses::Error is an expected
// outcome of a malformed input; anything else (a crash, a sanitizer report, another
// exception, an allocation over libFuzzer's limit) is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace ulysses::fuzz {

// A folder of this process's own under $TMPDIR (or /tmp), made once.
inline const std::string& work_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string d = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ulysses_fuzz." +
                    std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes bytes to path (replacing it). Plain stdio: std::filesystem::copy_file was seen to
// fail with EINTR under libFuzzer's signals on a loaded machine, a harness fault, not a finding.
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// Writes bytes to work_dir()/name (replacing it) and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = work_dir() + "/" + name;
  write_file(path, data, size);
  return path;
}

}  // namespace ulysses::fuzz
