#include "core/step_work.h"

#include "core/error.h"

namespace ulysses {

double FamilyWork::collective_bytes() const {
  double b = 0;
  for (const CollectiveWork& c : collectives) b += c.bytes;
  return b;
}

size_t WorkLedger::index_of(const char* name) {
  for (size_t i = 0; i < families_.size(); ++i)
    if (families_[i].family == name) return i;
  FamilyWork f;
  f.family = name;
  families_.push_back(f);
  return families_.size() - 1;
}

void WorkLedger::open(const char* family, bool absorb_nested) {
  ULY_CHECK(family != nullptr && *family != '\0', "work ledger: a family needs a name");
  if (stack_.open_absorbed()) return;
  const size_t f = index_of(family);
  if (stack_.open(f, absorb_nested)) ++families_[f].calls;
}

void WorkLedger::close() { stack_.close("work ledger"); }

FamilyWork& WorkLedger::current() { return families_[stack_.empty() ? index_of("(none)") : stack_.top()]; }

void WorkLedger::add_collective(const char* kind, int group, double bytes) {
  if (group <= 1) return;
  FamilyWork& f = current();
  for (CollectiveWork& c : f.collectives)
    if (c.kind == kind && c.group == group) {
      c.bytes += bytes;
      ++c.calls;
      return;
    }
  f.collectives.push_back(CollectiveWork{kind, group, bytes, 1});
}

const FamilyWork* WorkLedger::find(const std::string& family) const {
  for (const FamilyWork& f : families_)
    if (f.family == family) return &f;
  return nullptr;
}

}  // namespace ulysses
