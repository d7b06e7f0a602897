// EXPECT_ERROR(statement, "part", ...): the statement throws ulysses::Error whose
// message contains every part and is one line (what the CLI prints).
// expect_error(fn): the message of the ulysses::Error fn throws (a failure if none).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

#define EXPECT_ERROR(stmt, ...)                                                                \
  do {                                                                                         \
    try {                                                                                      \
      stmt;                                                                                    \
      ADD_FAILURE() << "no exception from: " #stmt;                                            \
    } catch (const ::ulysses::Error& e) {                                                      \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__})                    \
        EXPECT_NE(e.message().find(part), std::string::npos)                                   \
            << "message lacks '" << part << "': " << e.message();                              \
      EXPECT_EQ(e.message().find('\n'), std::string::npos) << "not one line: " << e.message(); \
    }                                                                                          \
  } while (0)

namespace ulysses::test {

inline std::string expect_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ::ulysses::Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no ulysses::Error thrown";
  return "";
}

}  // namespace ulysses::test
