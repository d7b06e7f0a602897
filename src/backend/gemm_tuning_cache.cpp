#include "backend/gemm_tuning_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/log.h"

namespace ulysses {
namespace {

constexpr int kFormat = 1;
// A cache of tens of entries per GPU is a few KiB; anything near this is not ours.
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{16} << 20;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

GemmTuningCache::GemmTuningCache(std::string path, std::string context, size_t max_entries)
    : path_(std::move(path)), context_(std::move(context)), max_entries_(max_entries) {}

std::string GemmTuningCache::default_path() {
  if (const char* v = env("ULYSSES_GEMM_TUNING_CACHE")) return std::string(v) == "0" ? "" : v;
  std::filesystem::path dir;
  if (const char* v = env("ULYSSES_CACHE_DIR")) dir = v;
  else if (const char* x = env("XDG_CACHE_HOME")) dir = std::filesystem::path(x) / "ulysses";
  else if (const char* h = env("HOME")) dir = std::filesystem::path(h) / ".cache" / "ulysses";
  else return "";
  return (dir / "gemm_tuning.json").string();
}

namespace {

// The whole file, checked for the shape this format gives it; nullopt when it is missing
// or unusable (why in `why`, empty for a missing file).
std::optional<nlohmann::json> read_document(const std::string& path, std::string& why) {
  why.clear();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    if (std::filesystem::exists(path, ec)) why = "cannot read its size";
    return std::nullopt;
  }
  if (size > kMaxFileBytes) {
    why = "larger than 16 MiB";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    why = "cannot be read";
    return std::nullopt;
  }
  // Parsed without exceptions; the shape (three levels) is checked by hand.
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("format") || doc["format"] != kFormat ||
      !doc.contains("contexts") || !doc["contexts"].is_object()) {
    why = "not a tuning cache of format " + std::to_string(kFormat);
    return std::nullopt;
  }
  for (const auto& [name, context] : doc["contexts"].items())
    if (!context.is_object()) {
      why = "context \"" + name + "\" is not an object";
      return std::nullopt;
    }
  return doc;
}

nlohmann::json empty_document() { return {{"format", kFormat}, {"contexts", nlohmann::json::object()}}; }

}  // namespace

std::optional<GemmTuningCache::Entries> GemmTuningCache::read_file(std::string& why) const {
  auto doc = read_document(path_, why);
  if (!doc) return std::nullopt;
  Entries entries;
  const auto& contexts = (*doc)["contexts"];
  if (auto it = contexts.find(context_); it != contexts.end())
    for (const auto& [key, value] : it->items())
      if (value.is_string()) entries[key] = value.get<std::string>();
  return entries;
}

void GemmTuningCache::load() {
  if (loaded_ || !enabled()) return;
  loaded_ = true;
  std::string why;
  if (auto e = read_file(why)) entries_ = std::move(*e);
  else if (!why.empty())
    ULY_WARN("GEMM tuning cache " << path_ << ": " << why << "; ignored (it is rewritten when a GEMM is tuned; "
                                  << "ULYSSES_GEMM_TUNING_CACHE=0 turns the cache off)");
}

std::optional<std::string> GemmTuningCache::find(const std::string& key) {
  load();
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void GemmTuningCache::store(const std::string& key, const std::string& value) {
  load();
  entries_[key] = value;
  if (!enabled() || write_failed_) return;
  // Merge with the file as it is now: another rank may have added its choices.
  std::string why;
  nlohmann::json doc = read_document(path_, why).value_or(empty_document());
  nlohmann::json& mine = doc["contexts"][context_];
  if (!mine.is_object()) mine = nlohmann::json::object();
  for (const auto& [k, v] : entries_)
    if (mine.size() < max_entries_ || mine.contains(k)) mine[k] = v;

  const std::filesystem::path target(path_);
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  bool ok = !ec;
  if (ok) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << doc.dump(1) << '\n';
    out.close();
    ok = static_cast<bool>(out);
  }
  if (ok) {
    std::filesystem::rename(tmp, target, ec);
    ok = !ec;
  }
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    write_failed_ = true;
    ULY_WARN("GEMM tuning cache " << path_ << ": cannot be written; the tuning of this run is not kept "
                                  << "(set ULYSSES_CACHE_DIR to a writable folder, or ULYSSES_GEMM_TUNING_CACHE=0)");
  }
}

}  // namespace ulysses
