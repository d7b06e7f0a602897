// The caching allocator reuses a freed block for a request of the same rounded size, asks the
// backing allocator only for new sizes, and returns everything when it dies.
#include "core/caching_allocator.h"

#include <gtest/gtest.h>

namespace ulysses {
namespace {

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameRoundedSize) {
  HostAllocator backing("backing");
  {
    CachingAllocator cache(backing, "cache");
    void* a = cache.allocate(1000);
    EXPECT_EQ(backing.current_bytes(), size_t{1} << 20);  // whole MiB from the backing allocator
    EXPECT_EQ(cache.current_bytes(), 1000u);
    cache.deallocate(a, 1000);
    EXPECT_EQ(cache.current_bytes(), 0u);
    EXPECT_EQ(backing.current_bytes(), size_t{1} << 20);  // kept
    void* b = cache.allocate(5000);  // rounds to the same MiB: the same block
    EXPECT_EQ(b, a);
    void* c = cache.allocate((size_t{1} << 20) + 1);  // two MiB: a new block
    EXPECT_NE(c, a);
    EXPECT_EQ(backing.current_bytes(), size_t{3} << 20);
    EXPECT_EQ(cache.peak_bytes(), 5000u + (size_t{1} << 20) + 1);
    cache.deallocate(b, 5000);
    cache.deallocate(c, (size_t{1} << 20) + 1);
    EXPECT_EQ(cache.allocate(0), nullptr);
  }
  EXPECT_EQ(backing.current_bytes(), 0u);  // all returned
}

}  // namespace
}  // namespace ulysses
