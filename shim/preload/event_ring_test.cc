#include "shim/preload/event_ring.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
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

RingPtr MakeRing(uint32_t capacity) {
  const size_t bytes =
      (EventRing::BytesFor(capacity) + EventRing::kAlign - 1) & ~(EventRing::kAlign - 1);
  return RingPtr(EventRing::Create(aligned_alloc(EventRing::kAlign, bytes), capacity));
}

// A record of `slots` slots carrying `id`.
bool Push(RingProducer* producer, uint64_t id, uint32_t slots = 1,
          RecordKind kind = RecordKind::kApiCall) {
  Record* r = producer->TryReserve(slots);
  if (r == nullptr) {
    producer->CountDrop(kind);
    return false;
  }
  r->Clear(kind, slots);
  r->correlation_id = id;
  producer->Commit(r);
  return true;
}

std::vector<uint64_t> DrainIds(EventRing* ring) {
  std::vector<uint64_t> ids;
  ring->Drain([&](const Record& r) { ids.push_back(r.correlation_id); });
  return ids;
}

TEST(EventRingTest, RecordsComeOutInOrderAcrossTheWrap) {
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  uint64_t next = 1;
  std::vector<uint64_t> seen;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(Push(&producer, next++));
    for (uint64_t id : DrainIds(ring.get())) seen.push_back(id);
  }
  ASSERT_EQ(seen.size(), 250u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i + 1);
  EXPECT_EQ(ring->dropped(), 0u);
}

TEST(EventRingTest, CommitAsksForTheConsumerWhenTheRingIsThreeQuartersFull) {
  // A thread recording faster than the flusher's tick wakes it before its ring fills: the
  // producer looks at the consumer's tail every 8 records of a 64-slot ring and asks for the
  // consumer while 48 slots or more wait, in slots (a 2-slot record counts twice).
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  std::vector<int> wakes;
  auto commit = [&](int i, uint32_t slots) {
    Record* r = producer.TryReserve(slots);
    ASSERT_NE(r, nullptr) << i;
    r->Clear(RecordKind::kApiCall, slots);
    if (producer.Commit(r)) wakes.push_back(i);
  };
  for (int i = 1; i <= 56; ++i) commit(i, 1);
  EXPECT_EQ(wakes, (std::vector<int>{48, 56}));
  EXPECT_EQ(DrainIds(ring.get()).size(), 56u);
  // Drained: the next looks (at records 64 and 72) find 8 and 16 slots waiting.
  wakes.clear();
  for (int i = 57; i <= 72; ++i) commit(i, 1);
  EXPECT_TRUE(wakes.empty());
  // Two-slot records fill it twice as fast: 32 slots at record 80, 48 at record 88.
  for (int i = 73; i <= 88; ++i) commit(i, 2);
  EXPECT_EQ(wakes, (std::vector<int>{88}));
}

TEST(EventRingTest, ARingDrainedInTimeNeverAsksForTheConsumer) {
  // The consumer's own period keeps up (it drains every 20 records of a 64-slot ring): no
  // wake at all, however many records pass, so a hot thread is not joined by a consumer
  // working beside it for nothing.
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  int wakes = 0;
  for (int i = 1; i <= 1000; ++i) {
    Record* r = producer.TryReserve(1);
    ASSERT_NE(r, nullptr) << i;
    r->Clear(RecordKind::kApiCall, 1);
    if (producer.Commit(r)) ++wakes;
    if (i % 20 == 0) DrainIds(ring.get());
  }
  EXPECT_EQ(wakes, 0);
}

TEST(EventRingTest, AFullRingRefusesAndCountsTheDrop) {
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  for (uint64_t i = 1; i <= 64; ++i) ASSERT_TRUE(Push(&producer, i));
  EXPECT_FALSE(Push(&producer, 65));
  EXPECT_FALSE(Push(&producer, 66));
  EXPECT_FALSE(Push(&producer, 67, 2, RecordKind::kRange));
  // Counted by kind, so the trace can say which lane lost them.
  EXPECT_EQ(ring->dropped(RecordKind::kApiCall), 2u);
  EXPECT_EQ(ring->dropped(RecordKind::kRange), 1u);
  EXPECT_EQ(ring->dropped(), 3u);
  std::vector<uint64_t> expected;
  for (uint64_t i = 1; i <= 64; ++i) expected.push_back(i);
  EXPECT_EQ(DrainIds(ring.get()), expected);
  // Room again once drained.
  EXPECT_TRUE(Push(&producer, 67));
  EXPECT_EQ(DrainIds(ring.get()), (std::vector<uint64_t>{67}));
}

