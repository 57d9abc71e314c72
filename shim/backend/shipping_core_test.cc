// The shipping core's decisions, driven through a fake stream and clock: what reaches the
// daemon after a broken stream, from the spool, and at each way a process ends, and what the
// daemon is told was dropped. The real transport, with a real daemon, is tested by
// shim_integration_test and tests/ (fault_test, abrupt_end_test, ...).
#include "shim/backend/shipping_core.h"

#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/spool_file.h"
#include "gtest/gtest.h"
#include "shim/backend/batcher.h"
#include "shim/backend/stack_table.h"
#include "shim/backend/string_table.h"

namespace nrtprof::shim {
namespace {

using TimePoint = ShipClock::TimePoint;

class FakeClock final : public ShipClock {
 public:
  uint64_t MonotonicNs() override { return now_ns_; }
  TimePoint Now() override { return TimePoint(std::chrono::nanoseconds(now_ns_)); }
  void Advance(uint64_t ns) { now_ns_ += ns; }
  void AdvanceTo(TimePoint t) {
    const uint64_t ns = std::chrono::nanoseconds(t.time_since_epoch()).count();
    if (ns > now_ns_) now_ns_ = ns;
  }

 private:
  uint64_t now_ns_ = 1'000'000'000;
};

// What one stream carried and how it ended; the test keeps it after the core lets go of the
// stream.
struct StreamLog {
  nrtprof::Hello hello;
  bool wait_for_ready = false;
  std::vector<nrtprof::EventBatch> batches;
  uint64_t acked = 0;
  bool ack_seen = false;
  bool broken = false;
  bool refused = false;
  bool ack_every_batch = false;  // the daemon keeps up
  bool closed = false;
  bool graceful = false;

  std::vector<uint64_t> Sequences() const {
    std::vector<uint64_t> out;
    for (const nrtprof::EventBatch& b : batches) out.push_back(b.sequence());
    return out;
  }
  // The daemon's first Ack: how far it has this process.
  void Ack(uint64_t sequence) {
    ack_seen = true;
    acked = std::max(acked, sequence);
  }
};

class FakeStream final : public ShipStream {
 public:
  FakeStream(std::shared_ptr<StreamLog> log, FakeClock* clock)
      : log_(std::move(log)), clock_(clock) {}
  void Send(std::shared_ptr<const nrtprof::ShimMessage> message) override {
    if (log_->broken) return;
    log_->batches.push_back(message->batch());
    if (log_->ack_every_batch) log_->Ack(message->batch().sequence());
  }
  uint64_t acked() override { return log_->acked; }
  bool ack_seen() override { return log_->ack_seen; }
  bool broken() override { return log_->broken; }
  bool heard_from_daemon() override { return log_->ack_seen || log_->refused; }
  bool refused_by_daemon() override { return log_->refused; }
  std::string failure() override { return log_->broken ? "Connection refused" : ""; }
  bool WaitForAck(uint64_t sequence, Clock::time_point deadline) override {
    // Nothing more arrives while waiting: the wait lasts until its deadline.
    if (log_->acked < sequence && !log_->broken) clock_->AdvanceTo(deadline);
    return log_->acked >= sequence;
  }
  void Close(Clock::time_point, bool graceful) override {
    log_->closed = true;
    log_->graceful = graceful;
  }

 private:
  std::shared_ptr<StreamLog> log_;
  FakeClock* clock_;
};

class FakeLink final : public ShipLink {
 public:
  explicit FakeLink(FakeClock* clock) : clock_(clock) {}
  std::unique_ptr<ShipStream> Open(nrtprof::ShimMessage hello, ControlFn on_control,
                                   bool wait_for_ready) override {
    if (reachable && reads_encoded) {
      // The daemon's answer to the Hello.
      nrtprof::CaptureControl control;
      control.set_reads_events_encoded(true);
      on_control(control);
    }
    auto log = std::make_shared<StreamLog>();
    log->hello = hello.hello();
    log->wait_for_ready = wait_for_ready;
    log->broken = !reachable;
    log->ack_every_batch = daemon_keeps_up;
    if (reachable && daemon_keeps_up) log->Ack(daemon_has);
    streams.push_back(log);
    return std::make_unique<FakeStream>(log, clock_);
  }
  std::unique_ptr<ShipStream> OpenAlone(nrtprof::ShimMessage hello) override {
    auto log = std::make_shared<StreamLog>();
    log->hello = hello.hello();
    log->ack_every_batch = true;  // a connection of its own is read at once
    alone.push_back(log);
    return std::make_unique<FakeStream>(log, clock_);
  }
  void ResetBackoff() override {}
  absl::Status CheckTrust() override { return trust; }
  bool started() const override { return started_transport; }
  const std::string& target() const override { return target_; }
  bool remote() const override { return tcp; }
  bool trouble_said() const override { return transport_trouble; }

