#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shim/backend/batcher.h"
#include "shim/backend/event_builder.h"

namespace nrtprof::shim {
namespace {

// A record with room after it for a stack and a name, as a ring slot holds it.
struct Slotted {
  alignas(Record) unsigned char storage[kMaxRecordSlots * kRecordSlotBytes] = {};
  Record& r() { return *reinterpret_cast<Record*>(storage); }
};

Slotted NewRecord(RecordKind kind) {
  Slotted s;
  s.r().Clear(kind, kMaxRecordSlots);
  return s;
}

Slotted ApiRecord(ApiFunction api, uint64_t correlation, uint64_t tensor = 0,
                  const char* name = nullptr, int32_t status = 0) {
  Slotted s = NewRecord(RecordKind::kApiCall);
  Record& r = s.r();
  r.api = api;
  r.correlation_id = correlation;
  r.start_ticks = 1000 * correlation;
  r.end_ticks = r.start_ticks + 10;
  r.handle = tensor;
  r.status = status;
  r.SetName(name, kRecordNameBytes);
  return s;
}

class BatchingTest : public ::testing::Test {
 protected:
  BatchingTest()
      : stacks_(&strings_, [](uintptr_t pc) { return "fn" + std::to_string(pc) + " (m+0x1)"; }),
        builder_(&strings_, &stacks_) {}

  nrtprof::Event Build(Slotted s) {
    nrtprof::Event e;
    builder_.Build(s.r(), /*tid=*/77, clock_, &e);
    return e;
  }

