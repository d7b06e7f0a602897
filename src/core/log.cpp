#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace ulysses {
namespace {
LogLevel initial_level() {
  const char* env = std::getenv("ULYSSES_LOG");
  if (env == nullptr) return LogLevel::Info;
  if (std::strcmp(env, "debug") == 0) return LogLevel::Debug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::Warn;
  if (std::strcmp(env, "error") == 0) return LogLevel::Error;
  return LogLevel::Info;
}
LogLevel g_level = initial_level();
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void log_line(LogLevel level, const std::string& text, bool all_ranks) {
  if (!all_ranks && level < LogLevel::Error && process_rank() != 0) return;
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (process_world_size() > 1)
    std::fprintf(stderr, "[ulysses %s r%d] %s\n", names[static_cast<int>(level)], process_rank(), text.c_str());
  else
    std::fprintf(stderr, "[ulysses %s] %s\n", names[static_cast<int>(level)], text.c_str());
}

}  // namespace ulysses