  StreamLog& last() { return *streams.back(); }

  bool reachable = true;
  bool reads_encoded = false;  // the daemon says it reads EventBatch.events_encoded
  bool daemon_keeps_up = false;
  uint64_t daemon_has = 0;  // what a daemon that keeps up says it has, at a new stream
  absl::Status trust;
  bool started_transport = true;
  bool tcp = false;
  bool transport_trouble = false;  // the transport said why it cannot connect
  std::vector<std::shared_ptr<StreamLog>> streams;
  std::vector<std::shared_ptr<StreamLog>> alone;

 private:
  FakeClock* clock_;
  std::string target_ = "unix:/run/nrtprof/nrtprofd.sock";
};

class FakeHost final : public ShippingHost {
 public:
  nrtprof::Hello Hello() override {
    nrtprof::Hello hello;
    hello.set_pid(4242);
    hello.set_mode(nrtprof::MODE_LOSSLESS);
    return hello;
  }
  HostDrops Drops() override { return drops; }
  void SetProcessState(nrtprof::EventBatch*) override {}
  void OnControl(const nrtprof::CaptureControl&) override {}
  void StopRecording() override { recording = false; }
  void Say(const std::string& line) override { lines.push_back(line); }

  HostDrops drops;
  bool recording = true;
  std::vector<std::string> lines;
};

class ShippingCoreTest : public ::testing::Test {
 protected:
  ShippingCoreTest() { Make(Batcher::Options()); }
  ~ShippingCoreTest() override {
    if (!spool_dir_.empty()) {
      std::string cmd = "rm -rf '" + spool_dir_ + "'";
      EXPECT_EQ(system(cmd.c_str()), 0);
    }
  }

  void Make(Batcher::Options options) {
    core_.reset();
    options.batch_events = kEventsPerBatch;
    batcher_ = std::make_unique<Batcher>(options, &strings_, &stacks_);
    core_ = std::make_unique<ShippingCore>(&host_, &link_, &clock_, batcher_.get());
  }

  // Lossless mode, with a spool bounded at `max_bytes`. Returns its path.
  std::string UseSpool(uint64_t max_bytes = 1 << 30) {
    const char* root = getenv("TEST_TMPDIR");
    if (root == nullptr) root = getenv("TMPDIR");
    std::string dir = std::string(root != nullptr ? root : "/tmp") + "/shipping_core_test.XXXXXX";
    EXPECT_NE(mkdtemp(dir.data()), nullptr);
    spool_dir_ = dir;
    auto spool = std::make_unique<SpoolWriter>();
    std::string error;
    EXPECT_TRUE(spool->Open(spool_dir_ + "/spool", "c.4242.1.spool", max_bytes, &error)) << error;
    nrtprof::ShimMessage hello;
    *hello.mutable_hello() = host_.Hello();
    EXPECT_TRUE(spool->Append(hello.SerializeAsString()));
    const std::string path = spool->path();
    core_->UseSpool(std::move(spool));
    return path;
  }

  // `n` sealed batches of nrt_execute calls numbered on from the last.
  void Produce(int n) {
    for (int b = 0; b < n; ++b) {
      for (int e = 0; e < kEventsPerBatch; ++e) {
        nrtprof::Event event;
        event.set_kind(nrtprof::EVENT_API_CALL);
        event.set_name_iid(strings_.Intern("nrt_execute"));
        event.set_correlation_id(++produced_);
        batcher_->AddEvent(event, clock_.MonotonicNs());
      }
      batcher_->SealAll();
    }
  }

