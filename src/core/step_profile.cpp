#include "core/step_profile.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace ulysses {

size_t StepProfile::index_of(const char* name) {
  for (size_t i = 0; i < families_.size(); ++i)
    if (families_[i].name == name) return i;
  ULY_CHECK(std::string(name) != "other" && std::string(name) != "accounted",
            "profile: '" << name << "' is a row of the table, not a family name");
  families_.push_back(Family{name});
  return families_.size() - 1;
}

void StepProfile::open(const char* family, bool absorb_nested, double t) {
  ULY_CHECK(family != nullptr && *family != '\0', "profile: a family needs a name");
  if (!stack_.empty()) families_[stack_.top()].seconds += std::max(0.0, t - last_t_);
  last_t_ = t;
  if (stack_.open_absorbed()) return;
  const size_t f = index_of(family);
  if (stack_.open(f, absorb_nested)) ++families_[f].calls;
}

void StepProfile::close(double t) {
  ULY_CHECK(!stack_.empty(), "profile: a family was closed that was never opened");
  families_[stack_.top()].seconds += std::max(0.0, t - last_t_);
  last_t_ = t;
  stack_.close("profile");
}

void StepProfile::add_step(double seconds) {
  ULY_CHECK(stack_.empty(), "profile: a step ended with a family still open");
  step_seconds_ += seconds;
  ++steps_;
}

void StepProfile::reset() { *this = StepProfile{}; }

std::vector<StepProfile::Row> StepProfile::rows() const {
  std::vector<Row> out;
  if (steps_ == 0) return out;
  const double n = static_cast<double>(steps_);
  double covered = 0;
  for (const Family& f : families_) {
    covered += f.seconds;
    out.push_back(Row{f.name, f.seconds / n, step_seconds_ > 0 ? f.seconds / step_seconds_ : 0.0,
                      static_cast<double>(f.calls) / n});
  }
  std::stable_sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  // Clamped: event clocks and the host clock may disagree by microseconds.
  const double other = std::max(0.0, step_seconds_ - covered);
  out.push_back(Row{"other", other / n, step_seconds_ > 0 ? other / step_seconds_ : 0.0, 0.0});
  return out;
}

double StepProfile::accounted() const {
  const std::vector<Row> r = rows();
  return r.empty() || step_seconds_ <= 0 ? 0.0 : 1.0 - r.back().share;
}

std::string StepProfile::table() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-24s %12s %8s %10s\n", "family", "s/step", "% step", "calls/step");
  out += line;
  for (const Row& r : rows()) {
    std::snprintf(line, sizeof line, "%-24s %12.6f %7.2f%% %10.0f\n", r.family.c_str(), r.seconds, 100.0 * r.share,
                  r.calls);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-24s %12.6f %7.2f%%   (%lld steps)\n", "accounted",
                steps_ > 0 ? step_seconds_ / static_cast<double>(steps_) * accounted() : 0.0, 100.0 * accounted(),
                static_cast<long long>(steps_));
  out += line;
  return out;
}

nlohmann::json StepProfile::json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Row& r : rows()) j[r.family] = {{"seconds", r.seconds}, {"share", r.share}, {"calls", r.calls}};
  j["accounted"] = accounted();
  return j;
}

}  // namespace ulysses
