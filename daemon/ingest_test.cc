#include "daemon/ingest.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

nrtprof::Hello TestHello() {
  nrtprof::Hello hello;
  hello.set_pid(42);
  hello.set_executable("/bin/app");
  return hello;
}

void AddString(nrtprof::EventBatch* batch, uint32_t iid, const std::string& value) {
  nrtprof::InternedString* s = batch->add_strings();
  s->set_iid(iid);
  s->set_value(value);
}

nrtprof::Event* AddCall(nrtprof::EventBatch* batch, uint32_t name_iid, uint64_t start) {
  nrtprof::Event* e = batch->add_events();
  e->set_kind(nrtprof::EVENT_API_CALL);
  e->set_name_iid(name_iid);
  e->set_start_ns(start);
  e->set_duration_ns(10);
  e->set_tid(7);
  e->set_nc_idx(-1);
  return e;
}

TEST(IngestTest, StringsArriveOnceAndLaterBatchesUseThem) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b1;
  b1.set_sequence(1);
  AddString(&b1, 1, "nrt_execute");
  AddCall(&b1, 1, 100);
  ASSERT_EQ(in.OnBatch(b1).value(), 1u);
  nrtprof::EventBatch b2;
  b2.set_sequence(2);
  AddCall(&b2, 1, 200);  // no string: defined in batch 1
  ASSERT_EQ(in.OnBatch(b2).value(), 2u);

  ProcessCapture c = in.TakeCapture();
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_EQ(c.strings.at(c.events[1].name_iid), "nrt_execute");
  EXPECT_EQ(c.events_received, 2u);
}

TEST(IngestTest, UnknownStringIdRefusesTheWholeBatch) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_execute");
  AddCall(&b, 1, 100);
  AddCall(&b, 9, 200);  // 9 was never defined
  absl::StatusOr<uint64_t> ack = in.OnBatch(b);
  ASSERT_EQ(ack.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ack.status().message().find("unknown string id 9"), std::string::npos) << ack.status();
  // Nothing of it was kept, not even its good parts, and the sequence did not advance.
  EXPECT_EQ(in.last_sequence(), 0u);
  EXPECT_TRUE(in.TakeCapture().events.empty());
}

// The check remembers strings it found (by their ids' low bits): an id it has not found is
// still looked up, whatever was found before it.
TEST(IngestTest, AnUnknownStringIdIsRefusedAfterKnownOnesOfTheSameLowBits) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_execute");
  AddString(&b, 17, "nrt_load");
  AddCall(&b, 1, 100);
  AddCall(&b, 17, 150);  // 17 & 7 == 1 & 7
  AddCall(&b, 1, 160);
  AddCall(&b, 9, 200);  // never defined; 9 & 7 == 1 & 7 too
  absl::StatusOr<uint64_t> ack = in.OnBatch(b);
  ASSERT_EQ(ack.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ack.status().message().find("event 3: unknown string id 9"), std::string::npos)
      << ack.status();
  b.mutable_events()->RemoveLast();
  EXPECT_EQ(in.OnBatch(b).value(), 1u);
  EXPECT_EQ(in.TakeCapture().events.size(), 3u);
}

TEST(IngestTest, DuplicateBatchIsIgnoredButAcked) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_execute");
  AddCall(&b, 1, 100);
  ASSERT_EQ(in.OnBatch(b).value(), 1u);
  ASSERT_EQ(in.OnBatch(b).value(), 1u);  // replayed
  nrtprof::EventBatch b2;
  b2.set_sequence(2);
  AddCall(&b2, 1, 200);
  ASSERT_EQ(in.OnBatch(b2).value(), 2u);
  ASSERT_EQ(in.OnBatch(b).value(), 2u);  // an older one replayed: acks the latest
  EXPECT_EQ(in.TakeCapture().events.size(), 2u);
}

TEST(IngestTest, GapIsAcceptedAndCounted) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_execute");
  ASSERT_TRUE(in.OnBatch(b).ok());
  nrtprof::EventBatch b4;
  b4.set_sequence(4);
  AddCall(&b4, 1, 100);
  ASSERT_EQ(in.OnBatch(b4).value(), 4u);
  EXPECT_EQ(in.batches_missing(), 2u);
  ProcessCapture c = in.TakeCapture();
  EXPECT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.batches_missing, 2u);
}

