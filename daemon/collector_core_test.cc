#include "daemon/collector_core.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/testing/collector_core_fixture.h"
#include "trace/huge_page_allocator.h"
#include "trace/summary.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

using core_testing::Batch;
using core_testing::CollectorCoreTest;
using core_testing::Controls;
using core_testing::FakeClock;
using core_testing::FakeSink;
using core_testing::TempDir;
using core_testing::Hello;
TEST_F(CollectorCoreTest, CaptureMembership) {
  Controls c1, c2, c3, c4, c5;
  // Connected before the capture, wanting any capture: joins when it starts.
  ASSERT_FALSE(core_.OnHello(1, Hello(101), c1.Sender())->capturing());
  // Wanting another capture: stays out.
  ASSERT_FALSE(core_.OnHello(2, Hello(102, "other"), c2.Sender())->capturing());
  Start("c1");
  ASSERT_EQ(c1.sent.size(), 2u);
  EXPECT_TRUE(c1.sent[1].capturing());
  EXPECT_EQ(c1.sent[1].capture_id(), "c1");
  EXPECT_EQ(c2.sent.size(), 1u);
  // Connecting during the capture, naming it or not: joins at once.
  absl::StatusOr<nrtprof::CaptureControl> named = core_.OnHello(3, Hello(103, "c1"), c3.Sender());
  EXPECT_TRUE(named->capturing());
  EXPECT_EQ(named->capture_id(), "c1");
  EXPECT_TRUE(core_.OnHello(4, Hello(104), c4.Sender())->capturing());
  for (CollectorCore::StreamId s : {1, 2, 3, 4}) ASSERT_TRUE(core_.OnBatch(s, Batch(1)).ok());

  absl::StatusOr<nrtprof::CaptureFiles> files = Stop("c1");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(sink_.traces.size(), 1u);
  EXPECT_EQ(Pids(sink_.traces[0]), (std::set<uint32_t>{101, 103, 104}));
  EXPECT_EQ(files->processes(), 3u);
  EXPECT_EQ(files->events(), 6u);
  EXPECT_EQ(files->files(0), "fake.trace");
  EXPECT_NE(files->summary_text().find("aten::mul"), std::string::npos);
  // Told to stop.
  EXPECT_FALSE(c1.sent.back().capturing());
  EXPECT_FALSE(c3.sent.back().capturing());

  // A process naming a capture that is over is not recording.
  EXPECT_FALSE(core_.OnHello(5, Hello(105, "c1"), c5.Sender())->capturing());
}

