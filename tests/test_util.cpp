#include "test_util.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

namespace ulysses::test {

template <class A, class B>
static double rel_error_impl(const A* a, const B* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    num += (x - y) * (x - y);
    den += y * y;
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

double rel_error(const double* a, const double* b, size_t n) { return rel_error_impl(a, b, n); }
double rel_error(const float* a, const float* b, size_t n) { return rel_error_impl(a, b, n); }
double rel_error(const float* a, const double* ref, size_t n) { return rel_error_impl(a, ref, n); }

double rel_error(const Tensor& a, const Tensor& ref) {
  ULY_CHECK(a.numel() == ref.numel(), "rel_error: " << a.describe() << " vs " << ref.describe());
  std::vector<double> x(a.numel()), y(ref.numel());
  convert_to_f64(x.data(), a.raw(), a.dtype(), x.size());
  convert_to_f64(y.data(), ref.raw(), ref.dtype(), y.size());
  return rel_error_impl(x.data(), y.data(), x.size());
}

std::vector<double> random_vector(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> random_vector_f(size_t n, uint64_t seed, double lo, double hi) {
  auto d = random_vector(n, seed, lo, hi);
  return std::vector<float>(d.begin(), d.end());
}

TokenBatch patterned_batch(int64_t S, int64_t vocab, int64_t doc_len) {
  TokenBatch b;
  b.B = 1;
  b.S = S;
  for (int64_t i = 0; i < S; ++i) {
    b.ids.push_back(static_cast<int32_t>((i * 7 + 3) % vocab));
    b.targets.push_back(static_cast<int32_t>((i * 5 + 1) % vocab));
    b.positions.push_back(static_cast<int32_t>(i % doc_len));
  }
  return b;
}

std::string source_dir() {
#ifdef ULYSSES_SOURCE_DIR
  return ULYSSES_SOURCE_DIR;
#else
  return ".";
#endif
}

std::string fixtures_dir() { return source_dir() + "/fixtures"; }

std::string temp_dir(const std::string& tag) {
  static int counter = 0;
  auto p = std::filesystem::temp_directory_path() /
           ("ulysses_test_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace ulysses::test
