// The arena that backs the device and pinned host pools once the memory plan is
// known: pieces inside the block, coalescing, fallback when full, exact accounting.
#include "core/arena_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"

namespace ulysses {
namespace {

bool aligned(void* p) { return reinterpret_cast<uintptr_t>(p) % ArenaAllocator::kAlignment == 0; }

TEST(ArenaAllocator, PassesThroughBeforeReserve) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  void* p = arena.allocate(100);
  EXPECT_EQ(backing.current_bytes(), 100u);
  EXPECT_EQ(arena.current_bytes(), 100u);
  arena.deallocate(p, 100);
  EXPECT_EQ(backing.current_bytes(), 0u);
  EXPECT_EQ(arena.stats().fallbacks, 0u);  // not a fallback: there is no block yet
}

TEST(ArenaAllocator, PiecesComeFromTheBlockAndCoalesce) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  arena.reserve(4096);
  const size_t block = backing.current_bytes();
  EXPECT_EQ(block, 4096u + ArenaAllocator::kAlignment);
  void* a = arena.allocate(1000);  // rounds to 1024
  void* b = arena.allocate(1);     // 256
  void* c = arena.allocate(512);
  EXPECT_TRUE(aligned(a) && aligned(b) && aligned(c));
  EXPECT_EQ(backing.current_bytes(), block) << "no allocation may reach the backing allocator";
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);
  EXPECT_EQ(arena.current_bytes(), 1513u) << "accounting counts the bytes asked for, as the planner does";
  arena.deallocate(b, 1);
  arena.deallocate(a, 1000);
  void* ab = arena.allocate(1280);  // fits only in the merged a+b hole
  EXPECT_EQ(ab, a);
  arena.deallocate(ab, 1280);
  arena.deallocate(c, 512);
  EXPECT_EQ(arena.stats().largest_free, 4096u) << "all pieces merge back into one";
  EXPECT_EQ(arena.current_bytes(), 0u);
  EXPECT_EQ(arena.peak_bytes(), 512u + 1280u);
  EXPECT_EQ(arena.stats().high_water, 1792u);
}

TEST(ArenaAllocator, BestFitPicksTheSmallestHole) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  arena.reserve(8 * 256);
  std::vector<void*> p;
  for (int i = 0; i < 8; ++i) p.push_back(arena.allocate(256));
  arena.deallocate(p[1], 256);  // hole of 1
  arena.deallocate(p[3], 256);  // hole of 2 (3, 4)
  arena.deallocate(p[4], 256);
  void* q = arena.allocate(200);
  EXPECT_EQ(q, p[1]);
  void* r = arena.allocate(512);
  EXPECT_EQ(r, p[3]);
}

TEST(ArenaAllocator, FallsBackWhenFullAndCountsIt) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  arena.reserve(1024);
  void* a = arena.allocate(1024);
  void* b = arena.allocate(10);  // no room: passed through
  EXPECT_EQ(backing.current_bytes(), 1024u + ArenaAllocator::kAlignment + 10u);
  EXPECT_EQ(arena.stats().fallbacks, 1u);
  EXPECT_EQ(arena.stats().fallback_bytes, 10u);
  arena.deallocate(b, 10);
  EXPECT_EQ(backing.current_bytes(), 1024u + ArenaAllocator::kAlignment);
  arena.deallocate(a, 1024);
  EXPECT_EQ(arena.current_bytes(), 0u);
}

TEST(ArenaAllocator, ReserveWhileInUseIsAnError) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  arena.reserve(1024);
  void* a = arena.allocate(8);
  EXPECT_THROW(arena.reserve(2048), Error);
  arena.deallocate(a, 8);
  arena.reserve(2048);
  EXPECT_EQ(arena.stats().reserved, 2048u);
  arena.release();
  EXPECT_EQ(backing.current_bytes(), 0u);
}

TEST(ArenaAllocator, FreeingAForeignPointerInsideTheBlockIsAnError) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  arena.reserve(1024);
  char* a = static_cast<char*>(arena.allocate(512));
  EXPECT_THROW(arena.deallocate(a + 256, 8), Error);
  arena.deallocate(a, 512);
}

// Random sizes and orders: live pieces never overlap (each holds its own
// pattern until freed), and at the end the block is whole again.
TEST(ArenaAllocator, RandomTrafficNeverOverlaps) {
  HostAllocator backing("backing");
  ArenaAllocator arena(backing, "arena");
  const size_t block = size_t{1} << 20;
  arena.reserve(block);
  std::mt19937 rng(7);
  struct Live { unsigned char* p; size_t n; unsigned char tag; };
  std::vector<Live> live;
  size_t expected = 0;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t n = 1 + rng() % 20000;
      const size_t fallbacks = arena.stats().fallbacks;
      auto* p = static_cast<unsigned char*>(arena.allocate(n));
      if (arena.stats().fallbacks == fallbacks) ASSERT_TRUE(aligned(p)) << "pieces of the block are aligned";
      const auto tag = static_cast<unsigned char>(step);
      std::memset(p, tag, n);
      live.push_back({p, n, tag});
      expected += n;
    } else {
      const size_t i = rng() % live.size();
      for (size_t j = 0; j < live[i].n; ++j) ASSERT_EQ(live[i].p[j], live[i].tag) << "piece overwritten";
      arena.deallocate(live[i].p, live[i].n);
      expected -= live[i].n;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(arena.current_bytes(), expected);
  }
  for (auto& l : live) {
    for (size_t j = 0; j < l.n; ++j) ASSERT_EQ(l.p[j], l.tag);
    arena.deallocate(l.p, l.n);
  }
  EXPECT_EQ(arena.stats().largest_free, block);
  EXPECT_GT(arena.stats().fallbacks, 0u) << "the traffic was meant to overflow the block at times";
  EXPECT_EQ(backing.current_bytes(), block + ArenaAllocator::kAlignment);
}

}  // namespace
}  // namespace ulysses
