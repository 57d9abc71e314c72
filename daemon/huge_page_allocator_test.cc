// The huge-page blocks of a capture's big vectors: what is freed is reused by the next big
// block (the pages, with what was written in them, are the same), split when smaller, and
// given back whole by ReleaseHugePageCache.
#include "daemon/huge_page_allocator.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

class HugePageCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { ReleaseHugePageCache(); }
  void TearDown() override { ReleaseHugePageCache(); }
};

TEST_F(HugePageCacheTest, BigVectorsAreOnAlignedBlocksKeptWhenFreedAndSmallOnesOnTheHeap) {
  {
    CaptureVector<uint64_t> big(kHugePage / sizeof(uint64_t) + 1, 7);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePage, 0u);
    EXPECT_EQ(big.back(), 7u);
  }
  EXPECT_EQ(HugePageCacheBytes(), 2 * kHugePage) << "2 MiB and 8 bytes take two huge pages";
  {
    CaptureVector<uint64_t> small(16, 1);
    EXPECT_EQ(small.back(), 1u);
  }
  EXPECT_EQ(HugePageCacheBytes(), 2 * kHugePage);
}

TEST_F(HugePageCacheTest, AFreedBlockIsReusedThenSplitThenReleased) {
  const size_t four = 4 * kHugePage;
  void* first = AllocateHugePages(four);
  ASSERT_NE(first, nullptr);
  static_cast<char*>(first)[four - 1] = 42;
  FreeHugePages(first, four);
  EXPECT_EQ(HugePageCacheBytes(), four);

  // A smaller block takes the front of the kept one; the rest stays kept.
  void* front = AllocateHugePages(kHugePage);
  EXPECT_EQ(front, first);
  EXPECT_EQ(HugePageCacheBytes(), four - kHugePage);
  void* rest = AllocateHugePages(3 * kHugePage);
  EXPECT_EQ(rest, static_cast<char*>(first) + kHugePage);
  EXPECT_EQ(static_cast<char*>(rest)[3 * kHugePage - 1], 42) << "the same pages, not new ones";
  EXPECT_EQ(HugePageCacheBytes(), 0u);

  // A block bigger than anything kept is a new mapping.
  FreeHugePages(front, kHugePage);
  void* bigger = AllocateHugePages(2 * kHugePage);
  EXPECT_NE(bigger, front);
  EXPECT_EQ(HugePageCacheBytes(), kHugePage);

  FreeHugePages(rest, 3 * kHugePage);
  FreeHugePages(bigger, 2 * kHugePage);
  EXPECT_EQ(ReleaseHugePageCache(), 6 * kHugePage);
  EXPECT_EQ(HugePageCacheBytes(), 0u);
}

}  // namespace
}  // namespace nrtprof::daemon
