// One run per output folder: an advisory lock held for the run's life, and a
// fresh run that would write over another run's results refused.
#pragma once
#include <string>

namespace ulysses {

// Takes an exclusive advisory lock (flock) on OUT_DIR/run.lock, which then holds
// "pid host" of this process; a second run on the same folder, on any host that
// shares it, is refused with the holder's pid and host. Released on destruction
// (and by the kernel when the process dies, so a killed run leaves no stale lock).
class RunLock {
 public:
  explicit RunLock(const std::string& out_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// A fresh run (not resume) into a folder that already holds a run's metrics or
// checkpoints is refused unless overwrite is set.
void check_fresh_out_dir(const std::string& out_dir, bool resume, bool overwrite);

}  // namespace ulysses
