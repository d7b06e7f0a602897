#include "io/regular_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ulysses {

void require_regular_file(const std::string& path, const char* what) {
  struct stat st {};
  ULY_CHECK(::stat(path.c_str(), &st) == 0, path << ": cannot open " << what << " (" << std::strerror(errno) << ")");
  ULY_CHECK(S_ISREG(st.st_mode), path << ": the " << what << " is not a regular file but "
                                      << (S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                                                                    : "a device or socket")
                                      << "; give the path of a file");
}

}  // namespace ulysses
