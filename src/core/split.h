// Comma-separated lists as options and config values give them ("a,b,c"): the pieces in order,
// empty ones (",,", a trailing comma) left out.
#pragma once
#include <string>
#include <vector>

namespace ulysses {

std::vector<std::string> split_commas(const std::string& list);

}  // namespace ulysses
