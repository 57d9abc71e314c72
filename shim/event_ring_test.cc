#include "shim/event_ring.h"

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

struct FreeDeleter {
  void operator()(EventRing* ring) const { free(ring); }
};
using RingPtr = std::unique_ptr<EventRing, FreeDeleter>;

RingPtr MakeRing(uint32_t capacity, uint32_t stack_capacity = 0) {
  const size_t bytes = (EventRing::BytesFor(capacity, stack_capacity) + EventRing::kAlign - 1) &
                       ~(EventRing::kAlign - 1);
  return RingPtr(EventRing::Create(aligned_alloc(EventRing::kAlign, bytes), capacity,
                                   stack_capacity));
}

bool Push(EventRing* ring, uint64_t id) {
  Record* r = ring->TryReserve();
  if (r == nullptr) {
    ring->CountDrop();
    return false;
  }
  r->Clear(RecordKind::kApiCall);
  r->correlation_id = id;
  ring->Commit();
  return true;
}

std::vector<uint64_t> DrainIds(EventRing* ring) {
  std::vector<uint64_t> ids;
  ring->Drain([&](const Record& r) { ids.push_back(r.correlation_id); });
  return ids;
}

TEST(EventRingTest, RecordsComeOutInOrderAcrossTheWrap) {
  RingPtr ring = MakeRing(8);
  uint64_t next = 1;
  std::vector<uint64_t> seen;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(Push(ring.get(), next++));
    for (uint64_t id : DrainIds(ring.get())) seen.push_back(id);
  }
  ASSERT_EQ(seen.size(), 30u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i + 1);
  EXPECT_EQ(ring->dropped(), 0u);
}

TEST(EventRingTest, AFullRingRefusesAndCountsTheDrop) {
  RingPtr ring = MakeRing(4);
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_TRUE(Push(ring.get(), i));
  EXPECT_FALSE(Push(ring.get(), 5));
  EXPECT_FALSE(Push(ring.get(), 6));
  EXPECT_EQ(ring->dropped(), 2u);
  EXPECT_EQ(DrainIds(ring.get()), (std::vector<uint64_t>{1, 2, 3, 4}));
  // Room again once drained.
  EXPECT_TRUE(Push(ring.get(), 7));
  EXPECT_EQ(DrainIds(ring.get()), (std::vector<uint64_t>{7}));
}

TEST(EventRingTest, StackFramesTravelWithTheirRecord) {
  RingPtr ring = MakeRing(4, 3);
  for (uintptr_t n = 1; n <= 3; ++n) {
    Record* r = ring->TryReserve();
    ASSERT_NE(r, nullptr);
    r->Clear(RecordKind::kApiCall);
    r->stack_depth = 3;
    for (uintptr_t f = 0; f < 3; ++f) r->frames()[f] = n * 100 + f;
    ring->Commit();
  }
  uintptr_t n = 1;
  ring->Drain([&](const Record& r) {
    ASSERT_EQ(r.stack_depth, 3u);
    for (uintptr_t f = 0; f < 3; ++f) EXPECT_EQ(r.frames()[f], n * 100 + f);
    ++n;
  });
  EXPECT_EQ(n, 4u);
}

TEST(EventRingTest, NamesAreCopiedBoundedAndMarkedWhenCut) {
  Record r;
  r.Clear(RecordKind::kRange);
  r.SetName("aten::mul");
  EXPECT_EQ(std::string(r.name, r.name_len), "aten::mul");
  EXPECT_EQ(r.flags & kRecordNameTruncated, 0);
  const std::string longer(200, 'x');
  r.SetName(longer.c_str());
  EXPECT_EQ(r.name_len, kRecordNameBytes);
  EXPECT_NE(r.flags & kRecordNameTruncated, 0);
  r.SetName(nullptr);
  EXPECT_EQ(r.name_len, 0);
  EXPECT_EQ(r.flags & kRecordNameTruncated, 0);
}

// Several producer threads, each with its own ring, and one consumer draining all of them
// while they write: every record either arrives, in order, or is counted as dropped. Run
// under --config=tsan as well.
TEST(EventRingTest, ProducersAndOneConsumerLoseNothingUncounted) {
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 200000;
  std::vector<RingPtr> rings;
  for (int t = 0; t < kThreads; ++t) rings.push_back(MakeRing(256));
  std::atomic<int> running{kThreads};
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (uint64_t i = 1; i <= kPerThread; ++i) Push(rings[t].get(), i);
      running.fetch_sub(1);
    });
  }
  std::vector<uint64_t> received(kThreads, 0), last(kThreads, 0);
  bool in_order = true;
  auto drain_all = [&] {
    for (int t = 0; t < kThreads; ++t) {
      rings[t]->Drain([&](const Record& r) {
        in_order = in_order && r.correlation_id > last[t];
        last[t] = r.correlation_id;
        ++received[t];
      });
    }
  };
  while (running.load() > 0) drain_all();
  for (auto& p : producers) p.join();
  drain_all();
  EXPECT_TRUE(in_order);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(received[t] + rings[t]->dropped(), kPerThread) << "thread " << t;
    EXPECT_GT(received[t], 0u);
  }
}

}  // namespace
}  // namespace nrtprof::shim
