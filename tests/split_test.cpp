#include <gtest/gtest.h>

#include "core/split.h"

namespace ulysses {

TEST(SplitCommas, PiecesInOrderWithoutEmptyOnes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_commas("q_proj,v_proj,down_proj"), (V{"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(split_commas("one"), (V{"one"}));
  EXPECT_EQ(split_commas(",a,,b,"), (V{"a", "b"}));
  EXPECT_EQ(split_commas(""), V{});
  EXPECT_EQ(split_commas(",,"), V{});
}

}  // namespace ulysses