TEST(IngestTest, MalformedInputGetsClearErrors) {
  struct Case {
    const char* what;
    std::function<void(nrtprof::EventBatch*)> make;
    const char* message;
  };
  const Case cases[] = {
      {"sequence 0", [](nrtprof::EventBatch* b) { b->set_sequence(0); }, "sequence 0"},
      {"string id 0", [](nrtprof::EventBatch* b) { AddString(b, 0, "x"); }, "id 0"},
      {"huge string", [](nrtprof::EventBatch* b) { AddString(b, 2, std::string(100 * 1024, 'x')); },
       "102400 bytes"},
      {"redefined string", [](nrtprof::EventBatch* b) { AddString(b, 1, "other"); }, "redefined"},
      {"unknown kind",
       [](nrtprof::EventBatch* b) {
         AddCall(b, 1, 0)->set_kind(static_cast<nrtprof::EventKind>(77));
       },
       "unknown kind 77"},
      {"no name", [](nrtprof::EventBatch* b) { AddCall(b, 0, 0); }, "no name"},
      {"absurd duration", [](nrtprof::EventBatch* b) { AddCall(b, 1, 0)->set_duration_ns(~0ull); },
       "not a plausible time span"},
      {"bad NeuronCore", [](nrtprof::EventBatch* b) { AddCall(b, 1, 0)->set_nc_idx(-5); },
       "NeuronCore -5"},
      {"unknown stack", [](nrtprof::EventBatch* b) { AddCall(b, 1, 0)->set_stack_iid(3); },
       "unknown stack"},
      {"stack with unknown frame",
       [](nrtprof::EventBatch* b) {
         nrtprof::InternedStack* s = b->add_stacks();
         s->set_iid(1);
         s->add_frame_iids(99);
       },
       "unknown string 99"},
  };
  for (const Case& c : cases) {
    ProcessIngest in(TestHello(), IngestLimits());
    in.BeginCapture();
    nrtprof::EventBatch first;
    first.set_sequence(1);
    AddString(&first, 1, "nrt_execute");
    ASSERT_TRUE(in.OnBatch(first).ok());
    nrtprof::EventBatch b;
    b.set_sequence(2);
    c.make(&b);
    absl::StatusOr<uint64_t> ack = in.OnBatch(b);
    EXPECT_EQ(ack.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(ack.status().message().find(c.message), std::string::npos)
        << c.what << ": " << ack.status();
    EXPECT_EQ(in.last_sequence(), 1u) << c.what;
  }
}

TEST(IngestTest, TooManyStringsIsResourceExhausted) {
  IngestLimits limits;
  limits.max_strings_per_process = 2;
  ProcessIngest in(TestHello(), limits);
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "a");
  AddString(&b, 2, "b");
  AddString(&b, 3, "c");
  EXPECT_EQ(in.OnBatch(b).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(IngestTest, HelloNeedsAPid) {
  nrtprof::Hello hello;
  EXPECT_EQ(ProcessIngest::ValidateHello(hello).code(), absl::StatusCode::kInvalidArgument);
  hello.set_pid(1);
  EXPECT_TRUE(ProcessIngest::ValidateHello(hello).ok());
  hello.set_executable(std::string(10000, 'x'));
  EXPECT_EQ(ProcessIngest::ValidateHello(hello).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IngestTest, EventsOverTheBoundAreCountedAsDaemonOverflow) {
  IngestLimits limits;
  limits.max_events_per_process = 3;
  ProcessIngest in(TestHello(), limits);
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_execute");
  for (int i = 0; i < 5; ++i) AddCall(&b, 1, 100 * i);
  AddCall(&b, 1, 600)->set_kind(nrtprof::EVENT_RANGE);
  ASSERT_TRUE(in.OnBatch(b).ok());
  EXPECT_EQ(in.drops().daemon_overflow, 3u);
  ProcessCapture c = in.TakeCapture();
  // The first half of the bound and the newest, in the order they came (issue 36: after a
  // Ctrl-C the capture held the first 2,000,000 events and none of the program's last calls).
  ASSERT_EQ(c.events.size(), 3u);
  EXPECT_EQ(c.events[0].start_ns, 0u);
  EXPECT_EQ(c.events[1].start_ns, 400u);
  EXPECT_EQ(c.events[2].start_ns, 600u);
  EXPECT_EQ(c.events[2].kind, nrtprof::EVENT_RANGE);
  EXPECT_EQ(c.drops.daemon_overflow, 3u);
  // By lane: the three calls left out between them.
  EXPECT_EQ(c.drops.by_lane.runtime, 3u);
  EXPECT_EQ(c.drops.by_lane.framework, 0u);
  EXPECT_EQ(c.drops.by_lane.hardware, 0u);
  EXPECT_EQ(c.events_received, 6u);
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_EQ(c.notices[0],
            "the capture kept its first 1 and its last 2 events; the 3 between them were left out "
            "(counted as daemon_overflow): the daemon keeps at most 3 events of a process in a "
            "capture (nrtprofd --max_events_per_process)");

  // The next capture starts afresh, and says nothing when it stays within the bound.
  in.BeginCapture();
  nrtprof::EventBatch next;
  next.set_sequence(2);
  AddCall(&next, 1, 700);
  ASSERT_TRUE(in.OnBatch(next).ok());
  ProcessCapture d = in.TakeCapture();
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].start_ns, 700u);
  EXPECT_TRUE(d.notices.empty());
}

// Many times the bound: still the first half and the newest, in order.
TEST(IngestTest, AnOverflowingCaptureKeepsItsEndInOrder) {
  IngestLimits limits;
  limits.max_events_per_process = 10;
  ProcessIngest in(TestHello(), limits);
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_tensor_read");
  for (int i = 0; i < 1003; ++i) AddCall(&b, 1, i);
  ASSERT_TRUE(in.OnBatch(b).ok());
  ProcessCapture c = in.TakeCapture();
  std::vector<uint64_t> starts;
  for (const IngestedEvent& e : c.events) starts.push_back(e.start_ns);
  EXPECT_EQ(starts, (std::vector<uint64_t>{0, 1, 2, 3, 4, 998, 999, 1000, 1001, 1002}));
  EXPECT_EQ(c.drops.daemon_overflow, 993u);
}

// Whether the program held the runtime's system trace is said by each batch; a capture knows
// whether any of its batches said so, not what came before it.
TEST(IngestTest, ACaptureKnowsIfTheProgramHeldTheSystemTrace) {
  ProcessIngest in(TestHello(), IngestLimits());
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_execute");
  AddCall(&b, 1, 100);
  b.set_device_events_wait_for_program(true);
  ASSERT_TRUE(in.OnBatch(b).ok());  // before any capture
  in.BeginCapture();
  b.Clear();
  b.set_sequence(2);
  AddCall(&b, 1, 200);
  ASSERT_TRUE(in.OnBatch(b).ok());
  EXPECT_FALSE(in.TakeCapture().device_events_wait_for_program);
  in.BeginCapture();
  b.set_sequence(3);
  b.set_device_events_wait_for_program(true);
  ASSERT_TRUE(in.OnBatch(b).ok());
  b.set_sequence(4);
  b.set_device_events_wait_for_program(false);
  ASSERT_TRUE(in.OnBatch(b).ok());
  EXPECT_TRUE(in.TakeCapture().device_events_wait_for_program);
}

TEST(IngestTest, DropCountersAreCumulativeAndPerCapture) {
  ProcessIngest in(TestHello(), IngestLimits());
  nrtprof::EventBatch b1;
  b1.set_sequence(1);
  b1.mutable_drops()->set_ring_full(5);  // before the capture
  b1.mutable_drops()->mutable_by_lane()->set_runtime(5);
  ASSERT_TRUE(in.OnBatch(b1).ok());
  in.BeginCapture();
  nrtprof::EventBatch b2;
  b2.set_sequence(2);
  b2.mutable_drops()->set_ring_full(8);
  b2.mutable_drops()->set_device_overwritten(3);
  b2.mutable_drops()->set_no_memory(2);  // the shim could not allocate (ulimit -v)
  b2.mutable_drops()->mutable_by_lane()->set_runtime(10);
  b2.mutable_drops()->mutable_by_lane()->set_hardware(3);
  ASSERT_TRUE(in.OnBatch(b2).ok());
  nrtprof::EventBatch b3;
  b3.set_sequence(3);  // counters absent: they stay as they were
  ASSERT_TRUE(in.OnBatch(b3).ok());
  EXPECT_EQ(in.drops().ring_full, 8u);
  ProcessCapture c = in.TakeCapture();
  EXPECT_EQ(c.drops.ring_full, 3u);  // only what was lost during the capture
  EXPECT_EQ(c.drops.device_overwritten, 3u);
  EXPECT_EQ(c.drops.no_memory, 2u);
  EXPECT_EQ(c.drops.by_lane.runtime, 5u);
  EXPECT_EQ(c.drops.by_lane.hardware, 3u);
  EXPECT_EQ(c.drops.by_lane.total(), c.drops.total());
}

// A capture of the past (the flight recorder's batches, replayed into a ForReplay copy) counts
// only what the shim dropped within its window: a PyTorch program's reference loop at its start
// overflowed a ring (500 ranges), seconds before the steps captured, whose 20 were dropped.
TEST(IngestTest, ACaptureOfThePastCountsOnlyTheDropsOfItsWindow) {
  ProcessIngest live(TestHello(), IngestLimits());
  std::vector<nrtprof::EventBatch> batches(6);
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    nrtprof::EventBatch& b = batches[seq];
    b.set_sequence(seq);
    const uint64_t ranges = seq == 1 ? 0 : seq < 5 ? 500 : 520;  // the flood, then the window's
    b.mutable_drops()->set_ring_full(ranges);
    b.mutable_drops()->mutable_by_lane()->set_framework(ranges);
    ASSERT_TRUE(live.OnBatch(b).ok());
  }
  EXPECT_EQ(live.drops().ring_full, 520u);
  // The window: batches 4 and 5.
  std::unique_ptr<ProcessIngest> replay = live.ForReplay(3);
  replay->BeginCapture();
  for (uint64_t seq : {4, 5}) {
    ASSERT_TRUE(replay->OnRecordedBatch(batches[seq], {}).ok());
  }
  ProcessCapture c = replay->TakeCapture();
  EXPECT_TRUE(c.shim_at_begin_known);
  EXPECT_EQ(c.drops.ring_full, 20u);
  EXPECT_EQ(c.drops.by_lane.framework, 20u);
  EXPECT_EQ(c.drops.total(), 20u);
  // A window from the process's first batch has all of them.
  replay = live.ForReplay(0);
  replay->BeginCapture();
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    ASSERT_TRUE(replay->OnRecordedBatch(batches[seq], {}).ok());
  }
  EXPECT_EQ(replay->TakeCapture().drops.ring_full, 520u);
  // A window of batches 2 to 5 whose first two are context from before the capture began: its
  // drops count from batch 3.
  replay = live.ForReplay(1, /*models=*/true, /*drops_after=*/3);
  replay->BeginCapture();
  for (uint64_t seq = 2; seq <= 5; ++seq) {
    ASSERT_TRUE(replay->OnRecordedBatch(batches[seq], {}).ok());
  }
  EXPECT_EQ(replay->TakeCapture().drops.ring_full, 20u);
}

