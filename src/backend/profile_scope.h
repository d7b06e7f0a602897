// A family of ops in the step's profile (core/step_profile.h), open for the
// lifetime of the scope. next() and end() exist so that a straight run of ops
// can be split into families by added lines alone, without new braces.
#pragma once
#include "backend/backend.h"

namespace ulysses {

class ProfileScope {
 public:
  enum Nesting { Exclusive, AbsorbNested };

  ProfileScope(Backend& backend, const char* family, Nesting nesting = Exclusive) : backend_(backend) {
    backend_.profile_push(family, nesting == AbsorbNested);
  }
  ~ProfileScope() {
    // A destructor may run while an error unwinds: a profiler failure must not
    // turn that into std::terminate; a device error resurfaces at the next op.
    try {
      end();
    } catch (...) {
    }
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

  // Closes this family and opens `family` in its place.
  void next(const char* family) {
    end();
    backend_.profile_push(family, false);
    open_ = true;
  }
  void end() {
    if (!open_) return;
    open_ = false;
    backend_.profile_pop();
  }

 private:
  Backend& backend_;
  bool open_ = true;
};

}  // namespace ulysses