  // `extra` batches more than may wait for an ack, made and ticked: the stream gets only as
  // many as may wait. Returns how many were made.
  int FillPastTheAckBound(int extra) {
    const int n = ShippingCore::kMaxUnackedBatches + extra;
    Produce(n);
    core_->Tick();
    EXPECT_EQ(link_.last().Sequences(), Range(1, ShippingCore::kMaxUnackedBatches));
    return n;
  }

  // The first correlation id of each batch: which calls a stream carried, in order.
  static std::vector<uint64_t> FirstCalls(const StreamLog& log) {
    std::vector<uint64_t> out;
    for (const nrtprof::EventBatch& b : log.batches) {
      if (b.events_size() > 0) out.push_back(b.events(0).correlation_id());
    }
    return out;
  }

  static std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
    std::vector<uint64_t> out;
    for (uint64_t s = first; s <= last; ++s) out.push_back(s);
    return out;
  }

  static constexpr int kEventsPerBatch = 4;
  FakeClock clock_;
  FakeLink link_{&clock_};
  FakeHost host_;
  StringTable strings_;
  StackTable stacks_{&strings_, [](uintptr_t) { return std::string("f"); }};
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<ShippingCore> core_;
  uint64_t produced_ = 0;  // calls made so far
  std::string spool_dir_;
};

// ---- Sequences, acks, resend ----

TEST_F(ShippingCoreTest, ABrokenStreamsUnacknowledgedBatchesGoAgainInOrderOnTheNext) {
  Produce(5);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 1u);
  EXPECT_EQ(link_.last().Sequences(), Range(1, 5));
  EXPECT_EQ(link_.last().hello.mode(), nrtprof::MODE_BEST_EFFORT);
  link_.last().Ack(2);
  link_.last().broken = true;
  core_->Tick();  // abandoned; the next attempt waits out the backoff
  EXPECT_EQ(link_.streams.size(), 1u);
  clock_.Advance(ShippingCore::kFirstBackoffNs);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 2u);
  const StreamLog& second = link_.last();
  EXPECT_EQ(second.Sequences(), Range(3, 5));
  EXPECT_EQ(FirstCalls(second), (std::vector<uint64_t>{9, 13, 17}));
  // The new stream's daemon learns the function's name with the first batch that uses it.
  ASSERT_EQ(second.batches[0].strings_size(), 1);
  EXPECT_EQ(second.batches[0].strings(0).value(), "nrt_execute");
  EXPECT_EQ(second.batches[1].strings_size(), 0);
  // Batches made since follow them, numbered on.
  Produce(1);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(3, 6));
}

// A daemon that reads events_encoded gets each event's bytes as the batcher wrote them; one
// that has not said so (an older nrtprofd) gets the same events in `events`, resent batches
// included, so that none is lost to it unread.
TEST_F(ShippingCoreTest, EventsGoEncodedOnlyToADaemonThatReadsThem) {
  link_.reads_encoded = true;
  Produce(3);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 1u);
  EXPECT_EQ(link_.last().Sequences(), Range(1, 3));
  for (const nrtprof::EventBatch& b : link_.last().batches) {
    EXPECT_EQ(b.events_size(), 0);
    nrtprof::EventBatch encoded;
    ASSERT_TRUE(encoded.ParseFromString(b.events_encoded()));
    ASSERT_EQ(encoded.events_size(), kEventsPerBatch);
    EXPECT_EQ(encoded.events(0).correlation_id(), (b.sequence() - 1) * kEventsPerBatch + 1);
    EXPECT_EQ(encoded.events(0).name_iid(), strings_.Intern("nrt_execute"));
  }
  EXPECT_EQ(link_.last().batches[0].strings_size(), 1) << "the strings its events name";
  link_.last().Ack(1);
  link_.last().broken = true;
  core_->Tick();
  link_.reads_encoded = false;
  clock_.Advance(ShippingCore::kFirstBackoffNs);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 2u);
  Produce(1);
  core_->Tick();
  const StreamLog& old_daemon = link_.last();
  EXPECT_EQ(old_daemon.Sequences(), Range(2, 4));
  EXPECT_EQ(FirstCalls(old_daemon), (std::vector<uint64_t>{5, 9, 13}));
  for (const nrtprof::EventBatch& b : old_daemon.batches) {
    EXPECT_EQ(b.events_size(), kEventsPerBatch);
    EXPECT_TRUE(b.events_encoded().empty());
  }
}