// A stream that resumed a process's batches (its first is 7) cannot say what the counters were
// before its first batch: a window from there has them unknown at its start.
TEST(IngestTest, AResumedStreamsWindowFromItsFirstBatchHasTheCountersBeforeItUnknown) {
  ProcessIngest live(TestHello(), IngestLimits());
  live.ResumeAfter(6);
  nrtprof::EventBatch b7, b8;
  b7.set_sequence(7);
  b7.mutable_drops()->set_ring_full(30);
  b8.set_sequence(8);
  b8.mutable_drops()->set_ring_full(35);
  ASSERT_TRUE(live.OnBatch(b7).ok());
  ASSERT_TRUE(live.OnBatch(b8).ok());
  std::unique_ptr<ProcessIngest> replay = live.ForReplay(6);
  replay->BeginCapture();
  ASSERT_TRUE(replay->OnRecordedBatch(b7, {}).ok());
  EXPECT_FALSE(replay->TakeCapture().shim_at_begin_known);
  replay = live.ForReplay(7);
  replay->BeginCapture();
  ASSERT_TRUE(replay->OnRecordedBatch(b8, {}).ok());
  const ProcessCapture c = replay->TakeCapture();
  EXPECT_TRUE(c.shim_at_begin_known);
  EXPECT_EQ(c.drops.ring_full, 5u);
}

