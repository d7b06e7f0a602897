// Typed access to the fields of one JSON object (config.json and its blocks); every error
// names the source and the field path ("rope_scaling.factor").
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/limits.h"

namespace ulysses {

// Typed access to one JSON object; every error names the source and the field
// path ("rope_scaling.factor"). A null value counts as absent, as transformers
// treats it.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, const std::string& source, std::string prefix = "")
      : j_(j), source_(source), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  std::string name(const char* key) const { return prefix_ + key; }

  [[noreturn]] void wrong_type(const char* key, const char* want) const {
    ULY_FAIL(source_ << ": field '" << name(key) << "' must be " << want << ", got " << j_[key].type_name() << " "
                     << j_[key].dump());
  }

  int64_t integer(const char* key) const {
    ULY_CHECK(has(key), source_ << ": missing required field '" << name(key) << "'");
    const nlohmann::json& v = j_[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    wrong_type(key, "an integer");
  }
  std::optional<int64_t> opt_integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    return integer(key);
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    ULY_CHECK(v > 0, source_ << ": field '" << name(key) << "' (" << v << ") must be positive");
    return v;
  }
  int64_t opt_positive(const char* key, int64_t fallback) const { return has(key) ? positive(key) : fallback; }
  // A positive count no larger than the stated limit (core/limits.h).
  int64_t count(const char* key, const IntRange& range) const {
    return check_in_range(source_ + ": field '" + name(key) + "'", positive(key), range);
  }
  int64_t opt_count(const char* key, int64_t fallback, const IntRange& range) const {
    return has(key) ? count(key, range) : fallback;
  }

  double number(const char* key) const {
    ULY_CHECK(has(key), source_ << ": missing required field '" << name(key) << "'");
    const nlohmann::json& v = j_[key];
    if (v.is_number()) return v.get<double>();
    wrong_type(key, "a number");
  }
  double positive_number(const char* key) const {
    const double v = number(key);
    ULY_CHECK(v > 0, source_ << ": field '" << name(key) << "' (" << v << ") must be positive");
    return v;
  }
  double opt_positive_number(const char* key, double fallback) const {
    return has(key) ? positive_number(key) : fallback;
  }
  // A number within the stated range (core/limits.h), or the fallback when absent.
  double opt_number_in(const char* key, double fallback, const RealRange& range) const {
    return has(key) ? check_in_range(source_ + ": field '" + name(key) + "'", number(key), range) : fallback;
  }

  bool opt_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (j_[key].is_boolean()) return j_[key].get<bool>();
    wrong_type(key, "true or false");
  }
  std::optional<std::string> opt_string(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (j_[key].is_string()) return j_[key].get<std::string>();
    wrong_type(key, "a string");
  }
  const nlohmann::json& object(const char* key) const {
    if (!j_[key].is_object()) wrong_type(key, "an object");
    return j_[key];
  }

 private:
  const nlohmann::json& j_;
  const std::string& source_;
  std::string prefix_;
};

}  // namespace ulysses
