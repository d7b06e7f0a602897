#include "core/limits.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace ulysses {
namespace {

std::string with_note(const std::string& range, const char* note) {
  return note != nullptr && *note != '\0' ? range + " (" + note + ")" : range;
}

// 1048576 (not 1.04858e+06), 0.0003, 1e-08.
std::string number_text(double v) {
  std::ostringstream os;
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) os << static_cast<int64_t>(v);
  else os << v;
  return os.str();
}

}  // namespace

void refuse_nesting(const std::string& file, int limit, const std::string& where) {
  ULY_FAIL(file << ": nesting deeper than " << limit << " at " << where);
}

std::string describe_range(const IntRange& r) {
  std::ostringstream os;
  os << "[" << r.lo << ", ";
  if (r.hi == limits::kInt64Max) os << "...)";
  else os << r.hi << "]";
  return os.str();
}

std::string describe_range(const RealRange& r) {
  std::ostringstream os;
  os << (r.lo_open ? "(" : "[") << number_text(r.lo) << ", ";
  if (std::isinf(r.hi)) os << "...)";
  else os << number_text(r.hi) << (r.hi_open ? ")" : "]");
  return os.str();
}

int64_t check_in_range(const std::string& what, int64_t v, const IntRange& r) {
  ULY_CHECK(v >= r.lo && v <= r.hi, what << " must be in " << with_note(describe_range(r), r.note) << ", got " << v);
  return v;
}

double check_in_range(const std::string& what, double v, const RealRange& r) {
  const bool above = r.lo_open ? v > r.lo : v >= r.lo;
  const bool below = r.hi_open ? v < r.hi : v <= r.hi;
  ULY_CHECK(std::isfinite(v) && above && below,
            what << " must be in " << with_note(describe_range(r), r.note) << ", got " << number_text(v));
  return v;
}

int64_t max_threads() {
  const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return 4 * hw;
}

}  // namespace ulysses