TEST(IngestTest, EventsSentAreTalliedFromTheCapturesFirstBatch) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(3);  // after batches of an earlier stream: 5 calls sent before this one
  AddString(&b, 1, "nrt_execute");
  AddCall(&b, 1, 100);
  AddCall(&b, 1, 200);
  b.mutable_events_sent()->set_runtime(7);
  ASSERT_TRUE(in.OnBatch(b).ok());
  nrtprof::EventBatch later;
  later.set_sequence(5);  // batch 4 lost: its 4 calls too
  AddCall(&later, 1, 300);
  later.mutable_events_sent()->set_runtime(12);
  ASSERT_TRUE(in.OnBatch(later).ok());
  const ProcessCapture c = in.TakeCapture();
  EXPECT_TRUE(c.sent_known);
  EXPECT_EQ(c.sent_at_begin.runtime, 5u);
  EXPECT_EQ(c.sent_at_end.runtime, 12u);
  EXPECT_EQ(c.received_by_lane.runtime, 3u);
  EXPECT_EQ(c.batches_missing, 3u);  // 1, 2 (numbered before this stream's first) and 4
}

TEST(IngestTest, AFinalOnlyStreamMissesNoBatchesOfItsOwn) {
  nrtprof::Hello hello = TestHello();
  hello.set_final_only(true);
  ProcessIngest in(hello, IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b;
  b.set_sequence(40);
  b.set_final(true);
  b.mutable_events_sent()->set_runtime(90);
  ASSERT_EQ(in.OnBatch(b).value(), 40u);
  EXPECT_TRUE(in.final());
  const ProcessCapture c = in.TakeCapture();
  EXPECT_EQ(c.batches_missing, 0u);
  EXPECT_TRUE(c.sent_known);
  EXPECT_EQ(c.sent_at_begin.runtime, 90u);
  EXPECT_EQ(c.received_by_lane.runtime, 0u);
}

TEST(IngestTest, EventsOutsideACaptureAreNotKeptButHandlesAre) {
  ProcessIngest in(TestHello(), IngestLimits());
  nrtprof::EventBatch b;
  b.set_sequence(1);
  AddString(&b, 1, "nrt_tensor_allocate");
  AddString(&b, 2, "nrt_execute");
  nrtprof::Event* alloc = AddCall(&b, 1, 100);
  alloc->set_tensor_handle(0xabc);
  AddCall(&b, 2, 200);
  nrtprof::DeviceClockSync* sync = b.add_clock_syncs();
  sync->set_nc_idx(0);
  sync->set_device_ns(5000);
  sync->set_host_monotonic_ns(100);
  ASSERT_TRUE(in.OnBatch(b).ok());
  EXPECT_EQ(in.events_outside_capture(), 2u);
  in.BeginCapture();
  ProcessCapture c = in.TakeCapture();
  EXPECT_TRUE(c.events.empty());
  ASSERT_EQ(c.handle_events.size(), 1u);
  EXPECT_EQ(c.handle_events[0].call.tensor, 0xabcu);
  EXPECT_EQ(c.clock_syncs.size(), 1u);
}

TEST(IngestTest, FinalAndModels) {
  ProcessIngest in(TestHello(), IngestLimits());
  nrtprof::EventBatch b;
  b.set_sequence(1);
  b.set_final(true);
  nrtprof::LoadedModel* m = b.add_models();
  m->set_model_handle(7);
  m->set_model_file("NEFF");
  m->set_name("aten_mul");
  ASSERT_TRUE(in.OnBatch(b).ok());
  EXPECT_TRUE(in.final());
  ProcessCapture c = in.TakeCapture();
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].file.bytes, "NEFF");
  EXPECT_EQ(c.models[0].file.size, 4u);
  EXPECT_TRUE(c.final);
}

