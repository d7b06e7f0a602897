// The run's output folder, made usable or refused with one line before anything is
// written: an empty name, a path that is a file, device, FIFO or dangling symlink, a
// parent that cannot hold it, and an existing non-empty folder that is not a run of ours
// (as root, `out_dir=/etc` must not scatter checkpoints among the system's files).
#pragma once
#include <string>

namespace ulysses {

// A run of ours: the folder holds run.lock (every run takes it first), metrics.jsonl or
// checkpoints/. Anything else non-empty is refused whatever `overwrite` says: overwrite
// lets a run start over in a folder of ours, not in any folder.
bool is_run_folder(const std::string& dir);

// Makes out_dir (and its parents) when absent; throws an Error naming out_dir otherwise.
void prepare_out_dir(const std::string& out_dir);

}  // namespace ulysses
