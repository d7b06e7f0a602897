// Minimal leveled logging to stderr. Rank 0 only by default, so that P ranks
// do not print P copies of every line; errors print on every rank.
#pragma once
#include <sstream>
#include <string>

namespace ulysses {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& text, bool all_ranks = false);

}  // namespace ulysses

#define ULY_LOG(level, stream_expr)                                          \
  do {                                                                       \
    if (static_cast<int>(level) >= static_cast<int>(::ulysses::log_level())) { \
      std::ostringstream uly_log_oss_;                                       \
      uly_log_oss_ << stream_expr;                                           \
      ::ulysses::log_line(level, uly_log_oss_.str());                        \
    }                                                                        \
  } while (0)
#define ULY_INFO(x) ULY_LOG(::ulysses::LogLevel::Info, x)
#define ULY_WARN(x) ULY_LOG(::ulysses::LogLevel::Warn, x)
#define ULY_DEBUG(x) ULY_LOG(::ulysses::LogLevel::Debug, x)
