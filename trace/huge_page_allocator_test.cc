// The huge-page blocks of a capture's big vectors: while a capture is written (HugePageReuse)
// what is freed is reused by the next big block (the same pages, with what was written in
// them), split when that is smaller; outside a scope, and when the last scope ends, freed
// blocks go back to the system -- unless a capture asked for them to stay for the next one.
#include "trace/huge_page_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

// Writes every 4 KiB page of the block, as a vector filling it would: only touched pages are
// kept for reuse.
char* Touched(void* block, size_t bytes) {
  char* p = static_cast<char*>(block);
  for (size_t at = 0; at < bytes; at += 4096) p[at] = 1;
  return p;
}

TEST(HugePageAllocatorTest, BigVectorsAreOnAlignedBlocksAndFreedAtOnceOutsideACapture) {
  {
    CaptureVector<uint64_t> big(kHugePage / sizeof(uint64_t) + 1, 7);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePage, 0u);
    EXPECT_EQ(big.back(), 7u);
  }
  EXPECT_EQ(HugePageReuseBytes(), 0u);
}

TEST(HugePageAllocatorTest, WhileACaptureIsWrittenFreedBlocksAreReusedThenSplitThenUnmapped) {
  std::optional<HugePageReuse> capture(std::in_place);
  {
    CaptureVector<uint64_t> big(kHugePage / sizeof(uint64_t) + 1, 7);
    CaptureVector<uint64_t> small(16, 1);
  }
  EXPECT_EQ(HugePageReuseBytes(), 2 * kHugePage)
      << "2 MiB and 8 bytes take two huge pages; 128 bytes come from the heap";

  void* front = AllocateHugePages(kHugePage);
  void* back = AllocateHugePages(kHugePage);
  EXPECT_EQ(static_cast<char*>(back), static_cast<char*>(front) + kHugePage)
      << "the two halves of the block kept";
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(back), 7u) << "the same pages, not new ones";
  EXPECT_EQ(HugePageReuseBytes(), 0u);

  FreeHugePages(front, kHugePage);
  char* bigger = static_cast<char*>(AllocateHugePages(2 * kHugePage));
  EXPECT_NE(bigger, front) << "bigger than anything kept: a new mapping";
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(bigger), 7u) << "with the kept pages moved to its front";
  EXPECT_EQ(HugePageReuseBytes(), 0u);
  Touched(bigger, 2 * kHugePage);
  {
    HugePageReuse another;  // a second capture written at the same time
    FreeHugePages(back, kHugePage);
    FreeHugePages(bigger, 2 * kHugePage);
  }
  EXPECT_EQ(HugePageReuseBytes(), 3 * kHugePage) << "kept while the first capture goes on";
  capture.reset();
  EXPECT_EQ(HugePageReuseBytes(), 0u);
}

// A capture's processes one after another: the first one's raw events are one block, which its
// lanes are cut from; once all are freed the next process takes the block whole again.
TEST(HugePageAllocatorTest, FreedNeighboursAreJoinedForTheNextBigBlock) {
  HugePageReuse capture;
  char* events = static_cast<char*>(AllocateHugePages(4 * kHugePage));
  ASSERT_NE(events, nullptr);
  Touched(events, 4 * kHugePage);
  FreeHugePages(events, 4 * kHugePage);
  char* lane_a = static_cast<char*>(AllocateHugePages(kHugePage));
  char* lane_b = static_cast<char*>(AllocateHugePages(2 * kHugePage));
  char* lane_c = static_cast<char*>(AllocateHugePages(kHugePage));
  EXPECT_EQ(lane_a, events);
  EXPECT_EQ(lane_b, events + kHugePage);
  EXPECT_EQ(lane_c, events + 3 * kHugePage);
  // Freed out of order: the middle one last.
  FreeHugePages(lane_c, kHugePage);
  FreeHugePages(lane_a, kHugePage);
  FreeHugePages(lane_b, 2 * kHugePage);
  EXPECT_EQ(HugePageReuseBytes(), 4 * kHugePage);
  char* next_events = static_cast<char*>(AllocateHugePages(4 * kHugePage));
  EXPECT_EQ(next_events, events) << "the three pieces were not joined again";
  EXPECT_EQ(HugePageReuseBytes(), 0u);
  FreeHugePages(next_events, 4 * kHugePage);
}