  // Ticks are nanoseconds here; tick_clock_test covers the TSC's conversion.
  const TickConverter clock_{TickSource::kMonotonic};
  StringTable strings_;
  StackTable stacks_;
  EventBuilder builder_;
};

TEST_F(BatchingTest, AnApiCallRecordBecomesARuntimeLaneEvent) {
  Slotted s = ApiRecord(kNrtExecute, 5);
  s.r().handle = 0xabc;
  s.r().aux = 1;
  s.r().status = 1003;
  const nrtprof::Event e = Build(s);
  EXPECT_EQ(e.kind(), nrtprof::EVENT_API_CALL);
  EXPECT_EQ(strings_.Get(e.name_iid()), "nrt_execute");
  EXPECT_EQ(e.start_ns(), 5000u);
  EXPECT_EQ(e.duration_ns(), 10u);
  EXPECT_EQ(e.tid(), 77u);
  EXPECT_EQ(e.correlation_id(), 5u);
  EXPECT_EQ(e.status(), 1003);
  EXPECT_EQ(e.model_handle(), 0xabcu);
  EXPECT_EQ(e.repeat(), 1u);
  EXPECT_EQ(e.nc_idx(), -1);
  EXPECT_EQ(e.stack_iid(), 0u);
}

// A recorded poll carries the polls of its function before it; a thread's polls after its last
// recorded one come in a record that is no call (kRecordPollsOnly), flagged on the wire.
TEST_F(BatchingTest, APollsOnlyRecordIsFlaggedAsNoCall) {
  Slotted poll = ApiRecord(kNrtaIsCompleted, 1);
  poll.r().bytes = 41;
  poll.r().aux = 7;
  const nrtprof::Event recorded = Build(poll);
  EXPECT_EQ(recorded.polls(), 41u);
  EXPECT_EQ(recorded.bytes(), 0u);
  EXPECT_FALSE(recorded.polls_only());
  Slotted tally = ApiRecord(kNrtaGetSequence, 2);
  tally.r().bytes = 1000;
  tally.r().flags = kRecordPollsOnly;
  const nrtprof::Event counted = Build(tally);
  EXPECT_EQ(counted.function(), nrtprof::API_NRTA_GET_SEQUENCE);
  EXPECT_EQ(counted.polls(), 1000u);
  EXPECT_TRUE(counted.polls_only());
}

TEST_F(BatchingTest, TensorCallsCarryTheNameTheirTensorWasAllocatedWith) {
  EXPECT_EQ(strings_.Get(Build(ApiRecord(kNrtTensorAllocate, 1, 0x10, "weights")).tensor_name_iid()),
            "weights");
  EXPECT_EQ(strings_.Get(Build(ApiRecord(kNrtTensorWrite, 2, 0x10)).tensor_name_iid()), "weights");
  EXPECT_EQ(strings_.Get(Build(ApiRecord(kNrtAddTensorToTensorSet, 3, 0x10, "in0")).tensor_name_iid()),
            "weights");
  EXPECT_EQ(strings_.Get(Build(ApiRecord(kNrtAddTensorToTensorSet, 4, 0x99, "in1")).tensor_name_iid()),
            "in1") << "an unknown tensor: the name in the set";
  EXPECT_EQ(strings_.Get(Build(ApiRecord(kNrtTensorFree, 5, 0x10)).tensor_name_iid()), "weights");
  EXPECT_EQ(Build(ApiRecord(kNrtTensorRead, 6, 0x10)).tensor_name_iid(), 0u) << "freed";
  // A failed allocation names nothing afterwards.
  Build(ApiRecord(kNrtTensorAllocate, 7, 0x20, "bad", /*status=*/4));
  EXPECT_EQ(Build(ApiRecord(kNrtTensorRead, 8, 0x20)).tensor_name_iid(), 0u);
}

TEST_F(BatchingTest, ARangeRecordKeepsItsNameAndDepth) {
  Slotted s = NewRecord(RecordKind::kRange);
  s.r().SetName("aten::mul", kRecordNameBytes);
  s.r().depth = 2;
  s.r().start_ticks = 100;
  s.r().end_ticks = 250;
  const nrtprof::Event e = Build(s);
  EXPECT_EQ(e.kind(), nrtprof::EVENT_RANGE);
  EXPECT_EQ(strings_.Get(e.name_iid()), "aten::mul");
  EXPECT_EQ(e.depth(), 2u);
  EXPECT_EQ(e.duration_ns(), 150u);
}

TEST_F(BatchingTest, ATruncatedNameLosesAnIncompleteCharacter) {
  std::string name(kRecordNameBytes - 1, 'a');
  name += "\xE2\x82\xAC";  // the euro sign straddles the bound
  Slotted s = NewRecord(RecordKind::kRange);
  s.r().SetName(name.c_str(), kRecordNameBytes);
  EXPECT_EQ(strings_.Get(Build(s).name_iid()), std::string(kRecordNameBytes - 1, 'a'));
}

TEST_F(BatchingTest, StacksAreInternedAndSymbolized) {
  Slotted s = ApiRecord(kNrtExecute, 1);
  s.r().stack_depth = 2;
  s.r().frames()[0] = 11;
  s.r().frames()[1] = 22;
  const nrtprof::Event e = Build(s);
  ASSERT_EQ(e.stack_iid(), 1u);
  ASSERT_EQ(stacks_.FrameIids(1).size(), 2u);
  EXPECT_EQ(strings_.Get(stacks_.FrameIids(1)[1]), "fn22 (m+0x1)");
}

class BatcherTest : public BatchingTest {
 protected:
  Batcher::Options SmallBatches() {
    Batcher::Options o;
    o.batch_events = 3;
    o.batch_age_ns = 1000;
    o.max_pending_events = 7;
    o.max_pending_model_bytes = 10;
    return o;
  }
  void Add(Batcher* b, Slotted s, uint64_t now = 0) {
    nrtprof::Event event;
    builder_.Build(s.r(), 77, clock_, &event);
    b->AddEvent(event, now);
  }
  static void AddKind(Batcher* b, nrtprof::EventKind kind) {
    nrtprof::Event event;
    event.set_kind(kind);
    b->AddEvent(event, 0);
  }
  // The batch's events as a daemon reads them (`events`, then events_encoded).
  static nrtprof::EventBatch Decoded(nrtprof::EventBatch batch) {
    EXPECT_TRUE(DecodeEncodedEvents(&batch));
    return batch;
  }
};

TEST_F(BatcherTest, ABatchIsSealedAtItsByteBoundWhateverItsCount) {
  // A lossless spool of 64 KiB must still hold whole batches: their bytes are bounded too.
  Batcher::Options o;
  o.batch_events = 1'000'000;
  o.batch_bytes = 200;
  Batcher b(o, &strings_, &stacks_);
  size_t added = 0;
  while (b.ready_batches() == 0 && added < 1000) {
    Add(&b, ApiRecord(kNrtExecute, added + 1));
    ++added;
  }
  ASSERT_EQ(b.ready_batches(), 1u) << added << " events never filled 200 bytes";
  EXPECT_GT(added, 1u);
  StreamInterning stream;
  LaneCounts n;
  const nrtprof::EventBatch first = b.TakeNext(&stream, nrtprof::DropCounters(), false, &n);
  EXPECT_GE(first.events_encoded().size(), 200u);
  EXPECT_EQ(n.total(), added);
  EXPECT_EQ(Decoded(first).events_size(), static_cast<int>(added));
}

TEST_F(BatcherTest, BatchesSealWhenFullOrOld) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  for (int i = 1; i <= 4; ++i) Add(&b, ApiRecord(kNrtExecute, i), /*now=*/0);
  EXPECT_EQ(b.ready_batches(), 1u) << "3 events make a batch";
  b.SealIfDue(999);
  EXPECT_EQ(b.ready_batches(), 1u);
  b.SealIfDue(1000);
  EXPECT_EQ(b.ready_batches(), 2u) << "the fourth event waited 1000 ns";
  b.SealIfDue(5000);
  EXPECT_EQ(b.ready_batches(), 2u) << "nothing open";
}

// The runtime writes clock syncs at every fetch: alone, they are not a batch of their own at
// every tick, yet reach the daemon with the first event after them, and within the recorder's
// age without one.
TEST_F(BatcherTest, ClockSyncsAloneWaitAsLongAsTheRecordersBatches) {
  Batcher::Options o = SmallBatches();
  o.recorder_batch_age_ns = 4000;
  Batcher b(o, &strings_, &stacks_);
  nrtprof::DeviceClockSync sync;
  sync.set_device_ns(1);
  b.AddClockSync(sync, /*now_ns=*/0);
  b.AddClockSync(sync, /*now_ns=*/1000);
  b.SealIfDue(3999);
  EXPECT_EQ(b.ready_batches(), 0u) << "clock syncs alone, 3999 ns old";
  b.SealIfDue(4000);
  ASSERT_EQ(b.ready_batches(), 1u) << "clock syncs alone, 4000 ns old";
  b.AddClockSync(sync, /*now_ns=*/5000);
  Add(&b, ApiRecord(kNrtExecute, 1), /*now=*/5500);
  b.SealIfDue(5999);
  EXPECT_EQ(b.ready_batches(), 1u);
  b.SealIfDue(6000);
  EXPECT_EQ(b.ready_batches(), 2u) << "with an event, the capture's age from the first sync";
  StreamInterning stream;
  LaneCounts n;
  EXPECT_EQ(b.TakeNext(&stream, {}, false, &n).clock_syncs_size(), 2);
  EXPECT_EQ(b.TakeNext(&stream, {}, false, &n).clock_syncs_size(), 1);
  EXPECT_EQ(n.total(), 1u);
}

TEST_F(BatcherTest, WhileOnlyTheRecorderRecordsBatchesAreLargerAndOlder) {
  Batcher::Options o = SmallBatches();
  o.recorder_batch_events = 5;
  o.recorder_batch_age_ns = 4000;
  Batcher b(o, &strings_, &stacks_);
  b.SetRecorderOnly(true);
  for (int i = 1; i <= 4; ++i) Add(&b, ApiRecord(kNrtExecute, i), /*now=*/0);
  b.SealIfDue(3999);
  EXPECT_EQ(b.ready_batches(), 0u) << "4 events, 3999 ns: under both recorder bounds";
  Add(&b, ApiRecord(kNrtExecute, 5), 3999);
  EXPECT_EQ(b.ready_batches(), 1u) << "5 events make a recorder batch";
  Add(&b, ApiRecord(kNrtExecute, 6), 5000);
  b.SealIfDue(8999);
  EXPECT_EQ(b.ready_batches(), 1u);
  b.SealIfDue(9000);
  EXPECT_EQ(b.ready_batches(), 2u) << "the sixth event waited 4000 ns";
  // A capture starts: its bounds again, for the batch already open too.
  Add(&b, ApiRecord(kNrtExecute, 7), 10000);
  b.SetRecorderOnly(false);
  b.SealIfDue(11000);
  EXPECT_EQ(b.ready_batches(), 3u);
  for (int i = 8; i <= 10; ++i) Add(&b, ApiRecord(kNrtExecute, i), 12000);
  EXPECT_EQ(b.ready_batches(), 4u) << "3 events make a capture's batch";
}

TEST_F(BatcherTest, EachStreamGetsEveryStringOnceWithTheFirstBatchThatUsesIt) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  for (int i = 1; i <= 6; ++i) Add(&b, ApiRecord(i % 2 ? kNrtExecute : kNrtTensorRead, i));
  nrtprof::DropCounters drops;
  drops.set_ring_full(3);
  StreamInterning first;
  LaneCounts n;
  const nrtprof::EventBatch b1 = b.TakeNext(&first, drops, false, &n);
  EXPECT_EQ(n.runtime, 3u);
  EXPECT_EQ(n.total(), 3u);
  EXPECT_EQ(b1.sequence(), 1u);
  EXPECT_EQ(b1.strings_size(), 2u);
  EXPECT_EQ(b1.drops().ring_full(), 3u);
  EXPECT_GT(b1.clock().monotonic_ns(), 0u);
  EXPECT_FALSE(b1.final());
  const nrtprof::EventBatch b2 = b.TakeNext(&first, drops, false, &n);
  EXPECT_EQ(b2.sequence(), 2u);
  EXPECT_EQ(b2.strings_size(), 0) << "already sent on this stream";