TEST_F(ShippingCoreTest, AcknowledgedBatchesAreNotSentAgain) {
  Produce(3);
  core_->Tick();
  link_.last().Ack(3);
  Produce(2);
  core_->Tick();
  link_.last().Ack(5);
  core_->Tick();
  link_.last().broken = true;
  core_->Tick();
  clock_.Advance(ShippingCore::kFirstBackoffNs);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 2u);
  EXPECT_TRUE(link_.last().batches.empty());
  Produce(1);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(6, 6));
}

TEST_F(ShippingCoreTest, NoMoreBatchesWaitForAnAckThanTheBound) {
  const int n = FillPastTheAckBound(6);
  link_.last().Ack(6);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(1, n));
}

// ---- A capture's stop: the daemon's flush ----

TEST_F(ShippingCoreTest, AFlushSaysWhichBatchHoldsTheLastOfWhatWasRecordedBeforeIt) {
  Produce(3);
  core_->Flush(7);
  core_->Tick();
  const StreamLog& log = link_.last();
  ASSERT_EQ(log.Sequences(), Range(1, 3));
  EXPECT_EQ(log.batches[1].flushed(), 0u) << "batch 3 still holds what came before the flush";
  EXPECT_EQ(log.batches[2].flushed(), 7u);
  // With nothing recorded since, the answer is a batch of its own, at once.
  core_->Flush(8);
  core_->Tick();
  ASSERT_EQ(log.Sequences(), Range(1, 4));
  EXPECT_EQ(log.batches[3].events_size(), 0);
  EXPECT_EQ(log.batches[3].flushed(), 8u);
  // Later batches say so too; an older flush changes nothing, and nothing is sent for it.
  core_->Flush(8);
  core_->Tick();
  EXPECT_EQ(log.Sequences(), Range(1, 4));
  Produce(1);
  core_->Tick();
  EXPECT_EQ(log.batches[4].flushed(), 8u);
}

TEST_F(ShippingCoreTest, AFlushPastTheAckBoundIsAnsweredOnceTheRestIsSent) {
  const int n = FillPastTheAckBound(2);
  core_->Flush(1);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(1, ShippingCore::kMaxUnackedBatches));
  for (const nrtprof::EventBatch& b : link_.last().batches) EXPECT_EQ(b.flushed(), 0u);
  link_.last().Ack(2);
  core_->Tick();
  ASSERT_EQ(link_.last().Sequences(), Range(1, n));
  EXPECT_EQ(link_.last().batches[n - 2].flushed(), 0u);
  EXPECT_EQ(link_.last().batches[n - 1].flushed(), 1u);
}

// ---- The daemon away ----

TEST_F(ShippingCoreTest, ADaemonAwayLearnsHowManyCallsWereDroppedPastTheBound) {
  Batcher::Options options;
  options.max_pending_events = 2 * kEventsPerBatch;
  Make(options);
  link_.reachable = false;
  Produce(5);
  // Each failed stream is noticed at the next tick; retries back off, 100 ms then 200 ms.
  std::vector<size_t> attempts;
  for (int tick = 0; tick < 5; ++tick) {
    core_->Tick();
    attempts.push_back(link_.streams.size());
    clock_.Advance(ShippingCore::kFirstBackoffNs);
  }
  EXPECT_EQ(attempts, (std::vector<size_t>{1, 1, 2, 2, 2}));
  link_.reachable = true;
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 3u);
  const StreamLog& back = link_.last();
  // Past the bound the three oldest batches went: the two newest, numbered without a gap,
  // carry the count of what was dropped.
  EXPECT_EQ(back.Sequences(), Range(1, 2));
  EXPECT_EQ(FirstCalls(back), (std::vector<uint64_t>{13, 17}));
  EXPECT_EQ(back.batches[0].drops().daemon_away(), 3u * kEventsPerBatch);
  EXPECT_EQ(back.batches[0].drops().by_lane().runtime(), 3u * kEventsPerBatch);
  EXPECT_EQ(back.batches[1].events_sent().runtime(), 2u * kEventsPerBatch);
  EXPECT_TRUE(host_.lines.empty());  // an absent daemon goes unsaid
}

