// The depth of a JSON text, checked before it is parsed. nlohmann's parser itself keeps
// an explicit stack, but what is done with the value afterwards recurses: copies, ==,
// dump(), and our readers of tokenizer and chat-template structures. A text nested
// deeper than limits::kMaxJsonDepth is refused here, naming the line and column.
#pragma once
#include <string>
#include <string_view>

namespace ulysses {

// Throws "<file>: nesting deeper than N at line L, column C" when an array or object
// opens deeper than limits::kMaxJsonDepth. Linear, no allocation; malformed JSON is left
// to the parser (strings are skipped with their escapes, brackets inside them ignored).
void check_json_depth(std::string_view text, const std::string& file);

}  // namespace ulysses
