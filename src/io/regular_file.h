// Inputs are read only from regular files: a directory given as a file reads as
// garbage, and opening a FIFO blocks until something writes to it (forever, from
// a user's typo). Checked on the path before opening, with one clear message.
#pragma once
#include <string>

namespace ulysses {

// Throws an Error naming `path`, what it is and what was expected (`what`, e.g.
// "config") unless it is a regular file (or a symlink to one).
void require_regular_file(const std::string& path, const char* what);

}  // namespace ulysses
