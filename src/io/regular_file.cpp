#include "io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ulysses {
namespace {

const char* kind_of(mode_t mode) {
  return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : "a device or socket";
}

}  // namespace

void require_regular_file(const std::string& path, const char* what) {
  struct stat st {};
  ULY_CHECK(::stat(path.c_str(), &st) == 0, path << ": cannot open " << what << " (" << std::strerror(errno) << ")");
  ULY_CHECK(S_ISREG(st.st_mode), path << ": the " << what << " is not a regular file but " << kind_of(st.st_mode)
                                      << "; give the path of a file");
}

std::string read_text_file(const std::string& path, const char* what, size_t max_bytes) {
  require_regular_file(path, what);
  // O_NONBLOCK: if the path was swapped for a FIFO since the check, open does not block (fstat refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ULY_CHECK(fd >= 0, path << ": cannot open " << what << " (" << std::strerror(errno) << ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ULY_FAIL(path << ": the " << what << " is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    ULY_FAIL(path << ": the " << what << " is " << size << " bytes, more than the " << max_bytes
                  << "-byte limit for such a file");
  }
  std::string text(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, text.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ULY_FAIL(path << ": reading the " << what << " failed after " << got << " of " << size << " bytes ("
                    << (n == 0 ? "the file shrank" : std::strerror(e)) << ")");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

std::string confined_path(const std::string& dir, const std::string& name, const std::string& source,
                          const std::string& what) {
  ULY_CHECK(!name.empty() && name.find('/') == std::string::npos && name.find('\0') == std::string::npos &&
                name != "." && name != "..",
            source << ": " << what << " names '" << name << "', which is not a file in " << dir
                   << " (a plain file name, without '/' or '..', is expected)");
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace ulysses