// The flusher's copy between ticks (flusher.h, StageFillingRings): the slots come out as they
// are, across the ring's end and its pad, and walked give what a drain would have, in order;
// the ring has room again. A copy with too little room takes nothing.
TEST(EventRingTest, RecordsCopiedOutAcrossTheEndComeBackInOrder) {
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  for (uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(Push(&producer, i, 3));  // 60 slots
  EXPECT_EQ(DrainIds(ring.get()).size(), 20u);
  // From slot 60: two records, then a 3-slot one that pads slots 62-63 and starts at 0.
  ASSERT_TRUE(Push(&producer, 21));
  ASSERT_TRUE(Push(&producer, 22));
  ASSERT_TRUE(Push(&producer, 23, 3));
  for (uint64_t i = 24; i <= 60; ++i) ASSERT_TRUE(Push(&producer, i));
  const size_t waiting = 2 + 2 + 3 + 37;
  ASSERT_EQ(ring->unread_slots(), waiting);

  std::vector<Record> out(64);
  EXPECT_EQ(ring->CopyOut(out.data(), waiting - 1), 0u);
  EXPECT_EQ(ring->unread_slots(), waiting) << "a copy that does not fit takes nothing";
  ASSERT_EQ(ring->CopyOut(out.data(), out.size()), waiting);
  EXPECT_EQ(ring->unread_slots(), 0u);
  std::vector<uint64_t> ids;
  EXPECT_EQ(ForEachRecord(out.data(), waiting,
                          [&](const Record& r) { ids.push_back(r.correlation_id); }),
            40u);
  std::vector<uint64_t> expected;
  for (uint64_t i = 21; i <= 60; ++i) expected.push_back(i);
  EXPECT_EQ(ids, expected);
  // The ring's room is back: 64 more slots go in.
  for (uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(Push(&producer, 100 + i));
  EXPECT_EQ(ring->dropped(), 0u);
  EXPECT_EQ(DrainIds(ring.get()).size(), 64u);
}

// Records of several slots never straddle the end: a pad fills the rest, the consumer skips
// it, and a ring with room only for the pad refuses the record.
TEST(EventRingTest, RecordsOfSeveralSlotsWrapWithAPad) {
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  for (uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(Push(&producer, i, 3));  // 60 slots
  EXPECT_EQ(DrainIds(ring.get()).size(), 20u);
  // 4 slots are left before the end: a 5-slot record pads them and starts at slot 0.
  ASSERT_TRUE(Push(&producer, 21, 5));
  EXPECT_EQ(ring->written_slots(), 60u + 4u + 5u);
  ASSERT_TRUE(Push(&producer, 22, 1));
  EXPECT_EQ(DrainIds(ring.get()), (std::vector<uint64_t>{21, 22}));
  // 11 slots free, but only 5 of them before the end: an 11-slot record would need the pad
  // as well, so it is refused.
  for (uint64_t i = 0; i < 53; ++i) ASSERT_TRUE(Push(&producer, 100 + i));
  EXPECT_FALSE(Push(&producer, 999, 11));
  EXPECT_EQ(ring->dropped(), 1u);
  EXPECT_EQ(DrainIds(ring.get()).size(), 53u);
}

// The producer keeps its side outside the ring, but what it writes shows in the ring's own
// counters (the consumer's and a rings-file reader's view), and a producer made for a ring
// that has records takes up where they end.
TEST(EventRingTest, TheRingsCountersFollowItsProducer) {
  RingPtr ring = MakeRing(64);
  {
    RingProducer producer(ring.get());
    for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(Push(&producer, i));
    ASSERT_TRUE(Push(&producer, 11, 2, RecordKind::kRange));
  }
  EXPECT_EQ(ring->written_slots(), 12u);
  EXPECT_EQ(ring->committed(RecordKind::kApiCall), 10u);
  EXPECT_EQ(ring->committed(RecordKind::kRange), 1u);
  EXPECT_EQ(DrainIds(ring.get()).size(), 11u);
  RingProducer again(ring.get());
  for (uint64_t i = 12; i <= 70; ++i) ASSERT_TRUE(Push(&again, i));  // across the wrap
  EXPECT_EQ(ring->committed(RecordKind::kApiCall), 69u);
  EXPECT_EQ(ring->committed(RecordKind::kRange), 1u);
  const std::vector<uint64_t> ids = DrainIds(ring.get());
  ASSERT_EQ(ids.size(), 59u);
  EXPECT_EQ(ids.front(), 12u);
  EXPECT_EQ(ids.back(), 70u);
}

TEST(EventRingTest, StackFramesAndNamesTravelWithTheirRecord) {
  RingPtr ring = MakeRing(64);
  RingProducer producer(ring.get());
  for (uintptr_t n = 1; n <= 30; ++n) {
    const uint32_t slots = RecordSlots(3, 9);
    Record* r = producer.TryReserve(slots);
    ASSERT_NE(r, nullptr);
    r->Clear(RecordKind::kApiCall, slots);
    r->stack_depth = 3;
    for (uintptr_t f = 0; f < 3; ++f) r->frames()[f] = n * 100 + f;
    r->SetName("aten::mul", 9);
    producer.Commit(r);
  }
  uintptr_t n = 1;
  ring->Drain([&](const Record& r) {
    ASSERT_EQ(r.stack_depth, 3u);
    for (uintptr_t f = 0; f < 3; ++f) EXPECT_EQ(r.frames()[f], n * 100 + f);
    EXPECT_EQ(std::string(r.name(), r.name_len), "aten::mul");
    ++n;
  });
  EXPECT_EQ(n, 31u);
}

TEST(EventRingTest, NamesAreCopiedBoundedAndMarkedWhenCut) {
  alignas(Record) unsigned char storage[kMaxRecordSlots * kRecordSlotBytes];
  Record& r = *reinterpret_cast<Record*>(storage);
  r.Clear(RecordKind::kRange, kMaxRecordSlots);
  r.SetName("aten::mul", kRecordNameBytes);
  EXPECT_EQ(std::string(r.name(), r.name_len), "aten::mul");
  EXPECT_EQ(r.flags & kRecordNameTruncated, 0);
  const std::string longer(200, 'x');
  EXPECT_EQ(NameRoom(longer.c_str()), kRecordNameBytes);
  r.SetName(longer.c_str(), NameRoom(longer.c_str()));
  EXPECT_EQ(r.name_len, kRecordNameBytes);
  EXPECT_NE(r.flags & kRecordNameTruncated, 0);
  r.SetName(nullptr, kRecordNameBytes);
  EXPECT_EQ(r.name_len, 0);
  EXPECT_EQ(r.flags & kRecordNameTruncated, 0);
  EXPECT_EQ(NameRoom(nullptr), 0u);
  EXPECT_EQ(RecordSlots(0, 0), 1u);
  EXPECT_EQ(RecordSlots(0, 64), 2u);
  EXPECT_EQ(RecordSlots(0, 65), 3u);
  EXPECT_EQ(RecordSlots(16, 0), 3u);
}

// A thread's ring costs memory only as it is used: the flusher's FaultInSlots brings pages in
// ahead of the producer, from where it stopped.
TEST(EventRingTest, PagesAreFaultedInOnlyAsFarAsAsked) {
  const uint32_t capacity = 4096;  // 256 KiB of slots
  const size_t bytes = EventRing::BytesFor(capacity);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  EventRing* ring = EventRing::Create(memory, capacity);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto resident_pages = [&] {
    std::vector<unsigned char> v((bytes + page - 1) / page);
    EXPECT_EQ(mincore(memory, bytes, v.data()), 0);
    size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
  };
  const size_t before = resident_pages();  // the ring's header page
  FaultInSlots(ring, 256);
  const size_t after_16k = resident_pages();
  EXPECT_GE(after_16k - before, 16384 / page);
  EXPECT_LE(after_16k, before + 16384 / page + 1);
  EXPECT_EQ(ring->populated_slots(), 256u);
  FaultInSlots(ring, 100000);  // capped at the ring's end
  EXPECT_EQ(ring->populated_slots(), capacity);
  EXPECT_GE(resident_pages(), bytes / page);
  munmap(memory, bytes);
}

// A ring whose thread has ended is emptied for the next thread (the flusher keeps it as a
// spare): nothing of the old thread comes out again, its counters start from zero, and the
// pages it had faulted in stay.
TEST(EventRingTest, AResetRingStartsEmptyWithItsPages) {
  const uint32_t capacity = 1024;
  const size_t bytes = EventRing::BytesFor(capacity);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  EventRing* ring = EventRing::Create(memory, capacity);
  FaultInSlots(ring, capacity);
  RingProducer old_thread(ring);
  for (uint64_t id = 1; id <= 1100; ++id) Push(&old_thread, id);  // 76 past a full ring
  EXPECT_EQ(ring->dropped(RecordKind::kApiCall), 76u);
  EXPECT_EQ(DrainIds(ring).size(), 1024u);
  ring->Reset();
  EXPECT_EQ(ring->written_slots(), 0u);
  EXPECT_EQ(ring->dropped(), 0u);
  EXPECT_EQ(ring->committed(RecordKind::kApiCall), 0u);
  EXPECT_EQ(ring->populated_slots(), capacity);
  EXPECT_TRUE(DrainIds(ring).empty());
  RingProducer next_thread(ring);
  for (uint64_t id = 5000; id < 5000 + capacity; ++id) ASSERT_TRUE(Push(&next_thread, id));
  const std::vector<uint64_t> ids = DrainIds(ring);
  ASSERT_EQ(ids.size(), capacity);
  EXPECT_EQ(ids.front(), 5000u);
  EXPECT_EQ(ids.back(), 5000u + capacity - 1);
  EXPECT_EQ(ring->committed(RecordKind::kApiCall), capacity);
  munmap(memory, bytes);
}

// Several producer threads, each with its own ring, and one consumer draining all of them
// while they write: every record either arrives, in order, or is counted as dropped. Run
// under --config=tsan as well.
// Four producers flat out into small rings, one consumer: every record is received, in order,
// or counted as dropped. `copy_out`: the consumer takes every other pass with CopyOut (as the
// flusher does when a filling ring wakes it), the records of several slots, so that pads are
// copied too.
void ProducersAndOneConsumer(bool copy_out) {
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 200000;
  std::vector<RingPtr> rings;
  for (int t = 0; t < kThreads; ++t) rings.push_back(MakeRing(256));
  std::atomic<int> running{kThreads};
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      RingProducer producer(rings[t].get());
      for (uint64_t i = 1; i <= kPerThread; ++i) {
        Push(&producer, i, copy_out ? 1 + static_cast<uint32_t>(i % 3) : 1);
      }
      running.fetch_sub(1);
    });
  }
  std::vector<uint64_t> received(kThreads, 0), last(kThreads, 0);
  bool in_order = true;
  std::vector<Record> copied(256);
  uint64_t pass = 0;
  auto drain_all = [&] {
    ++pass;
    for (int t = 0; t < kThreads; ++t) {
      auto take = [&](const Record& r) {
        in_order = in_order && r.correlation_id > last[t];
        last[t] = r.correlation_id;
        ++received[t];
      };
      if (copy_out && pass % 2 == 0) {
        ForEachRecord(copied.data(), rings[t]->CopyOut(copied.data(), copied.size()), take);
      } else {
        rings[t]->Drain(take);
      }
    }
  };
  while (running.load() > 0) drain_all();
  for (auto& p : producers) p.join();
  drain_all();  // the copy has room for a whole ring: nothing is left
  EXPECT_TRUE(in_order);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(received[t] + rings[t]->dropped(), kPerThread) << "thread " << t;
    EXPECT_GT(received[t], 0u);
  }
}

TEST(EventRingTest, ProducersAndOneConsumerLoseNothingUncounted) { ProducersAndOneConsumer(false); }

TEST(EventRingTest, ProducersAndACopyingConsumerLoseNothingUncounted) {
  ProducersAndOneConsumer(true);
}

}  // namespace
}  // namespace nrtprof::shim