  // A new stream starts over with strings, not with sequences (they are the process's): its
  // first batch carries what it uses.
  for (int i = 7; i <= 9; ++i) Add(&b, ApiRecord(kNrtExecute, i));
  StreamInterning second;
  const nrtprof::EventBatch b3 = b.TakeNext(&second, drops, false, &n);
  EXPECT_EQ(b3.sequence(), 3u);
  ASSERT_EQ(b3.strings_size(), 1);
  EXPECT_EQ(b3.strings(0).value(), "nrt_execute");

  // b2, never acknowledged on the first stream, resent on the second: same sequence, and the
  // string it needs that the second stream has not had yet.
  nrtprof::EventBatch resent = b2;
  b.Restamp(&resent, &second);
  EXPECT_EQ(resent.sequence(), 2u);
  ASSERT_EQ(resent.strings_size(), 1);
  EXPECT_EQ(resent.strings(0).value(), "nrt_tensor_read");
  EXPECT_EQ(Decoded(resent).events_size(), 3);
}

TEST_F(BatcherTest, StackFramesTravelWithTheirStack) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  Slotted s = ApiRecord(kNrtExecute, 1);
  s.r().stack_depth = 1;
  s.r().frames()[0] = 5;
  Add(&b, s);
  Add(&b, s);
  b.SealAll();
  StreamInterning stream;
  LaneCounts n;
  const nrtprof::EventBatch batch = b.TakeNext(&stream, {}, false, &n);
  ASSERT_EQ(batch.stacks_size(), 1);
  ASSERT_EQ(batch.stacks(0).frame_iids_size(), 1);
  std::set<std::string> sent;
  for (const auto& s : batch.strings()) sent.insert(s.value());
  EXPECT_EQ(sent, (std::set<std::string>{"nrt_execute", "fn5 (m+0x1)"}));
}