TEST_F(ShippingCoreTest, ADaemonThatRefusesTheCredentialsStopsRecordingForGood) {
  Produce(1);
  core_->Tick();
  link_.last().refused = true;
  link_.last().broken = true;
  core_->Tick();
  EXPECT_FALSE(host_.recording);
  ASSERT_EQ(host_.lines.size(), 1u);
  EXPECT_EQ(host_.lines[0],
            "nrtprof: the daemon at unix:/run/nrtprof/nrtprofd.sock refused this process's "
            "credentials (UNAUTHENTICATED); not profiling it");
  clock_.Advance(ShippingCore::kMaxBackoffNs);
  core_->Tick();
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_EQ(link_.streams.size(), 1u);
}

TEST_F(ShippingCoreTest, AnUntrustedDaemonGetsNothingAndIsNamedOnce) {
  link_.trust = absl::PermissionDeniedError("/run/nrtprof is writable by others");
  Produce(1);
  core_->Tick();
  clock_.Advance(ShippingCore::kFirstBackoffNs);
  core_->Tick();
  EXPECT_TRUE(link_.streams.empty());
  EXPECT_EQ(host_.lines, (std::vector<std::string>{
                             "nrtprof: not trusting the daemon at "
                             "unix:/run/nrtprof/nrtprofd.sock: /run/nrtprof is writable by "
                             "others; not sending it anything"}));
}

// ---- Lossless: the spool ----

TEST_F(ShippingCoreTest, ANewStreamGetsFromTheSpoolEveryBatchPastWhatItsDaemonHasOnce) {
  UseSpool();
  Produce(4);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 1u);
  EXPECT_TRUE(link_.last().wait_for_ready);
  EXPECT_EQ(link_.last().hello.mode(), nrtprof::MODE_LOSSLESS);
  EXPECT_TRUE(link_.last().batches.empty());  // spooled: it waits for the daemon to say from where
  link_.last().Ack(0);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(1, 4));
  link_.last().Ack(3);
  link_.last().broken = true;
  core_->Tick();
  Produce(3);  // while away: into the spool only
  core_->Tick();
  clock_.Advance(ShippingCore::kFirstBackoffNs);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 2u);
  // Its daemon stored batch 4 too (its ack was lost with the stream).
  link_.last().Ack(4);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(5, 7));
  EXPECT_EQ(FirstCalls(link_.last()), (std::vector<uint64_t>{17, 21, 25}));
  // Caught up: what comes next goes out live, once.
  Produce(1);
  core_->Tick();
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(5, 8));
}

TEST_F(ShippingCoreTest, ADaemonThatRestartedGetsTheWholeSpoolAgain) {
  UseSpool();
  Produce(3);
  core_->Tick();
  link_.last().Ack(0);
  core_->Tick();
  link_.last().Ack(3);
  link_.last().broken = true;
  core_->Tick();
  clock_.Advance(ShippingCore::kFirstBackoffNs);
  core_->Tick();
  link_.last().Ack(0);  // a new daemon: it has nothing of this process
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(1, 3));
  // The first batch on the new stream names the function again.
  ASSERT_EQ(link_.last().batches[0].strings_size(), 1);
}

TEST_F(ShippingCoreTest, ADaemonFarBehindGetsTheRestFromTheSpoolAsAcksMakeRoom) {
  UseSpool();
  core_->Tick();
  link_.last().Ack(0);
  core_->Tick();
  const int n = FillPastTheAckBound(10);
  link_.last().Ack(5);
  core_->Tick();
  link_.last().Ack(ShippingCore::kMaxUnackedBatches + 5);
  core_->Tick();
  EXPECT_EQ(link_.last().Sequences(), Range(1, n));
}

// ---- Exit ----

TEST_F(ShippingCoreTest, AtANormalExitEverythingGoesAndTheLastBatchIsFinal) {
  link_.daemon_keeps_up = true;
  Produce(3);
  const TimePoint deadline = clock_.Now() + std::chrono::seconds(2);
  core_->Final(deadline);
  ASSERT_EQ(link_.streams.size(), 1u);
  const StreamLog& s = link_.last();
  EXPECT_EQ(s.Sequences(), Range(1, 3));
  EXPECT_TRUE(s.batches.back().final());
  EXPECT_FALSE(s.batches[1].final());
  EXPECT_EQ(s.batches.back().events_sent().runtime(), 3u * kEventsPerBatch);
  EXPECT_EQ(s.batches.back().drops().by_lane().runtime(), 0u);
  EXPECT_TRUE(s.closed && s.graceful);
  EXPECT_TRUE(link_.alone.empty());
  EXPECT_LE(clock_.Now(), deadline);
}