// What `nrtprof capture` prints (the reply's table) is what the capture's summary files say:
// one summary, worked out once for the capture, feeds both.
TEST_F(CollectorCoreTest, ReplyTableIsTheSummaryFilesTable) {
  SummarySink summary_files;
  CollectorCore core(Options(), &summary_files, &clock_);
  Controls c1, c2;
  ASSERT_TRUE(core.OnHello(1, Hello(101), c1.Sender()).ok());
  ASSERT_TRUE(core.OnHello(2, Hello(102), c2.Sender()).ok());
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("table");
  absl::StatusOr<nrtprof::StartCaptureReply> started = core.StartCapture(request);
  ASSERT_TRUE(started.ok()) << started.status();
  for (CollectorCore::StreamId s : {1, 2}) {
    ASSERT_TRUE(core.OnBatch(s, Batch(1)).ok());
    ASSERT_TRUE(core.OnBatch(s, Batch(2, /*final=*/true)).ok());
  }
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("table");
  absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(std::vector<std::string>(files->files().begin(), files->files().end()),
            (std::vector<std::string>{"summary.txt", "summary.csv", "summary.json"}));
  ASSERT_NE(files->summary_text().find("aten::mul"), std::string::npos) << files->summary_text();

  auto read = [&](const std::string& name) {
    std::ifstream in(started->output_dir() + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(read("summary.txt"), files->summary_text());
  // And `nrtprof summary DIR`, which prints the table again from summary.json.
  absl::StatusOr<Summary> from_json = ParseSummaryJson(read("summary.json"));
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(FormatSummary(*from_json), files->summary_text());
}

// A capture that names its files is written by the sink made for those kinds; one that names
// none, by the core's. A kind the daemon does not know, or a daemon that cannot choose, is
// refused before anything starts.
TEST_F(CollectorCoreTest, ACaptureThatNamesItsFilesGetsASinkForThem) {
  // The capture owns the sink made for it, and frees it with itself: this one hands on to a
  // FakeSink the test keeps.
  class HandsOn : public TraceSink {
   public:
    explicit HandsOn(TraceSink* to) : to_(to) {}
    absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                       std::vector<std::string>* files) override {
      return to_->Write(trace, summary, output_dir, files);
    }

   private:
    TraceSink* to_;
  };
  std::vector<uint32_t> asked;
  FakeSink chosen_sink;
  FakeSink* chosen = &chosen_sink;
  CollectorOptions options = Options();
  options.sink_for_files = [&](uint32_t kinds) {
    asked.push_back(kinds);
    return std::unique_ptr<TraceSink>(std::make_unique<HandsOn>(&chosen_sink));
  };
  CollectorCore core(options, &sink_, &clock_);
  Controls c1;
  ASSERT_TRUE(core.OnHello(1, Hello(101), c1.Sender()).ok());

  nrtprof::StartCaptureRequest request;
  request.set_capture_id("some");
  request.add_files(nrtprof::CAPTURE_FILE_KIND_SUMMARY);
  request.add_files(nrtprof::CAPTURE_FILE_KIND_PFTRACE);
  ASSERT_TRUE(core.StartCapture(request).ok());
  EXPECT_EQ(asked, (std::vector<uint32_t>{(1u << nrtprof::CAPTURE_FILE_KIND_SUMMARY) |
                                          (1u << nrtprof::CAPTURE_FILE_KIND_PFTRACE)}));
  ASSERT_TRUE(core.OnBatch(1, Batch(1)).ok());
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("some");
  absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(chosen->traces.size(), 1u);
  EXPECT_TRUE(sink_.traces.empty());
  EXPECT_EQ(std::vector<std::string>(files->files().begin(), files->files().end()),
            (std::vector<std::string>{"fake.trace"}));

  nrtprof::StartCaptureRequest every;
  every.set_capture_id("every");
  ASSERT_TRUE(core.StartCapture(every).ok());
  EXPECT_EQ(asked.size(), 1u) << "no files named: the core's own sink";
  ASSERT_TRUE(core.OnBatch(1, Batch(2)).ok());
  stop.set_capture_id("every");
  ASSERT_TRUE(core.StopCapture(stop).ok());
  EXPECT_EQ(sink_.traces.size(), 1u);

  nrtprof::StartCaptureRequest unknown;
  unknown.add_files(static_cast<nrtprof::CaptureFileKind>(9));
  EXPECT_EQ(core.StartCapture(unknown).status().code(), absl::StatusCode::kInvalidArgument);
  unknown.set_files(0, nrtprof::CAPTURE_FILE_KIND_UNSPECIFIED);
  EXPECT_EQ(core.StartCapture(unknown).status().code(), absl::StatusCode::kInvalidArgument);
  // The fixture's core has no sink_for_files.
  EXPECT_EQ(core_.StartCapture(request).status().message(),
            "this daemon writes every file of a capture: it cannot write only some");
  EXPECT_EQ(asked.size(), 1u);
  EXPECT_TRUE(core.Status().captures().empty()) << "nothing started";
}

// A sink whose writers take a process at a time: the capture is correlated and handed over
// one process after another, in pid order, and the reply counts them all.
TEST_F(CollectorCoreTest, AStreamingSinkIsGivenOneProcessAtATime) {
  struct Seen {
    std::vector<std::vector<uint32_t>> added;  // the pids of each Add
    std::string finished;                      // the capture id Finish was given
    uint64_t summary_events = 0;
    int writes = 0;
  } seen;
  class Stream : public TraceStream {
   public:
    explicit Stream(Seen* seen) : seen_(seen) {}
    absl::Status Add(const Trace& trace) override {
      std::vector<uint32_t> pids;
      for (const ProcessTrace& p : trace.processes) pids.push_back(p.pid);
      seen_->added.push_back(pids);
      return absl::OkStatus();
    }
    absl::Status Finish(const Trace& trace, const Summary& summary,
                        std::vector<std::string>* files) override {
      seen_->finished = trace.capture_id;
      seen_->summary_events = summary.events;
      files->push_back("streamed.trace");
      return absl::OkStatus();
    }

   private:
    Seen* seen_;
  };
  class Sink : public TraceSink {
   public:
    explicit Sink(Seen* seen) : seen_(seen) {}
    absl::Status Write(const Trace&, const Summary&, const std::string&,
                       std::vector<std::string>*) override {
      ++seen_->writes;
      return absl::OkStatus();
    }
    std::unique_ptr<TraceStream> OpenStream(const std::string&) override {
      return std::make_unique<Stream>(seen_);
    }

   private:
    Seen* seen_;
  };
  Sink sink(&seen);
  CollectorCore core(Options(), &sink, &clock_);
  Controls c1, c2, c3;
  ASSERT_TRUE(core.OnHello(1, Hello(103), c1.Sender()).ok());
  ASSERT_TRUE(core.OnHello(2, Hello(101), c2.Sender()).ok());
  ASSERT_TRUE(core.OnHello(3, Hello(102), c3.Sender()).ok());
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("streamed");
  ASSERT_TRUE(core.StartCapture(request).ok());
  for (CollectorCore::StreamId s : {1, 2, 3}) {
    ASSERT_TRUE(core.OnBatch(s, Batch(1)).ok());
    ASSERT_TRUE(core.OnBatch(s, Batch(2, /*final=*/true)).ok());
  }
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("streamed");
  absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(seen.added, (std::vector<std::vector<uint32_t>>{{101}, {102}, {103}}));
  EXPECT_EQ(seen.writes, 0);
  EXPECT_EQ(seen.finished, "streamed");
  EXPECT_EQ(seen.summary_events, 12u);
  EXPECT_EQ(files->processes(), 3u);
  EXPECT_EQ(files->events(), 12u);
  ASSERT_EQ(files->files_size(), 1);
  EXPECT_EQ(files->files(0), "streamed.trace");
  EXPECT_NE(files->summary_text().find("aten::mul"), std::string::npos) << files->summary_text();
}

// A shared service (the daemon's uid is not the users'): each user's capture takes only that
// user's processes, is staged in the daemon's own folder whatever it asked, and is that user's
// alone to stop and fetch; Status shows a user only its processes. The operator sees all.
TEST_F(CollectorCoreTest, UsersOfASharedServiceSeeOnlyTheirOwn) {
  const Caller alice{1001u}, bob{1002u}, operator_caller{};
  const uint32_t daemon_uid = static_cast<uint32_t>(getuid());
  Controls a, b, o;
  ASSERT_FALSE(core_.OnHello(1, Hello(201), a.Sender(), alice)->capturing());
  ASSERT_FALSE(core_.OnHello(2, Hello(202), b.Sender(), bob)->capturing());
  // Bob's process naming alice's capture does not get into it either.
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("alices");
  request.set_output_dir("/somewhere/alice/chose");
  absl::StatusOr<nrtprof::StartCaptureReply> started = core_.StartCapture(request, alice);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(started->fetch());
  const std::string staged = absl::StrCat(Options().output_root, "/users/1001/alices");
  EXPECT_EQ(started->output_dir(), staged);
  struct stat st;
  ASSERT_EQ(stat((Options().output_root + "/users/1001").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_FALSE(core_.OnHello(3, Hello(203, "alices"), o.Sender(), bob)->capturing());
  EXPECT_TRUE(a.sent.back().capturing());
  EXPECT_FALSE(b.sent.back().capturing());

  // Status: alice sees her process only; bob his; the operator (and the daemon's uid) all.
  EXPECT_EQ(core_.Status(alice).processes_size(), 1);
  EXPECT_EQ(core_.Status(alice).processes(0).pid(), 201u);
  EXPECT_EQ(core_.Status(bob).processes_size(), 2);
  EXPECT_EQ(core_.Status(operator_caller).processes_size(), 3);
  EXPECT_EQ(core_.Status(Caller{daemon_uid}).processes_size(), 3);

  // Bob can neither stop nor fetch alice's capture; with no id, he has none to stop.
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("alices");
  absl::StatusOr<nrtprof::CaptureFiles> refused = core_.StopCapture(stop, bob);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.status().message(), "capture 'alices' is another user's; you can stop only your own");
  EXPECT_EQ(core_.StopCapture(nrtprof::StopCaptureRequest(), bob).status().message(),
            "no capture is in progress");

  ASSERT_TRUE(core_.OnBatch(1, Batch(1)).ok());
  ASSERT_TRUE(core_.OnBatch(2, Batch(1)).ok());
  absl::StatusOr<nrtprof::CaptureFiles> files = core_.StopCapture(stop, alice);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(sink_.traces.size(), 1u);
  EXPECT_EQ(Pids(sink_.traces[0]), (std::set<uint32_t>{201}));
  EXPECT_EQ(sink_.dirs[0], staged);  // never where she asked

  EXPECT_EQ(core_.FetchableCapture("alices", bob).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<CollectorCore::Fetchable> fetchable = core_.FetchableCapture("alices", alice);
  ASSERT_TRUE(fetchable.ok()) << fetchable.status();
  EXPECT_EQ(fetchable->dir, staged);
  EXPECT_EQ(fetchable->names, std::vector<std::string>{"fake.trace"});
  EXPECT_TRUE(fetchable->staged);
  core_.FetchedCapture("alices");
  EXPECT_NE(stat(staged.c_str(), &st), 0) << "the staged copy outlived its fetch";
  EXPECT_EQ(core_.FetchableCapture("alices", alice).status().code(), absl::StatusCode::kNotFound);
}

// The operator's captures take every user's processes and stay where they were written.
// Root is the operator of a service that runs as its own user: its capture takes every
// process, but is fetched, since the daemon cannot write as root.
TEST_F(CollectorCoreTest, RootsCaptureOfAServiceTakesEveryoneAndIsFetched) {
  CollectorOptions options = Options();
  options.daemon_uid = 4242;
  CollectorCore core(options, &sink_, &clock_);
  Controls a, b;
  ASSERT_FALSE(core.OnHello(1, Hello(201), a.Sender(), Caller{1001u})->capturing());
  ASSERT_FALSE(core.OnHello(2, Hello(202), b.Sender(), Caller{1002u})->capturing());
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("roots");
  absl::StatusOr<nrtprof::StartCaptureReply> started = core.StartCapture(request, Caller{0u});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(started->fetch());
  EXPECT_EQ(started->output_dir(), options.output_root + "/users/0/roots");
  ASSERT_TRUE(core.OnBatch(1, Batch(1)).ok());
  ASSERT_TRUE(core.OnBatch(2, Batch(1)).ok());
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("roots");
  ASSERT_TRUE(core.StopCapture(stop, Caller{0u}).ok());
  EXPECT_EQ(Pids(sink_.traces.back()), (std::set<uint32_t>{201, 202}));
  EXPECT_TRUE(core.FetchableCapture("roots", Caller{0u}).ok());
  EXPECT_EQ(core.FetchableCapture("roots", Caller{1001u}).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CollectorCoreTest, TheOperatorsCaptureTakesEveryone) {
  Controls a, b;
  ASSERT_FALSE(core_.OnHello(1, Hello(201), a.Sender(), Caller{1001u})->capturing());
  ASSERT_FALSE(core_.OnHello(2, Hello(202), b.Sender(), Caller{1002u})->capturing());
  const nrtprof::StartCaptureReply reply = Start("ops");
  EXPECT_FALSE(reply.fetch());
  ASSERT_TRUE(core_.OnBatch(1, Batch(1)).ok());
  ASSERT_TRUE(core_.OnBatch(2, Batch(1)).ok());
  ASSERT_TRUE(Stop("ops").ok());
  EXPECT_EQ(Pids(sink_.traces[0]), (std::set<uint32_t>{201, 202}));
  EXPECT_EQ(core_.FetchableCapture("ops", Caller{1001u}).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<CollectorCore::Fetchable> f = core_.FetchableCapture("ops", Caller{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->staged);
}

// An operator on another machine asks to fetch the files: the capture is written in the
// daemon's own folder (not where output_dir says), and removed once fetched.
TEST_F(CollectorCoreTest, AnOperatorsCaptureForFetchingIsRemovedOnceFetched) {
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("remote");
  request.set_output_dir("/not/on/this/machine");
  request.set_fetch(true);
  absl::StatusOr<nrtprof::StartCaptureReply> started = core_.StartCapture(request, Caller{});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(started->fetch());
  const std::string dir = Options().output_root + "/remote";
  EXPECT_EQ(started->output_dir(), dir);
  ASSERT_TRUE(Stop("remote").ok());
  absl::StatusOr<CollectorCore::Fetchable> f = core_.FetchableCapture("remote", Caller{});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->staged);
  core_.FetchedCapture("remote");
  struct stat st;
  EXPECT_NE(stat(dir.c_str(), &st), 0) << "the daemon's copy outlived its fetch";
}

// A start time ahead: StartCapture returns when the clock reads it, and processes are told
// to record then, not before; one more than a minute ahead is refused.
TEST_F(CollectorCoreTest, ACaptureStartsAtTheTimeItNames) {
  Controls c;
  ASSERT_FALSE(core_.OnHello(1, Hello(7), c.Sender())->capturing());
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("later");
  request.set_start_monotonic_ns(5'000'000'000);
  auto started = std::async(std::launch::async, [&] { return core_.StartCapture(request); });
  clock_.AwaitWaits(1);
  EXPECT_FALSE(c.sent.back().capturing()) << "told to record before the start";
  clock_.Advance(5'000'000'000);
  absl::StatusOr<nrtprof::StartCaptureReply> reply = started.get();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->started_monotonic_ns(), 5'000'000'000u);
  EXPECT_TRUE(c.sent.back().capturing());
  EXPECT_EQ(core_.Status().captures(0).running_ms(), 0u) << "its window began at the start";

  request.set_capture_id("too-late");
  request.set_start_monotonic_ns(clock_.MonotonicNs() + 61'000'000'000);
  EXPECT_EQ(core_.StartCapture(request).status().message(),
            "the start time is 61.000 s ahead of this daemon's clock; at most 60 s");
}

// A capture a trigger rule took (daemon/trigger_captures.h): the Trace written carries the rule
// and, from the anomaly's wall-clock time (the asking daemon's: a peer's clock differs), when it
// began on this daemon's monotonic clock, for trace.pftrace's instant.
TEST_F(CollectorCoreTest, ATriggersAnomalyIsPlacedOnThisDaemonsClock) {
  clock_.Advance(7'000'000'000);
  Controls c;
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c.Sender()).ok());
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("triggered");
  nrtprof::CaptureTrigger* why = request.mutable_trigger();
  why->set_rule("slow-step");
  why->set_condition("slow-step: step > 3 x median");
  why->set_reason("pid 7 (x): step 3 took 4.0x the median of the last 20 (8 ms vs 2 ms)");
  why->set_value_ns(8'000'000);
  why->set_threshold_ns(6'000'000);
  // 2023-11-14 22:13:23.250 UTC: monotonic 3.25 s on the fixture's clock.
  why->set_unix_ms(1'700'000'003'250);
  ASSERT_TRUE(core_.StartCapture(request).ok());
  ASSERT_TRUE(core_.OnBatch(1, Batch(1)).ok());
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("triggered");
  ASSERT_TRUE(core_.StopCapture(stop).ok());
  ASSERT_EQ(sink_.traces.size(), 1u);
  const TriggerReason& got = sink_.traces[0].trigger;
  EXPECT_EQ(got.rule, "slow-step");
  EXPECT_EQ(got.reason, why->reason());
  EXPECT_EQ(got.value_ns, 8'000'000u);
  EXPECT_EQ(got.threshold_ns, 6'000'000u);
  EXPECT_EQ(got.at_ns, 3'250'000'000u);

  // Asked by a daemon that does not say when: no time, the instant goes to the trace's start.
  request.set_capture_id("untimed");
  request.mutable_trigger()->clear_unix_ms();
  ASSERT_TRUE(core_.StartCapture(request).ok());
  ASSERT_TRUE(core_.OnBatch(1, Batch(2)).ok());
  stop.set_capture_id("untimed");
  ASSERT_TRUE(core_.StopCapture(stop).ok());
  ASSERT_EQ(sink_.traces.size(), 2u);
  EXPECT_EQ(sink_.traces[1].trigger.rule, "slow-step");
  EXPECT_EQ(sink_.traces[1].trigger.at_ns, 0u);
}

// The daemon stopping while a capture waits for its start time: the wait ends, refused.
TEST_F(CollectorCoreTest, ShutdownEndsTheWaitForAStartTime) {
  nrtprof::StartCaptureRequest request;
  request.set_start_monotonic_ns(30'000'000'000);
  auto started = std::async(std::launch::async, [&] { return core_.StartCapture(request); });
  clock_.AwaitWaits(1);
  EXPECT_TRUE(core_.Shutdown(0).ok());
  EXPECT_EQ(started.get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(clock_.MonotonicNs(), 0u);
}

// Two daemons (two cores here) writing captures in one folder: ids they pick in the same
// second differ, and a folder a capture is writing is refused to another until it is written;
// a folder claimed by a daemon that died is taken over.
TEST_F(CollectorCoreTest, ACaptureFolderIsOneCapturesAtATime) {
  CollectorCore other(Options(), &sink_, &clock_);
  const absl::StatusOr<nrtprof::StartCaptureReply> a =
      core_.StartCapture(nrtprof::StartCaptureRequest());
  const absl::StatusOr<nrtprof::StartCaptureReply> b =
      other.StartCapture(nrtprof::StartCaptureRequest());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(a->capture_id(), "20231114-221320");
  EXPECT_EQ(b->capture_id(), "20231114-221320-2");

  nrtprof::StartCaptureRequest same;
  same.set_output_dir(Options().output_root + "/shared");
  same.set_capture_id("first");
  ASSERT_TRUE(core_.StartCapture(same).ok());
  same.set_capture_id("second");
  const absl::StatusOr<nrtprof::StartCaptureReply> refused = other.StartCapture(same);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat(same.output_dir(), " is in use by capture 'first' of nrtprofd (pid ",
                         getpid(), "); choose another folder, or wait for it"));
  // Written (this test's sink writes no trace.pftrace there), the folder is free again.
  ASSERT_TRUE(Stop("first").ok());
  EXPECT_TRUE(other.StartCapture(same).ok());

  // A claim left by a daemon that died (a pid no process has) is taken over.
  const std::string stale = Options().output_root + "/stale";
  ASSERT_EQ(mkdir(stale.c_str(), 0750), 0);
  FILE* f = fopen((stale + "/.nrtprof-capture-in-progress").c_str(), "w");
  fprintf(f, "nrtprofd 4194304 capture old\n");  // above the kernel's pid limit
  fclose(f);
  nrtprof::StartCaptureRequest take_over;
  take_over.set_output_dir(stale);
  take_over.set_capture_id("new");
  EXPECT_TRUE(other.StartCapture(take_over).ok());
}

TEST_F(CollectorCoreTest, StopWaitsForTheFinalBatch) {
  Controls c;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c.Sender())->capturing());
  ASSERT_TRUE(core_.OnBatch(1, Batch(1)).ok());
  auto stopped = std::async(std::launch::async, [&] { return Stop("cap", 60'000); });
  clock_.AwaitWaits(1);  // StopCapture is waiting
  EXPECT_FALSE(c.sent.back().capturing());
  // The process flushes and exits: its last batch still makes it into the capture.
  ASSERT_TRUE(core_.OnBatch(1, Batch(2, /*final=*/true)).ok());
  absl::StatusOr<nrtprof::CaptureFiles> files = stopped.get();
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(clock_.MonotonicNs(), 0u);  // no time passed: it did not time out
  EXPECT_EQ(files->events(), 4u);
  EXPECT_EQ(sink_.traces[0].processes[0].calls.size(), 2u);
}

// A process that goes on running answers the stop's flush with what it recorded up to the
// stop: the stop waits for that, not for the process's end nor for wait_ms.
TEST_F(CollectorCoreTest, StopWaitsForEachRunningProcesssFlush) {
  Controls c1, c2;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c1.Sender())->capturing());
  ASSERT_TRUE(core_.OnHello(2, Hello(8), c2.Sender())->capturing());
  auto stopped = std::async(std::launch::async, [&] { return Stop("cap", 60'000); });
  clock_.AwaitWaits(1);
  const nrtprof::CaptureControl stop = c1.sent.back();
  EXPECT_NE(stop.flush(), 0u);
  EXPECT_EQ(c2.sent.back().flush(), stop.flush());
  nrtprof::EventBatch answer = Batch(1);
  answer.set_flushed(stop.flush());
  ASSERT_TRUE(core_.OnBatch(1, answer).ok());
  clock_.AwaitWaits(2);  // woken, and waiting again for the second
  // A batch sent before the second process had the stop: the stop goes on waiting for it.
  ASSERT_TRUE(core_.OnBatch(2, Batch(1)).ok());
  answer = Batch(2);
  answer.set_flushed(stop.flush());
  ASSERT_TRUE(core_.OnBatch(2, answer).ok());
  absl::StatusOr<nrtprof::CaptureFiles> files = stopped.get();
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(clock_.MonotonicNs(), 0u) << "no time passed: it did not time out";
  EXPECT_EQ(files->events(), 6u);
  // The next stop asks anew.
  Start("cap2");
  auto next = std::async(std::launch::async, [&] { return Stop("cap2", 60'000); });
  clock_.AwaitWaits(3);
  EXPECT_GT(c1.sent.back().flush(), stop.flush());
  answer = Batch(2);
  answer.set_flushed(c1.sent.back().flush());
  ASSERT_TRUE(core_.OnBatch(1, answer).ok());
  answer = Batch(3);
  answer.set_flushed(c1.sent.back().flush());
  ASSERT_TRUE(core_.OnBatch(2, answer).ok());
  ASSERT_TRUE(next.get().ok());
}

TEST_F(CollectorCoreTest, StopGivesUpAfterWaitMs) {
  Controls c;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c.Sender())->capturing());
  ASSERT_TRUE(core_.OnBatch(1, Batch(1)).ok());
  auto stopped = std::async(std::launch::async, [&] { return Stop("cap", 2000); });
  clock_.AwaitWaits(1);
  clock_.Advance(1'999'000'000);  // not yet
  clock_.AwaitWaits(2);
  clock_.Advance(1'000'000);
  absl::StatusOr<nrtprof::CaptureFiles> files = stopped.get();
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->events(), 2u);
  // The process is still connected, in no capture; later events are not kept for anyone.
  ASSERT_TRUE(core_.OnBatch(1, Batch(2)).ok());
  EXPECT_EQ(core_.Status().processes(0).capture_id(), "");
}

// Status gives each process its rank as top has it: its environment's (Hello.rank), else its
// command line's (--rank N), else none.
TEST_F(CollectorCoreTest, StatusGivesEachProcessItsRank) {
  Controls c1, c2, c3;
  nrtprof::Hello from_environment = Hello(301);
  from_environment.set_rank(3);
  from_environment.add_command_line("train");
  from_environment.add_command_line("--rank=9");  // the environment's comes first
  nrtprof::Hello from_command_line = Hello(302);
  from_command_line.add_command_line("train");
  from_command_line.add_command_line("--rank");
  from_command_line.add_command_line("7");
  ASSERT_TRUE(core_.OnHello(1, from_environment, c1.Sender()).ok());
  ASSERT_TRUE(core_.OnHello(2, from_command_line, c2.Sender()).ok());
  ASSERT_TRUE(core_.OnHello(3, Hello(303), c3.Sender()).ok());
  std::map<uint32_t, int> ranks;
  const nrtprof::StatusReply status = core_.Status();
  for (const nrtprof::ConnectedProcess& p : status.processes()) {
    ranks[p.pid()] = p.has_rank() ? p.rank() : -1;
  }
  EXPECT_EQ(ranks, (std::map<uint32_t, int>{{301, 3}, {302, 7}, {303, -1}}));
}

TEST_F(CollectorCoreTest, AClosedStreamCountsAsDone) {
  Controls c1, c2;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c1.Sender())->capturing());
  ASSERT_TRUE(core_.OnHello(2, Hello(8), c2.Sender())->capturing());
  ASSERT_TRUE(core_.OnBatch(1, Batch(1)).ok());
  ASSERT_TRUE(core_.OnBatch(2, Batch(1, /*final=*/true)).ok());
  core_.OnStreamClosed(2);
  auto stopped = std::async(std::launch::async, [&] { return Stop("cap", 60'000); });
  clock_.AwaitWaits(1);
  core_.OnStreamClosed(1);  // crashed without a final batch
  absl::StatusOr<nrtprof::CaptureFiles> files = stopped.get();
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Pids(sink_.traces[0]), (std::set<uint32_t>{7, 8}));
  // The crashed one is marked: what it never sent is missing, and the table says so.
  for (const ProcessTrace& p : sink_.traces[0].processes) {
    EXPECT_EQ(p.cut_off, p.pid == 7) << p.pid;
  }
  EXPECT_NE(files->summary_text().find("Processes cut off: 1 ended before their last events"),
            std::string::npos)
      << files->summary_text();
}

// A stream that broke before its acks arrived: the shim resends on a new stream what was not
// acknowledged. The daemon says at once how far it has the process, keeps nothing twice, and
// takes the strings the resent batch carries for the new stream's later batches.
// `batch`, with the shim's count of events sent so far (Batch()'s: a range and a call each).
nrtprof::EventBatch Sent(nrtprof::EventBatch batch, uint64_t batches_so_far) {
  batch.mutable_events_sent()->set_framework(batches_so_far);
  batch.mutable_events_sent()->set_runtime(batches_so_far);
  return batch;
}

nrtprof::EventBatch RingFull(nrtprof::EventBatch batch, uint64_t calls) {
  batch.mutable_drops()->set_ring_full(calls);
  batch.mutable_drops()->mutable_by_lane()->set_runtime(calls);
  return batch;
}

TEST_F(CollectorCoreTest, AProcessBackOnANewStreamIsNotStoredTwice) {
  Controls c1, c2;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c1.Sender())->capturing());
  ASSERT_EQ(core_.StoredSequence(1), 0u);
  ASSERT_EQ(core_.OnBatch(1, RingFull(Sent(Batch(1), 1), 2)).value(), 1u);
  core_.OnStreamClosed(1);  // the ack of batch 1 was lost with the stream

  ASSERT_TRUE(core_.OnHello(2, Hello(7), c2.Sender())->capturing());
  EXPECT_EQ(core_.StoredSequence(2), 1u);
  EXPECT_EQ(core_.OnBatch(2, RingFull(Sent(Batch(1), 1), 2)).value(), 1u)
      << "resent: a duplicate";
  EXPECT_EQ(core_.OnBatch(2, RingFull(Sent(Batch(2, /*final=*/true), 2), 2)).value(), 2u);
  absl::StatusOr<nrtprof::CaptureFiles> files = Stop("cap");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(sink_.traces[0].processes.size(), 1u);
  const ProcessTrace& p = sink_.traces[0].processes[0];
  EXPECT_EQ(p.calls.size(), 2u) << "batch 1 once, batch 2 once";
  EXPECT_EQ(p.ranges.size(), 2u);
  EXPECT_EQ(p.batches_missing, 0u);
  EXPECT_FALSE(p.cut_off);
  // The shim's counters are the process's: both streams said 2, and 2 were lost, not 4.
  EXPECT_EQ(p.drops.ring_full, 2u);
  EXPECT_EQ(p.drops.by_lane.runtime, 2u);
  EXPECT_EQ(p.drops.total(), 2u);
  EXPECT_EQ(DroppedInStatus("ring_full"), 2u) << "the daemon's totals count them once too";

  // Another process with the same pid (another start time) starts afresh.
  Controls c3;
  nrtprof::Hello other = Hello(7);
  other.set_process_start_ns(123);
  ASSERT_TRUE(core_.OnHello(3, other, c3.Sender()).ok());
  EXPECT_EQ(core_.StoredSequence(3), 0u);
}

TEST_F(CollectorCoreTest, AFinalBatchThatCameAloneCountsWhatNeverArrived) {
  Controls c1, c2;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c1.Sender())->capturing());
  ASSERT_TRUE(core_.OnBatch(1, Sent(Batch(1), 1)).ok());
  ASSERT_TRUE(core_.OnBatch(1, RingFull(Sent(Batch(2), 2), 3)).ok());
  // Batches 3 and 4 are stuck in stream 1 when the process exits; its final batch comes alone,
  // event-less, on a stream of its own.
  nrtprof::Hello alone = Hello(7);
  alone.set_final_only(true);
  ASSERT_TRUE(core_.OnHello(2, alone, c2.Sender())->capturing());
  nrtprof::EventBatch final_batch;
  final_batch.set_sequence(5);
  final_batch.set_final(true);
  ASSERT_EQ(core_.OnBatch(2, RingFull(Sent(final_batch, 4), 3)).value(), 5u);
  core_.OnStreamClosed(2);
  core_.OnStreamClosed(1);
  absl::StatusOr<nrtprof::CaptureFiles> files = Stop("cap");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(sink_.traces[0].processes.size(), 1u);
  const ProcessTrace& p = sink_.traces[0].processes[0];
  EXPECT_EQ(p.calls.size(), 2u);
  EXPECT_FALSE(p.cut_off) << "its final batch came";
  EXPECT_EQ(p.batches_missing, 0u) << "the final batch's stream misses nothing of its own";
  // Batches 3 and 4: 2 ranges and 2 calls sent, never received, counted; the ring's 3 once.
  EXPECT_EQ(p.drops.daemon_away, 4u);
  EXPECT_EQ(p.drops.ring_full, 3u);
  EXPECT_EQ(p.drops.by_lane.framework, 2u);
  EXPECT_EQ(p.drops.by_lane.runtime, 2u + 3u);
  EXPECT_EQ(p.drops.by_lane.total(), p.drops.total());
  // What a user checks: calls in the trace + calls counted lost = calls made (2 + 2 + 3).
  EXPECT_EQ(p.calls.size() + p.drops.by_lane.runtime, 7u);
  EXPECT_EQ(DroppedInStatus("ring_full"), 3u);
  EXPECT_EQ(core_.Status().final_batches_alone(), 1u);
}

TEST_F(CollectorCoreTest, AnUnusedStreamForTheFinalBatchChangesNothing) {
  Controls c1, c2;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c1.Sender())->capturing());
  // Opened at exit in case the final batch had to go alone; the first stream caught up.
  nrtprof::Hello alone = Hello(7);
  alone.set_final_only(true);
  ASSERT_TRUE(core_.OnHello(2, alone, c2.Sender()).ok());
  ASSERT_TRUE(core_.OnBatch(1, Sent(Batch(1), 1)).ok());
  ASSERT_TRUE(core_.OnBatch(1, Sent(Batch(3, /*final=*/true), 3)).ok());  // batch 2 lost
  core_.OnStreamClosed(2);
  core_.OnStreamClosed(1);
  EXPECT_EQ(core_.Status().final_batches_alone(), 0u);
  ASSERT_TRUE(Stop("cap").ok());
  ASSERT_EQ(sink_.traces[0].processes.size(), 1u);
  const ProcessTrace& p = sink_.traces[0].processes[0];
  EXPECT_FALSE(p.cut_off);
  EXPECT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.drops.daemon_away, 2u) << "batch 2's range and call, sent and never received";
  EXPECT_EQ(p.drops.by_lane.runtime, 1u);
}

TEST_F(CollectorCoreTest, OutputFolders) {
  // Generated id from the clock, folder under the output root, made 0750.
  nrtprof::StartCaptureReply reply = Start("");
  EXPECT_EQ(reply.capture_id(), "20231114-221320");
  EXPECT_EQ(reply.output_dir(), Options().output_root + "/20231114-221320");
  struct stat st;
  ASSERT_EQ(stat(reply.output_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  // A second one in the same second gets a suffix.
  EXPECT_EQ(Start("").capture_id(), "20231114-221320-2");

  // A folder that already holds a capture is refused; one with other files is fine.
  const std::string used = TempDir("used");
  mkdir(used.c_str(), 0700);
  std::ofstream(used + "/notes.txt") << "mine";
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("x");
  request.set_output_dir(used);
  ASSERT_TRUE(core_.StartCapture(request).ok());
  ASSERT_TRUE(Stop("x").ok());
  std::ofstream(used + "/trace.pftrace") << "old";
  request.set_capture_id("y");
  absl::StatusOr<nrtprof::StartCaptureReply> again = core_.StartCapture(request);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("already holds a capture"), std::string::npos);
  // The refused capture left nothing behind: its id is free.
  request.set_output_dir("");
  EXPECT_TRUE(core_.StartCapture(request).ok());
}

TEST_F(CollectorCoreTest, StartCaptureRefusesBadRequests) {
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("../escape");
  EXPECT_EQ(core_.StartCapture(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_capture_id("ok");
  request.set_output_dir("relative/dir");
  EXPECT_EQ(core_.StartCapture(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_output_dir("/proc/nrtprof-cannot-be-made");
  absl::StatusOr<nrtprof::StartCaptureReply> denied = core_.StartCapture(request);
  EXPECT_FALSE(denied.ok());
  EXPECT_NE(denied.status().message().find("/proc/nrtprof-cannot-be-made"), std::string::npos);
  Start("ok");
  request.set_output_dir("");
  EXPECT_EQ(core_.StartCapture(request).status().code(), absl::StatusCode::kAlreadyExists);
}

// Nothing a client sends becomes a path outside the folder it names: capture ids that would
// climb out of the output root, and output folders a NUL would cut short or '..' would move,
// are refused with one line, and nothing is made.
TEST_F(CollectorCoreTest, StartCaptureRefusesNamesThatEscape) {
  const std::string nul("a\0b", 3);
  for (const std::string& id :
       {std::string("../up"), std::string(".."), std::string("/etc"), std::string("a/b"), nul,
        std::string(".hidden"), std::string("-flag"), std::string("new\nline"),
        std::string(129, 'x')}) {
    nrtprof::StartCaptureRequest request;
    request.set_capture_id(id);
    absl::StatusOr<nrtprof::StartCaptureReply> refused = core_.StartCapture(request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << id;
    const std::string message(refused.status().message());
    EXPECT_EQ(message.rfind("capture id '", 0), 0u) << message;
    EXPECT_NE(message.find("must be 1 to 128 letters"), std::string::npos) << message;
    EXPECT_EQ(message.find_first_of(std::string("\n\0", 2)), std::string::npos) << message;
  }
  const std::string root = Options().output_root;
  for (auto [dir, why] : std::vector<std::pair<std::string, std::string>>{
           {root + "/x" + nul, "holds a NUL or control character"},
           {root + "/x\n", "holds a NUL or control character"},
           {root + "/../escape", "has a '..' component"},
           {root + "/./x", "has a '.' component"},
           {"relative/../x", "is relative"},
           {"/" + std::string(5000, 'd'), "is longer than 4095 bytes"}}) {
    nrtprof::StartCaptureRequest request;
    request.set_capture_id("ok");
    request.set_output_dir(dir);
    absl::StatusOr<nrtprof::StartCaptureReply> refused = core_.StartCapture(request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << dir;
    const std::string message(refused.status().message());
    EXPECT_NE(message.find(why), std::string::npos) << message;
    EXPECT_EQ(message.find_first_of(std::string("\n\0", 2)), std::string::npos) << message;
    EXPECT_LT(message.size(), 400u);
  }
  struct stat st;
  EXPECT_NE(stat((root + "/x").c_str(), &st), 0);
  EXPECT_NE(stat((root + "/../escape").c_str(), &st), 0);
  EXPECT_NE(stat((root + "/ok").c_str(), &st), 0);
  // The refusals reserved nothing: the id is free.
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("ok");
  EXPECT_TRUE(core_.StartCapture(request).ok());
}

TEST_F(CollectorCoreTest, StopCaptureNamesWhichOne) {
  EXPECT_EQ(Stop("").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Stop("nope").status().code(), absl::StatusCode::kNotFound);
  Start("a");
  ASSERT_TRUE(Stop("").ok());  // the only one
  Start("b");
  Start("c");
  absl::StatusOr<nrtprof::CaptureFiles> which = Stop("");
  EXPECT_EQ(which.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(which.status().message().find("b, c"), std::string::npos) << which.status();
}

TEST_F(CollectorCoreTest, StreamErrors) {
  Controls c;
  EXPECT_EQ(core_.OnBatch(1, Batch(1)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.OnHello(1, nrtprof::Hello(), c.Sender()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c.Sender()).ok());
  EXPECT_EQ(core_.OnHello(1, Hello(7), c.Sender()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  nrtprof::EventBatch bad = Batch(1);
  bad.mutable_events(0)->set_name_iid(77);
  EXPECT_EQ(core_.OnBatch(1, bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.OnBatch(1, Batch(1)).value(), 1u);  // the stream's state is untouched
}

TEST_F(CollectorCoreTest, SinkErrorsAreReported) {
  sink_.fail = absl::PermissionDeniedError("disk says no");
  Start("cap");
  absl::StatusOr<nrtprof::CaptureFiles> files = Stop("cap");
  EXPECT_EQ(files.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(files.status().message().find("disk says no"), std::string::npos);
  EXPECT_EQ(core_.Status().captures_written(), 0u);
}

TEST_F(CollectorCoreTest, ShutdownWritesCapturesInProgressAndRefusesNewOnes) {
  Controls c;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c.Sender()).ok());
  ASSERT_TRUE(core_.OnBatch(1, Batch(1, /*final=*/true)).ok());
  ASSERT_TRUE(core_.Shutdown(1000).ok());
  ASSERT_EQ(sink_.traces.size(), 1u);
  EXPECT_EQ(sink_.traces[0].capture_id, "cap");
  nrtprof::StartCaptureRequest request;
  EXPECT_EQ(core_.StartCapture(request).status().code(), absl::StatusCode::kUnavailable);
}

// The process's resident memory (VmRSS), in KiB.
uint64_t ResidentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

// Page faults of the process so far.
uint64_t MinorFaults() {
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_minflt);
}

// `n` batches of one process, each `per_batch` ranges with a call in each (as Batch's); the
// last one final.
std::vector<nrtprof::EventBatch> ManyBatches(int n, int per_batch) {
  std::vector<nrtprof::EventBatch> batches;
  uint64_t ts = 1000;
  for (int b = 1; b <= n; ++b) {
    nrtprof::EventBatch batch = Batch(b, /*final=*/b == n);
    for (int i = 1; i < per_batch; ++i) {
      ts += 1000;
      nrtprof::Event* r = batch.add_events();
      *r = batch.events(0);
      r->set_start_ns(ts);
      nrtprof::Event* c = batch.add_events();
      *c = batch.events(1);
      c->set_start_ns(ts + 100);
      c->set_correlation_id(static_cast<uint64_t>(b) << 32 | i);
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

// A standing daemon keeps a capture's memory for its next capture, which then faults in far
// fewer pages, and gives it back once no capture has been written for kIdleMemoryNs (nrtprofd
// asks every kIdleMemoryPollNs): its resident memory is then what it was before the captures.
TEST_F(CollectorCoreTest, ACapturesMemoryGoesBackOnceNoCaptureWasWrittenForABound) {
  if (dlsym(RTLD_DEFAULT, "__tsan_init") != nullptr ||
      dlsym(RTLD_DEFAULT, "__asan_init") != nullptr) {
    GTEST_SKIP() << "a sanitizer's allocator decides when memory goes back, not malloc_trim";
  }
  class DiscardingSink : public TraceSink {
   public:
    absl::Status Write(const Trace&, const Summary&, const std::string&,
                       std::vector<std::string>* files) override {
      files->push_back("discarded.trace");
      return absl::OkStatus();
    }
  } sink;
  CollectorOptions options = Options();
  options.limits.max_events_per_process = 1'000'000;
  CollectorCore core(options, &sink, &clock_);
  const std::vector<nrtprof::EventBatch> batches = ManyBatches(/*n=*/40, /*per_batch=*/5000);
  const uint64_t before_kib = ResidentKiB();
  uint64_t faults[2] = {};
  for (int i = 0; i < 2; ++i) {
    const uint64_t faults_before = MinorFaults();
    Controls controls;
    ASSERT_TRUE(core.OnHello(i + 1, Hello(100 + i), controls.Sender()).ok());
    const std::string id = absl::StrCat("capture", i);
    nrtprof::StartCaptureRequest request;
    request.set_capture_id(id);
    ASSERT_TRUE(core.StartCapture(request).ok());
    for (const nrtprof::EventBatch& b : batches) ASSERT_TRUE(core.OnBatch(i + 1, b).ok());
    nrtprof::StopCaptureRequest stop;
    stop.set_capture_id(id);
    absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
    ASSERT_TRUE(files.ok()) << files.status();
    ASSERT_EQ(files->events(), 400'000u);
    core.OnStreamClosed(i + 1);
    faults[i] = MinorFaults() - faults_before;
    clock_.Advance(CollectorCore::kIdleMemoryNs - 1);
    EXPECT_FALSE(core.ReleaseIdleMemory()) << "capture " << i;
  }
  const uint64_t held_kib = ResidentKiB();
  ASSERT_GT(held_kib, before_kib + (16 << 10)) << "the captures took little memory";
  EXPECT_LT(faults[1], faults[0] / 2) << "the second capture did not reuse the first's pages";
  clock_.Advance(1);
  EXPECT_TRUE(core.ReleaseIdleMemory());
  EXPECT_LT(ResidentKiB(), before_kib + (8 << 10))
      << "the captures held " << held_kib - before_kib << " KiB";
  EXPECT_EQ(HugePageReuseBytes(), 0u);
}

}  // namespace
}  // namespace nrtprof::daemon
