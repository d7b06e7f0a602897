// A small command-line parser: --key value, --key=value, and bare --flag.
// Unknown options are errors that suggest the nearest known one.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/limits.h"

namespace ulysses {

struct OptionSpec {
  std::string name;      // without dashes
  bool takes_value;      // --name VALUE / --name=VALUE
  bool value_optional;   // --name alone is allowed too (e.g. --tiled-mlp[=N])
  std::string help;
  bool empty_ok = false;  // an empty value (--name= or --name '') means something; otherwise it is refused
};

class Args {
 public:
  // Parses argv[first..]; throws ulysses::Error on unknown options, missing or empty values, and
  // on more than max_positional words that are not options (a stray word is a mistake, not ignored).
  Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc, char** argv, int first,
       size_t max_positional = 0);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::string require(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  // The same, refused with "<command>: --name must be in <range>, got v" when given outside the range.
  int64_t get_int(const std::string& name, int64_t fallback, const IntRange& range) const;
  double get_double(const std::string& name, double fallback, const RealRange& range) const;
  const std::vector<std::string>& positional() const { return positional_; }
  static std::string usage(const std::string& command, const std::vector<OptionSpec>& specs);

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace ulysses