TEST_F(ShippingCoreTest, AtExitADaemonFarBehindIsToldWhatCouldNotBeSent) {
  Produce(ShippingCore::kMaxUnackedBatches + 6);
  core_->Tick();  // 64 wait for an ack that does not come
  const TimePoint deadline = clock_.Now() + std::chrono::seconds(2);
  core_->Final(deadline);
  const StreamLog& s = link_.last();
  // Out of time for the six left: dropped, counted, in an event-less final batch.
  ASSERT_EQ(s.batches.size(), ShippingCore::kMaxUnackedBatches + 1);
  const nrtprof::EventBatch& last = s.batches.back();
  EXPECT_TRUE(last.final());
  EXPECT_EQ(last.sequence(), ShippingCore::kMaxUnackedBatches + 1);
  EXPECT_EQ(last.events_size(), 0);
  EXPECT_EQ(last.drops().daemon_away(), 6u * kEventsPerBatch);
  // Stuck behind the rest, it goes again alone, on a connection of its own that the daemon
  // reads at once.
  ASSERT_EQ(link_.alone.size(), 1u);
  const StreamLog& alone = *link_.alone[0];
  EXPECT_TRUE(alone.hello.final_only());
  ASSERT_EQ(alone.batches.size(), 1u);
  EXPECT_EQ(alone.batches[0].sequence(), last.sequence());
  EXPECT_TRUE(alone.batches[0].final());
  EXPECT_EQ(alone.batches[0].drops().daemon_away(), 6u * kEventsPerBatch);
  EXPECT_EQ(alone.batches[0].events_sent().runtime(),
            ShippingCore::kMaxUnackedBatches * kEventsPerBatch);
  EXPECT_TRUE(alone.graceful);
  EXPECT_LE(clock_.Now(), deadline);
}

TEST_F(ShippingCoreTest, AtExitAnUnreachableDaemonGetsOneAttemptAndTheExitKeepsItsTime) {
  link_.reachable = false;
  Produce(2);
  core_->Tick();
  ASSERT_EQ(link_.streams.size(), 1u);
  const TimePoint deadline = clock_.Now() + std::chrono::seconds(2);
  core_->Final(deadline);  // within the backoff: tried at once all the same
  EXPECT_EQ(link_.streams.size(), 2u);
  EXPECT_TRUE(link_.last().batches.empty());
  EXPECT_TRUE(link_.alone.empty());
  EXPECT_LE(clock_.Now(), deadline);
}

