#include "core/json_depth.h"

#include "core/limits.h"

namespace ulysses {

void check_json_depth(std::string_view text, const std::string& file) {
  int depth = 0;
  size_t line = 1, line_start = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    }
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kMaxJsonDepth)
        refuse_nesting(file, limits::kMaxJsonDepth,
                       "line " + std::to_string(line) + ", column " + std::to_string(i - line_start + 1));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace ulysses
