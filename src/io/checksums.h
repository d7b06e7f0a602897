// Checksums of a folder's files at rest: a checkpoint's model/, optimizer state and trainer
// state. A flipped bit or a truncated tensor that keeps its header valid would otherwise load
// silently. checksums.json lists each file (path relative to the folder) with its size and
// CRC-32 (zlib's; a few GB/s), written after the files and before the folder is declared
// complete, verified before the files are used.
#pragma once
#include <string>

namespace ulysses {

inline constexpr const char* kChecksumsFile = "checksums.json";

// Records every regular file under dir (subfolders included; checksums.json and COMPLETE
// left out) in dir/checksums.json, written atomically.
void write_checksums(const std::string& dir);

// When dir/checksums.json exists: every file it lists must exist with its size and CRC-32;
// else throws one line naming the file ("<dir>/<file>: checksum mismatch ..."). A folder
// without the file (written before checksums existed) passes. Returns whether it was checked.
bool verify_checksums(const std::string& dir);

}  // namespace ulysses
