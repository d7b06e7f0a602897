// One error policy for the whole engine: library code throws ulysses::Error;
// only the CLI catches, prints one line and exits non-zero (aborting other ranks).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ulysses {

// Identity of this process, stamped into every error so that a message from
// one of many MPI ranks says where it came from.
void set_process_identity(int rank, int world_size);
int process_rank();
int process_world_size();
std::string process_host();

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const char* file, int line);
  // The message alone, without file:line/rank decoration.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

}  // namespace ulysses

// ULY_CHECK(cond, "message " << value << " more"): throws ulysses::Error when cond is false.
#define ULY_CHECK(cond, stream_expr)                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::ostringstream uly_oss_;                                           \
      uly_oss_ << stream_expr;                                               \
      throw ::ulysses::Error(uly_oss_.str(), __FILE__, __LINE__);            \
    }                                                                        \
  } while (0)

#define ULY_FAIL(stream_expr)                                                \
  do {                                                                       \
    std::ostringstream uly_oss_;                                             \
    uly_oss_ << stream_expr;                                                 \
    throw ::ulysses::Error(uly_oss_.str(), __FILE__, __LINE__);              \
  } while (0)
