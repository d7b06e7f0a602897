// "Did you mean" suggestions: the nearest of some known names to an unknown one
// (command-line options in cli/args, config keys in train/train_config).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ulysses {

// Levenshtein distance.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word`: by edit distance, a shared prefix counting for more,
// then an abbreviation within the same dotted section ("optimizer.lr" for "optimizer.learning_rate").
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ulysses