// A daemon absent from an address the user named (NRTPROF_ADDR) is said once, at exit: the
// program ran unprofiled (before: not a word). Absent from the default address, it goes unsaid.
TEST_F(ShippingCoreTest, AtExitANamedDaemonNeverReachedIsSaidOnce) {
  core_->SayIfNeverReached();
  link_.reachable = false;
  Produce(2);
  core_->Tick();
  clock_.Advance(1'000'000'000);
  core_->Tick();
  EXPECT_TRUE(host_.lines.empty());  // while the program runs, a daemon may still come
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_EQ(host_.lines, (std::vector<std::string>{
                             "nrtprof: no daemon answered at " + link_.target() +
                             " (NRTPROF_ADDR) while this process ran: it was not profiled"}));
}

TEST_F(ShippingCoreTest, AtExitADaemonReachedOnceOrAtTheDefaultAddressIsNotSaid) {
  // Reached, then gone: the capture has the process, and says what it lost.
  core_->SayIfNeverReached();
  link_.daemon_keeps_up = true;
  Produce(1);
  core_->Tick();
  link_.last().broken = true;
  link_.reachable = false;
  Produce(1);
  core_->Tick();
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_TRUE(host_.lines.empty());
  // The default address: an always-on shim without a daemon says nothing.
  Make(Batcher::Options());
  Produce(1);
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_TRUE(host_.lines.empty());
  // The transport already said why (a failed TLS handshake): not said twice.
  Make(Batcher::Options());
  core_->SayIfNeverReached();
  link_.transport_trouble = true;
  Produce(1);
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_TRUE(host_.lines.empty());
}

TEST_F(ShippingCoreTest, AtExitAFullSpoolCountsWhatItCouldNotHoldAndKeepsTheSequence) {
  const std::string path = UseSpool(2 * SpoolWriter::kReserveBytes + 4096);
  link_.daemon_keeps_up = true;
  core_->Tick();
  int n = 0;
  // Batches until one no longer fits, then a few more.
  while (n < 5000) {
    Produce(1);
    core_->Tick();
    ++n;
    if (link_.last().batches.back().drops().spool_full() > 0) break;
  }
  Produce(3);
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  SpoolContents spool;
  std::string error;
  ASSERT_TRUE(ReadSpool(path, &spool, &error)) << error;
  uint64_t kept = 0, expected_sequence = 1;
  nrtprof::EventBatch last;
  for (size_t i = 1; i < spool.records.size(); ++i) {
    nrtprof::ShimMessage m;
    ASSERT_TRUE(m.ParseFromString(spool.records[i]));
    EXPECT_EQ(m.batch().sequence(), expected_sequence++);
    kept += m.batch().events_size();
    last = m.batch();
  }
  EXPECT_TRUE(last.final());
  EXPECT_GT(last.drops().spool_full(), 0u);
  // Every call is in the spool or counted as lost to it.
  EXPECT_EQ(kept + last.drops().spool_full(), produced_);
  EXPECT_EQ(last.events_sent().runtime(), kept);
  // The stream got the same: the lost calls are not sent either.
  uint64_t streamed = 0;
  for (const nrtprof::EventBatch& b : link_.last().batches) streamed += b.events_size();
  EXPECT_EQ(streamed, kept);
}

TEST_F(ShippingCoreTest, LosslessExitWaitsBrieflyForADaemonThatReadsTheSpoolItself) {
  UseSpool();
  const TimePoint asked = clock_.Now() + std::chrono::seconds(2);
  EXPECT_EQ(core_->ExitDeadline(asked), clock_.Now() + std::chrono::milliseconds(200));
  link_.tcp = true;
  EXPECT_EQ(core_->ExitDeadline(asked), asked);
}

TEST_F(ShippingCoreTest, AcrossTcpTheSpoolGoesOnceTheDaemonHasTheFinalBatch) {
  link_.tcp = true;
  link_.daemon_keeps_up = true;
  const std::string path = UseSpool();
  Produce(2);
  core_->Tick();
  core_->Tick();
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_EQ(link_.last().Sequences(), Range(1, 3));
  EXPECT_TRUE(link_.last().batches.back().final());
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST_F(ShippingCoreTest, OnThisMachineTheSpoolStaysForTheDaemonToRead) {
  link_.daemon_keeps_up = true;
  const std::string path = UseSpool();
  Produce(2);
  core_->Tick();
  core_->Final(core_->ExitDeadline(clock_.Now() + std::chrono::seconds(2)));
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
}

TEST_F(ShippingCoreTest, AForkChildSendsNothingOfItsParents) {
  const std::string path = UseSpool();
  Produce(2);
  core_->Tick();
  link_.last().Ack(0);
  core_->Tick();
  const std::vector<uint64_t> parent_sent = link_.last().Sequences();
  SpoolContents before;
  std::string error;
  ASSERT_TRUE(ReadSpool(path, &before, &error)) << error;
  EXPECT_FALSE(core_->AtForkChild());  // the parent's transport started: no profiling
  Produce(1);
  core_->Tick();
  core_->Final(clock_.Now() + std::chrono::seconds(2));
  EXPECT_EQ(link_.streams.size(), 1u);
  EXPECT_EQ(link_.last().Sequences(), parent_sent);
  EXPECT_FALSE(link_.last().closed);  // the parent's stream, left to the parent
  SpoolContents after;
  ASSERT_TRUE(ReadSpool(path, &after, &error)) << error;
  EXPECT_EQ(after.records, before.records);
}

TEST_F(ShippingCoreTest, AChildForkedBeforeTheTransportStartedMayShipOnItsOwn) {
  link_.started_transport = false;
  EXPECT_TRUE(core_->AtForkChild());
}

}  // namespace
}  // namespace nrtprof::shim
