#include "core/process_clock.h"

#include <chrono>

namespace ulysses {
namespace {
// Set when the library's statics are initialised, before main.
const std::chrono::steady_clock::time_point g_launch = std::chrono::steady_clock::now();
}  // namespace

double seconds_since_launch() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_launch).count();
}

}  // namespace ulysses
