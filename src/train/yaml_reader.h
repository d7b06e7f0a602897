// A YAML training config as JSON, read from the YAML parser's events rather than its
// node tree, so that what the tree would hide or drop is seen and refused with its line:
// a key given twice in one mapping (the tree keeps the last, silently), a second document
// (the tree reader returns the first), nesting deeper than limits::kMaxYamlDepth (checked
// as each level opens, before the parser goes deeper) and aliases that expand past
// limits::kMaxYamlNodes nodes (an "alias bomb", counted before anything is copied).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace ulysses {

// Scalars: quoted ones are strings; plain true/false/null/~ and numbers are typed; "nan"
// and "inf" stay text. An empty text, or one holding only null, reads as {}.
nlohmann::json read_yaml(const std::string& text, const std::string& source);

}  // namespace ulysses
