// Helpers shared by the tests: relative errors, random data, paths.
#pragma once
#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/batch.h"

namespace ulysses::test {

// ||a - b|| / ||b|| (b the reference); NaN anywhere gives +inf, so it never passes.
double rel_error(const double* a, const double* b, size_t n);
double rel_error(const float* a, const float* b, size_t n);
double rel_error(const float* a, const double* ref, size_t n);
double rel_error(const Tensor& a, const Tensor& ref);  // any float dtypes, same numel

std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
std::vector<float> random_vector_f(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);

// One row of S tokens packed in documents of doc_len tokens; ids and targets a fixed pattern.
TokenBatch patterned_batch(int64_t S, int64_t vocab, int64_t doc_len);

std::string source_dir();   // the repository root
std::string fixtures_dir();  // <root>/fixtures
std::string temp_dir(const std::string& tag);  // a fresh empty directory under /tmp

// Simulates a full disk: with RLIMIT_FSIZE lowered (and SIGXFSZ ignored) writes
// past the limit fail with EFBIG, exactly the path a full disk takes.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int);
};

}  // namespace ulysses::test
