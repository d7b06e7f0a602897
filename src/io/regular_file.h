// The rules for files read from and named by files (docs/reliability.md):
// - inputs are read only from regular files: a directory given as a file reads as
//   garbage, and opening a FIFO blocks until something writes to it (forever, from
//   a user's typo); checked on the path before opening, with one clear message;
// - a file read whole into memory has a stated size limit, checked before reading;
// - a path read from a file (a shard in a manifest or an index, checkpoints/latest)
//   names a file inside the folder that holds it, never "../x" or "/etc/x".
#pragma once
#include <cstddef>
#include <string>

namespace ulysses {

// Throws an Error naming `path`, what it is and what was expected (`what`, e.g.
// "config") unless it is a regular file (or a symlink to one).
void require_regular_file(const std::string& path, const char* what);

// The whole of a regular file of at most max_bytes; errors name the path and `what`.
std::string read_text_file(const std::string& path, const char* what, size_t max_bytes);

// `name` as read from `source` (e.g. an index listing a shard): a plain file name
// relative to `dir`, with no folder part, or an Error saying why not. Returns dir/name.
std::string confined_path(const std::string& dir, const std::string& name, const std::string& source,
                          const std::string& what);

}  // namespace ulysses