TEST_F(BatcherTest, ABatchNamesWhatItsEventsNameInTheOrderTheyNameIt) {
  // What TakeNext gathers as events are added must be what reading the batch's events back
  // gives (Restamp does that): every string and stack, in order of first use.
  Batcher::Options o;
  o.batch_events = 100;
  Batcher b(o, &strings_, &stacks_);
  Add(&b, ApiRecord(kNrtTensorAllocate, 1, 0x10, "weights"));
  Slotted deep = ApiRecord(kNrtExecute, 2);
  deep.r().stack_depth = 2;
  deep.r().frames()[0] = 7;
  deep.r().frames()[1] = 8;
  Add(&b, deep);
  Add(&b, ApiRecord(kNrtTensorRead, 3, 0x10));
  nrtprof::Event device;
  device.set_kind(nrtprof::EVENT_DEVICE_EXEC);
  device.set_name_iid(strings_.Intern("nc_exec_running"));
  device.set_model_name_iid(strings_.Intern("tiny"));
  b.AddEvent(device, 0);
  Add(&b, deep);
  Add(&b, NewRecord(RecordKind::kRange));
  b.SealAll();
  StreamInterning gathered, read_back;
  LaneCounts n;
  nrtprof::EventBatch batch = b.TakeNext(&gathered, {}, false, &n);
  std::vector<std::string> names;
  for (const auto& s : batch.strings()) names.push_back(s.value());
  EXPECT_EQ(names, (std::vector<std::string>{"nrt_tensor_allocate", "weights", "nrt_execute",
                                             "fn7 (m+0x1)", "fn8 (m+0x1)", "nrt_tensor_read",
                                             "nc_exec_running", "tiny"}));
  nrtprof::EventBatch again = batch;
  b.Restamp(&again, &read_back);
  EXPECT_EQ(again.SerializeAsString(), batch.SerializeAsString());
}

