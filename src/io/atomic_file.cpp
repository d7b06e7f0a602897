#include "io/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ulysses {

AtomicFile::AtomicFile(std::string path) : final_(std::move(path)), tmp_(final_ + ".tmp") {
  for (const std::string* p : {&final_, &tmp_}) {
    struct stat st {};
    ULY_CHECK(::lstat(p->c_str(), &st) != 0 || S_ISREG(st.st_mode),
              final_ << ": " << *p << " exists and is not a regular file ("
                     << (S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory"
                                                                   : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                                                           : "a device or socket")
                     << "); nothing was written: give a path to a regular file or a new one");
  }
  fp_ = std::fopen(tmp_.c_str(), "wb");
  ULY_CHECK(fp_ != nullptr, final_ << ": cannot create " << tmp_ << " (" << std::strerror(errno) << ")");
}

AtomicFile::~AtomicFile() {
  if (fp_ != nullptr) std::fclose(fp_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes, size_t total) {
  if (bytes == 0) return;
  ULY_CHECK(fp_ != nullptr, final_ << ": write after commit");
  if (std::fwrite(data, 1, bytes, fp_) != bytes) fail("write failed", total);
  written_ += bytes;
}

void AtomicFile::commit(size_t total) {
  ULY_CHECK(fp_ != nullptr, final_ << ": committed twice");
  if (std::fflush(fp_) != 0) fail("flush failed", total);
  if (fsync(fileno(fp_)) != 0) fail("fsync failed", total);
  std::FILE* fp = fp_;
  fp_ = nullptr;
  if (std::fclose(fp) != 0) fail("close failed", total);
  if (std::rename(tmp_.c_str(), final_.c_str()) != 0) {
    const int e = errno;
    ULY_FAIL(final_ << ": cannot rename " << tmp_ << " into place (" << std::strerror(e) << "); nothing was written");
  }
  committed_ = true;
}

void AtomicFile::fail(const char* what, size_t total) {
  const int e = errno;
  ULY_FAIL(final_ << ": " << what << " after " << written_ << " of " << (total > 0 ? total : written_)
                  << " bytes (" << std::strerror(e) << "); removed " << tmp_
                  << ", nothing was written (is the disk full?)");
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size(), text.size());
  f.commit(text.size());
}

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  struct stat st {};
  ULY_CHECK(::stat(path_.c_str(), &st) != 0 || S_ISREG(st.st_mode),
            path_ << ": exists and is not a regular file; nothing was written");
  fp_ = std::fopen(path_.c_str(), "ab");
  ULY_CHECK(fp_ != nullptr, path_ << ": cannot open for appending (" << std::strerror(errno) << ")");
}

AppendFile::~AppendFile() {
  if (fp_ != nullptr) std::fclose(fp_);
}

void AppendFile::append(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), fp_) != text.size()) fail("write failed");
  if (std::fflush(fp_) != 0) fail("write failed");
}

void AppendFile::sync() {
  if (std::fflush(fp_) != 0) fail("write failed");
  if (fsync(fileno(fp_)) != 0) fail("fsync failed");
}

void AppendFile::fail(const char* what) {
  const int e = errno;
  ULY_FAIL(path_ << ": " << what << " (" << std::strerror(e) << "); is the disk full?");
}

}  // namespace ulysses