// A process's events are reserved big and filled a little: the huge pages never touched are
// given back when the block is freed, and only those with pages are kept -- a block cut from
// the untouched rest would cost fresh pages as a new mapping does.
TEST(HugePageAllocatorTest, OnlyTouchedHugePagesAreKept) {
  HugePageReuse capture;
  char* events = static_cast<char*>(AllocateHugePages(4 * kHugePage));
  ASSERT_NE(events, nullptr);
  Touched(events, kHugePage)[0] = 42;
  Touched(events + 2 * kHugePage, 1)[0] = 43;  // one 4 KiB page of the third huge page
  FreeHugePages(events, 4 * kHugePage);
  EXPECT_EQ(HugePageReuseBytes(), 2 * kHugePage) << "the first and the third huge page";
  char* first = static_cast<char*>(AllocateHugePages(kHugePage));
  char* third = static_cast<char*>(AllocateHugePages(kHugePage));
  EXPECT_EQ(first[0] + third[0], 42 + 43) << "the pages written, in either order";
  EXPECT_EQ(HugePageReuseBytes(), 0u);
  FreeHugePages(first, kHugePage);
  FreeHugePages(third, kHugePage);
}

// Whether each huge page of the block has pages in memory (mincore), without touching it.
std::vector<bool> ResidentHugePages(const char* block, size_t bytes) {
  std::vector<unsigned char> pages(bytes / 4096);
  std::vector<bool> huge(bytes / kHugePage);
  if (mincore(const_cast<char*>(block), bytes, pages.data()) != 0) return huge;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] & 1) huge[i * 4096 / kHugePage] = true;
  }
  return huge;
}

// A standing daemon's captures one after another: what the first one freed stays after it
// (kKeepAfter), through other scopes ending meanwhile (the metrics' folds), and the next
// capture takes the same pages; ReleaseKeptPages, never while a capture is written, gives
// them back.
TEST(HugePageAllocatorTest, AKeepAfterScopeLeavesItsPagesForTheNextCaptureUntilReleased) {
  char* first_events = nullptr;
  {
    HugePageReuse capture(HugePageReuse::kKeepAfter);
    first_events = Touched(AllocateHugePages(2 * kHugePage), 2 * kHugePage);
    first_events[0] = 'e';
    FreeHugePages(first_events, 2 * kHugePage);
  }
  EXPECT_EQ(HugePageReuseBytes(), 2 * kHugePage) << "kept after the capture";
  EXPECT_EQ(ResidentHugePages(first_events, 2 * kHugePage), (std::vector<bool>{true, true}));
  { HugePageReuse fold; }
  EXPECT_EQ(HugePageReuseBytes(), 2 * kHugePage) << "a fold's end gave them back";
  {
    HugePageReuse next_capture(HugePageReuse::kKeepAfter);
    char* events = static_cast<char*>(AllocateHugePages(2 * kHugePage));
    EXPECT_EQ(events, first_events);
    EXPECT_EQ(events[0], 'e') << "the same pages, not new ones";
    FreeHugePages(events, 2 * kHugePage);
    EXPECT_FALSE(ReleaseKeptPages()) << "given back while a capture is written";
    EXPECT_EQ(HugePageReuseBytes(), 2 * kHugePage);
  }
  EXPECT_EQ(HugePageReuseBytes(), 2 * kHugePage);
  EXPECT_TRUE(ReleaseKeptPages());
  EXPECT_EQ(HugePageReuseBytes(), 0u);
  EXPECT_EQ(ResidentHugePages(first_events, 2 * kHugePage), (std::vector<bool>{false, false}))
      << "still mapped";
  EXPECT_TRUE(ReleaseKeptPages()) << "nothing kept";
  { HugePageReuse fold; }
  EXPECT_EQ(HugePageReuseBytes(), 0u);
}

// The next process's events need one block bigger than any kept, while the pieces the process
// before freed are not next to each other: their pages are moved into the new block's front,
// already in memory, and nothing is copied or faulted in anew.
TEST(HugePageAllocatorTest, PiecesKeptApartAreMovedIntoTheFrontOfABiggerBlock) {
  HugePageReuse capture;
  char* a = Touched(AllocateHugePages(kHugePage), kHugePage);
  char* held = Touched(AllocateHugePages(kHugePage), kHugePage);
  char* c = Touched(AllocateHugePages(kHugePage), kHugePage);
  a[0] = 'a';
  c[0] = 'c';
  FreeHugePages(a, kHugePage);
  FreeHugePages(c, kHugePage);
  ASSERT_EQ(HugePageReuseBytes(), 2 * kHugePage);
  char* events = static_cast<char*>(AllocateHugePages(3 * kHugePage));
  ASSERT_NE(events, nullptr);
  EXPECT_EQ(HugePageReuseBytes(), 0u) << "both pieces taken";
  EXPECT_EQ(ResidentHugePages(events, 3 * kHugePage), (std::vector<bool>{true, true, false}))
      << "the two pieces' pages at the front, untouched since; the rest a new mapping's";
  EXPECT_EQ(events[0] + events[kHugePage], 'a' + 'c') << "the pages written, in either order";
  Touched(events, 3 * kHugePage);
  FreeHugePages(events, 3 * kHugePage);
  FreeHugePages(held, kHugePage);
  EXPECT_EQ(HugePageReuseBytes(), 4 * kHugePage);
}

}  // namespace
}  // namespace nrtprof::daemon
