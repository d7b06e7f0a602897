// The nesting rule of op families, shared by the step profile (core/step_profile.h: time) and
// the work ledger (core/step_work.h: the planner's work), so that the two count the same calls
// and attribute to the same family: the innermost open family takes what happens, a family
// opened with absorb_nested keeps everything opened inside it, and a family re-entered from
// inside itself (a helper calling a helper) is one call.
#pragma once
#include <cstddef>
#include <vector>

#include "core/error.h"

namespace ulysses {

class FamilyStack {
 public:
  // Inside an absorbing family, an open only adds a level that keeps the absorbing family on
  // top (so that the matching close pops it): true then, and the caller opens nothing.
  bool open_absorbed() {
    if (absorbing_ == 0) return false;
    stack_.push_back(Level{stack_.back().family, false});
    return true;
  }
  // Opens family f; true when that starts a call of it.
  bool open(size_t f, bool absorb_nested) {
    const bool call = stack_.empty() || stack_.back().family != f;
    stack_.push_back(Level{f, absorb_nested});
    absorbing_ += absorb_nested;
    return call;
  }
  void close(const char* who) {
    ULY_CHECK(!stack_.empty(), who << ": a family was closed that was never opened");
    absorbing_ -= stack_.back().absorbs;
    stack_.pop_back();
  }
  bool empty() const { return stack_.empty(); }
  size_t top() const { return stack_.back().family; }

 private:
  struct Level {
    size_t family;
    bool absorbs;
  };
  std::vector<Level> stack_;
  int absorbing_ = 0;
};

}  // namespace ulysses
