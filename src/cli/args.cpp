#include "cli/args.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/nearest.h"

namespace ulysses {

Args::Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc, char** argv, int first,
           size_t max_positional)
    : command_(command) {
  auto find = [&](const std::string& name) -> const OptionSpec* {
    for (const auto& s : specs)
      if (s.name == name) return &s;
    return nullptr;
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      ULY_CHECK(positional_.size() < max_positional,
                command << ": unexpected argument '" << a << "'"
                        << (a.size() > 1 && a[0] == '-' ? " (options start with --)" : "")
                        << (max_positional == 0 ? "; this command takes options only"
                                                : "; see 'ulysses " + command + " --help'"));
      positional_.push_back(a);
      continue;
    }
    a = a.substr(2);
    std::string value;
    bool has_value = false;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const OptionSpec* spec = find(a);
    // Options renamed: the old name answered with the new one, not with a near miss.
    ULY_CHECK(!(a == "checkpoint-every" && find("checkpoint-segment")),
              command << ": --checkpoint-every was renamed --checkpoint-segment (layers per checkpoint segment)");
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const auto& s : specs) names.push_back(s.name);
      ULY_FAIL(command << ": unknown option --" << a << (names.empty() ? "" : " (did you mean --" + nearest(a, names) + "?)")
                       << "; see 'ulysses " << command << " --help'");
    }
    if (spec->takes_value && !has_value && !spec->value_optional) {
      ULY_CHECK(i + 1 < argc, command << ": option --" << a << " needs a value");
      value = argv[++i];
      has_value = true;
    }
    ULY_CHECK(spec->takes_value || !has_value, command << ": option --" << a << " takes no value");
    // "--steps=" or "--steps ''" (a variable that expanded to nothing) is a mistake, not the default.
    ULY_CHECK(!has_value || !value.empty() || spec->empty_ok,
              command << ": option --" << a << " was given an empty value; give a value or leave the option out");
    values_[a] = value;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::require(const std::string& name) const {
  auto it = values_.find(name);
  ULY_CHECK(it != values_.end() && !it->second.empty(),
            command_ << ": missing required option --" << name << "; see 'ulysses " << command_ << " --help'");
  return it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return fallback;
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    ULY_CHECK(used == it->second.size(), "");
    return v;
  } catch (...) {
    ULY_FAIL(command_ << ": option --" << name << " expects an integer, got '" << it->second << "'");
  }
}

double Args::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    // Decimal only: strtod also reads hexadecimal floats ("0x10" = 16), which no user means here.
    const bool hex = it->second.find_first_of("xX") != std::string::npos;
    if (used == it->second.size() && std::isfinite(v) && !hex) return v;
  } catch (...) {
  }
  ULY_FAIL(command_ << ": option --" << name << " expects a finite number, got '" << it->second << "'");
}

int64_t Args::get_int(const std::string& name, int64_t fallback, const IntRange& range) const {
  if (get(name).empty()) return fallback;  // the fallback is the command's own choice
  return check_in_range(command_ + ": --" + name, get_int(name, fallback), range);
}

double Args::get_double(const std::string& name, double fallback, const RealRange& range) const {
  if (get(name).empty()) return fallback;
  return check_in_range(command_ + ": --" + name, get_double(name, fallback), range);
}

std::string Args::usage(const std::string& command, const std::vector<OptionSpec>& specs) {
  std::ostringstream os;
  os << "usage: ulysses " << command << " [options]\n\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.takes_value ? (s.value_optional ? "[=V]" : " V") : "");
    os << left << std::string(left.size() < 34 ? 34 - left.size() : 1, ' ') << s.help << "\n";
  }
  return os.str();
}

}  // namespace ulysses