TEST_F(BatcherTest, TheFinalBatchIsTheLastOneOrAnEmptyOne) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  for (int i = 1; i <= 4; ++i) Add(&b, ApiRecord(kNrtExecute, i));
  b.SealAll();
  StreamInterning stream;
  LaneCounts n;
  EXPECT_FALSE(b.TakeNext(&stream, {}, true, &n).final());
  EXPECT_TRUE(b.TakeNext(&stream, {}, true, &n).final());
  const nrtprof::EventBatch empty = b.TakeNext(&stream, {}, true, &n);
  EXPECT_TRUE(empty.final());
  EXPECT_EQ(Decoded(empty).events_size(), 0);
  EXPECT_EQ(n.total(), 0u);
  EXPECT_EQ(empty.sequence(), 3u);
}

TEST_F(BatcherTest, PastTheBoundTheOldestEventsAreDiscardedAndCounted) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  for (int i = 1; i <= 10; ++i) Add(&b, ApiRecord(kNrtExecute, i));
  EXPECT_EQ(b.pending_events(), 10u);
  EXPECT_EQ(b.EnforceBounds().runtime, 3u) << "one batch of 3: 7 remain";
  EXPECT_EQ(b.pending_events(), 7u);
  StreamInterning stream;
  LaneCounts n;
  EXPECT_EQ(Decoded(b.TakeNext(&stream, {}, false, &n)).events(0).correlation_id(), 4u);
  EXPECT_EQ(b.DiscardAll().runtime, 4u);
  EXPECT_EQ(b.pending_events(), 0u);
}

// What is discarded is counted by lane, so a reader can check the runtime lane's calls
// exactly even when device events are lost beside them.
TEST_F(BatcherTest, DiscardedEventsAreCountedByLane) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  Add(&b, ApiRecord(kNrtExecute, 1));
  Add(&b, NewRecord(RecordKind::kRange));
  AddKind(&b, nrtprof::EVENT_DEVICE_EXEC);  // seals the first batch of 3
  for (int i = 2; i <= 8; ++i) Add(&b, ApiRecord(kNrtExecute, i));
  AddKind(&b, nrtprof::EVENT_DEVICE_DMA);
  ASSERT_EQ(b.pending_events(), 11u);
  // Two sealed batches go (6 events), leaving 5 of the 7 allowed.
  const LaneCounts first = b.EnforceBounds();
  EXPECT_EQ(first.framework, 1u);
  EXPECT_EQ(first.runtime, 4u);
  EXPECT_EQ(first.hardware, 1u);
  const LaneCounts rest = b.DiscardAll();
  EXPECT_EQ(rest.framework, 0u);
  EXPECT_EQ(rest.runtime, 4u);
  EXPECT_EQ(rest.hardware, 1u);
  EXPECT_EQ(rest.total(), 5u);
}

TEST_F(BatcherTest, ModelsTravelAloneAndLoseTheirBytesPastTheBound) {
  Batcher b(SmallBatches(), &strings_, &stacks_);
  for (uint64_t h : {1, 2}) {
    nrtprof::LoadedModel m;
    m.set_model_handle(h);
    m.set_model_file("12345678");
    m.set_size(8);
    b.AddModel(m);
  }
  EXPECT_EQ(b.EnforceBounds().total(), 0u);
  StreamInterning stream;
  LaneCounts n;
  const nrtprof::EventBatch first = b.TakeNext(&stream, {}, false, &n);
  ASSERT_EQ(first.models_size(), 1);
  EXPECT_EQ(first.models(0).model_file(), "") << "16 bytes pending, 10 allowed: the oldest";
  EXPECT_EQ(first.models(0).size(), 8u);
  EXPECT_EQ(b.TakeNext(&stream, {}, false, &n).models(0).model_file(), "12345678");
}

}  // namespace
}  // namespace nrtprof::shim
