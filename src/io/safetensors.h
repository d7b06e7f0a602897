// safetensors: 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the raw little-endian data. Read by memory mapping; every header field is
// validated and errors name the file, the tensor and the fix.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ulysses {

struct SafetensorsInfo {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin = 0;  // byte offsets inside the data section
  size_t end = 0;
};

class SafetensorsFile {
 public:
  // Opens and validates the file; throws ulysses::Error naming the path on any problem
  // (missing, truncated, malformed JSON, unknown dtype, offsets overrunning the file,
  // size not matching dtype x shape, overlapping tensors).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsInfo>& entries() const { return entries_; }
  bool contains(const std::string& name) const;
  const SafetensorsInfo& info(const std::string& name) const;  // throws if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Asks the kernel to read the whole file into the page cache in the background (advice: the
  // views below then fault in pages already read instead of one disk read at a time).
  void read_ahead() const;
  // A zero-copy view of the stored bytes (keeps the mapping alive).
  Tensor view(const std::string& name) const;
  // The tensor converted to float32 / float64 (any float dtype), as a new host tensor.
  Tensor read_f32(const std::string& name) const;
  Tensor read_f64(const std::string& name) const;
  // An integer tensor (I32 or I64 stored) as int32, checking that values fit.
  Tensor read_i32(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  std::vector<SafetensorsInfo> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (host, any dtype) in the given order. Atomic: writes PATH.tmp,
// then renames it over PATH, so a crash never leaves a half-written file at PATH.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ulysses
