// The measured attention-kernel table (backend/attention_choice.h): well formed, looked up by band,
// and our kernel chosen exactly where a row's ratio clears the margin.
#include "backend/attention_choice.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

namespace {

using ulysses::attention_choice_row;
using ulysses::attention_choice_table;
using ulysses::hopper_measured_faster;

// Both tables: d 64 / 128 rows, each naming its measurement, groups in increasing length from 0.
// Returns the number of (d, direction) groups.
size_t check_table(bool windowed) {
  std::map<std::pair<int64_t, bool>, int64_t> last;  // (d, backward) -> previous from_longest
  for (const auto& r : attention_choice_table(windowed)) {
    SCOPED_TRACE(std::string(windowed ? "windowed, " : "") + "d " + std::to_string(r.d) +
                 (r.backward ? " backward" : " forward") + " from " + std::to_string(r.from_longest));
    EXPECT_TRUE(r.d == 64 || r.d == 128);  // the Hopper kernels' head sizes
    EXPECT_GT(r.speedup, 0.0);
    EXPECT_LT(r.speedup, 10.0);
    EXPECT_FALSE(std::string(r.measured).empty()) << "every row names its measurement";
    EXPECT_GE(r.variant, 1);
    EXPECT_LE(r.variant, 7);
    const auto key = std::make_pair(r.d, r.backward);
    auto it = last.find(key);
    if (it == last.end()) EXPECT_EQ(r.from_longest, 0) << "each group starts at length 0";
    else EXPECT_GT(r.from_longest, it->second) << "rows of a group in increasing length";
    last[key] = r.from_longest;
  }
  return last.size();
}

TEST(AttentionChoice, TableIsWellFormed) {
  EXPECT_EQ(check_table(false), 4u) << "d 64 and 128, forward and backward";
  // Windowed rows: at least the d 128 pair (Mistral's head size).
  EXPECT_GE(check_table(true), 2u);
  EXPECT_NE(attention_choice_row(128, false, 32768, true), nullptr);
  EXPECT_NE(attention_choice_row(128, true, 32768, true), nullptr);
}

TEST(AttentionChoice, LooksUpTheBandAndAppliesTheMargin) {
  for (const bool windowed : {false, true})
    for (const auto& r : attention_choice_table(windowed)) {
      // The row itself answers at its own start, from its own table only.
      EXPECT_EQ(attention_choice_row(r.d, r.backward, r.from_longest, windowed), &r);
      EXPECT_NE(attention_choice_row(r.d, r.backward, r.from_longest, !windowed), &r);
      std::string why;
      const bool ours = hopper_measured_faster(r.d, r.backward, r.from_longest, windowed, &why);
      EXPECT_EQ(ours, r.speedup >= ulysses::kOursMargin);
      // The alternative named: cuDNN, or our FA2 kernels where cuDNN does not take the window.
      EXPECT_NE(why.find(windowed ? "FA2" : "x cuDNN"), std::string::npos) << why;
      EXPECT_NE(why.find(r.measured), std::string::npos) << why;
    }
  // No row: a head size the Hopper kernels do not take.
  std::string why = "stale";
  EXPECT_EQ(attention_choice_row(96, false, 4096), nullptr);
  EXPECT_FALSE(hopper_measured_faster(96, false, 4096, false, &why));
  EXPECT_TRUE(why.empty());
  // Bands: a length between two rows takes the lower one.
  const auto* lo = attention_choice_row(128, false, 0);
  const auto* mid = attention_choice_row(128, false, 20000);
  const auto* hi = attention_choice_row(128, false, int64_t(1) << 20);
  ASSERT_NE(lo, nullptr);
  ASSERT_NE(mid, nullptr);
  ASSERT_NE(hi, nullptr);
  EXPECT_LE(lo->from_longest, mid->from_longest);
  EXPECT_LE(mid->from_longest, 20000);
  EXPECT_LE(mid->from_longest, hi->from_longest);
}

}  // namespace
