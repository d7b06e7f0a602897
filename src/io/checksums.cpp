#include "io/checksums.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/limits.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"

namespace ulysses {
namespace fs = std::filesystem;

namespace {

struct Sum {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Streams the file in 4 MiB pieces: the optimizer state of a large model is far bigger than memory.
Sum file_sum(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ULY_CHECK(in, p.string() << ": cannot open for its checksum");
  std::vector<char> buf(size_t{4} << 20);
  Sum s;
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    s.bytes += static_cast<uint64_t>(n);
  }
  ULY_CHECK(in.eof(), p.string() << ": read failed while taking its checksum");
  s.crc = static_cast<uint32_t>(crc);
  return s;
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

}  // namespace

void write_checksums(const std::string& dir) {
  const fs::path root(dir);
  std::map<std::string, Sum> sums;  // sorted: the file reads the same for the same folder
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), root).generic_string();
    if (rel == kChecksumsFile || rel == "COMPLETE" || rel.ends_with(".tmp")) continue;
    sums[rel] = file_sum(e.path());
  }
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [rel, s] : sums) files[rel] = {{"bytes", s.bytes}, {"crc32", hex(s.crc)}};
  write_file_atomic((root / kChecksumsFile).string(),
                    nlohmann::json{{"algorithm", "crc32"}, {"files", files}}.dump(1) + "\n");
}

bool verify_checksums(const std::string& dir) {
  const fs::path root(dir), list = root / kChecksumsFile;
  std::error_code ec;
  if (!fs::exists(list, ec)) return false;
  const std::string text = read_text_file(list.string(), "checksum list", limits::kMaxJsonBytes);
  check_json_depth(text, list.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ULY_FAIL(list.string() << ": invalid JSON (" << e.what() << ")");
  }
  ULY_CHECK(j.is_object() && j.value("algorithm", "") == "crc32" && j.contains("files") && j["files"].is_object(),
            list.string() << ": expected {\"algorithm\": \"crc32\", \"files\": {name: {bytes, crc32}}}");
  for (auto it = j["files"].begin(); it != j["files"].end(); ++it) {
    const std::string& rel = it.key();
    // Names stay inside the folder: relative, no "..".
    const fs::path rp(rel);
    bool inside = !rel.empty() && rp.is_relative();
    for (const auto& part : rp) inside = inside && part != ".." && part != ".";
    ULY_CHECK(inside, list.string() << ": entry '" << rel << "' is not a file inside " << dir);
    const nlohmann::json& e = it.value();
    ULY_CHECK(e.is_object() && e.contains("bytes") && e["bytes"].is_number_unsigned() && e.contains("crc32") &&
                  e["crc32"].is_string(),
              list.string() << ": entry '" << rel << "' must be {\"bytes\": N, \"crc32\": \"hex\"}");
    const fs::path p = root / rp;
    ULY_CHECK(fs::is_regular_file(p, ec), p.string() << ": missing (listed in " << list.string()
                                                     << "): the folder is incomplete or damaged");
    const Sum s = file_sum(p);
    const uint64_t bytes = e["bytes"].get<uint64_t>();
    ULY_CHECK(s.bytes == bytes, p.string() << ": " << s.bytes << " bytes, but " << bytes
                                           << " when it was written (" << list.string()
                                           << "): the file is truncated or damaged");
    const std::string want = e["crc32"].get<std::string>();
    ULY_CHECK(hex(s.crc) == want, p.string() << ": checksum mismatch (crc32 " << hex(s.crc) << ", " << want
                                             << " when it was written, " << list.string()
                                             << "): the file is damaged; restore it or use another checkpoint");
  }
  return true;
}

}  // namespace ulysses
