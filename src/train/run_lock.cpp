#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ulysses {
namespace fs = std::filesystem;

RunLock::RunLock(const std::string& out_dir) {
  const std::string path = (fs::path(out_dir) / "run.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ULY_CHECK(fd_ >= 0, "train: cannot open " << path << ": " << std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::ifstream in(path);
    std::string holder;
    std::getline(in, holder);
    ::close(fd_);
    fd_ = -1;
    ULY_CHECK(err != EWOULDBLOCK, "train: out_dir " << out_dir << " is in use by another run ("
                                                    << (holder.empty() ? std::string("holder unknown") : holder)
                                                    << "); wait for it to finish or choose another out_dir");
    ULY_FAIL("train: cannot lock " << path << ": " << std::strerror(err));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::ostringstream who;
  who << "pid " << ::getpid() << " on " << host << "\n";
  const std::string text = who.str();
  // Best effort: the lock itself is what guards; the text only names the holder.
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    (void)n;
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

void check_fresh_out_dir(const std::string& out_dir, bool resume, bool overwrite) {
  if (resume || overwrite) return;
  const fs::path dir(out_dir), metrics = dir / "metrics.jsonl", ckpts = dir / "checkpoints";
  std::error_code ec;
  const bool has_metrics = fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0;
  const bool has_ckpts = fs::is_directory(ckpts, ec) && !fs::is_empty(ckpts, ec);
  ULY_CHECK(!has_metrics && !has_ckpts,
            "train: out_dir " << out_dir << " already holds a run (" << (has_metrics ? "metrics.jsonl" : "")
                              << (has_metrics && has_ckpts ? ", " : "") << (has_ckpts ? "checkpoints/" : "")
                              << "); continue it with resume=true, start over in it with overwrite=true, or choose "
                                 "another out_dir");
}

}  // namespace ulysses
