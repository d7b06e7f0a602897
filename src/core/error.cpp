#include "core/error.h"

#include <unistd.h>

#include <atomic>

namespace ulysses {
namespace {
std::atomic<int> g_rank{0};
std::atomic<int> g_world{1};
}  // namespace

void set_process_identity(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int process_rank() { return g_rank; }
int process_world_size() { return g_world; }

std::string process_host() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

static std::string decorate(const std::string& what, const char* file, int line) {
  std::ostringstream os;
  os << what << " [" << file << ":" << line;
  if (g_world > 1) os << ", rank " << g_rank << "/" << g_world << " on " << process_host();
  os << "]";
  return os.str();
}

Error::Error(const std::string& what, const char* file, int line)
    : std::runtime_error(decorate(what, file, line)), message_(what), file_(file), line_(line) {}

}  // namespace ulysses
