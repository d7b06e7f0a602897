// Helpers shared by the tests: relative errors, random data, paths.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ulysses::test {

// ||a - b|| / ||b|| (b the reference); NaN anywhere gives +inf, so it never passes.
double rel_error(const double* a, const double* b, size_t n);
double rel_error(const float* a, const float* b, size_t n);
double rel_error(const float* a, const double* ref, size_t n);
double rel_error(const Tensor& a, const Tensor& ref);  // any float dtypes, same numel

std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
std::vector<float> random_vector_f(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);

std::string source_dir();   // the repository root
std::string fixtures_dir();  // <root>/fixtures
std::string temp_dir(const std::string& tag);  // a fresh empty directory under /tmp

}  // namespace ulysses::test