TEST(IngestTest, NoticesAreKeptOnceAndBounded) {
  ProcessIngest in(TestHello(), IngestLimits());
  in.BeginCapture();
  nrtprof::EventBatch b1;
  b1.set_sequence(1);
  b1.add_notices("libnrt in a dlmopen namespace: not recorded");
  ASSERT_TRUE(in.OnBatch(b1).ok());
  // Later batches carry every notice so far: each is kept once.
  nrtprof::EventBatch b2;
  b2.set_sequence(2);
  b2.add_notices("libnrt in a dlmopen namespace: not recorded");
  b2.add_notices("a second libnrt: not recorded");
  ASSERT_TRUE(in.OnBatch(b2).ok());
  // Over the bounds the batch is refused, saying why, and changes nothing.
  nrtprof::EventBatch many;
  many.set_sequence(3);
  for (int i = 0; i < 17; ++i) many.add_notices(absl::StrCat("notice ", i));
  absl::StatusOr<uint64_t> r = in.OnBatch(many);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "17 notices (at most 16)")) << r.status();
  nrtprof::EventBatch long_one;
  long_one.set_sequence(3);
  long_one.add_notices(std::string(1025, 'x'));
  r = in.OnBatch(long_one);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "notice of 1025 bytes")) << r.status();
  const ProcessCapture c = in.TakeCapture();
  EXPECT_EQ(c.notices, (std::vector<std::string>{"libnrt in a dlmopen namespace: not recorded",
                                                 "a second libnrt: not recorded"}));
}

}  // namespace
}  // namespace nrtprof::daemon
