// The shim as a user meets it: real programs run with LD_PRELOAD=libnrtprof_shim.so against a
// fake Collector on a unix socket. Each test checks what the daemon would receive and that
// the program behaved exactly as without the shim.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "common/spool_file.h"
#include "shim/testing/fake_collector.h"
#include "shim/testing/subprocess.h"

namespace nrtprof::shim::testing {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

constexpr auto kRunTimeout = std::chrono::seconds(60);
constexpr auto kStreamTimeout = std::chrono::seconds(20);

using ::nrtprof::testing::ReadFile;  // common/testing/spawn.h

size_t Count(const std::vector<std::pair<std::string, nrtprof::Event>>& events,
             const std::string& name) {
  return std::count_if(events.begin(), events.end(),
                       [&](const auto& e) { return e.first == name; });
}

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A unix socket path must stay under 108 bytes: this folder may be in /tmp, not
    // TEST_TMPDIR, and is removed when the test ends.
    socket_folder_ = std::make_unique<nrtprof::testing::SocketFolder>("nrtprof-shim-test");
    ASSERT_FALSE(socket_folder_->path().empty());
    socket_ = socket_folder_->path() + "/c" + std::to_string(counter_++) + ".sock";
    shim_ = Runfile("shim/libnrtprof_shim.so");
    libnrt_ = Runfile("sim/libnrt.so.1");
  }

  void StartCollector(FakeCollector::Options options = {}) {
    collector_ = std::make_unique<FakeCollector>(socket_, std::move(options));
  }

  // The environment of a profiled run: the shim preloaded, the fake daemon's address, no
  // other NRTPROF_* from the test's own environment.
  EnvChanges Profiled(EnvChanges extra = {}) {
    EnvChanges env = Plain();
    env["LD_PRELOAD"] = shim_;
    env["NRTPROF_ADDR"] = "unix:" + socket_;
    for (auto& [k, v] : extra) env[k] = v;
    return env;
  }

  static EnvChanges Plain() {
    EnvChanges env;
    for (const char* name :
         {"NRTPROF_ADDR", "NRTPROF_CAPTURE", "NRTPROF_STACKS", "NRTPROF_MODE",
          "NRTPROF_RING_EVENTS", "NRTPROF_FLUSH_TIMEOUT_MS", "NRTPROF_DISABLE",
          "NRTPROF_MAX_MODEL_BYTES", "LD_PRELOAD"}) {
      env[name] = std::nullopt;
    }
    env["NRT_SIM_TIME_SCALE"] = "0";
    return env;
  }

  std::vector<std::string> Rmsnorm(int iters = 3) {
    return {Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", std::to_string(iters)};
  }

  // The one stream a profiled run sent, once it has ended.
  RecordedStream OnlyStream() {
    EXPECT_TRUE(collector_->WaitForFinishedStreams(1, kStreamTimeout));
    std::vector<RecordedStream> streams = collector_->ProcessStreams(kStreamTimeout);
    EXPECT_EQ(streams.size(), 1u);
    return streams.empty() ? RecordedStream() : streams.front();
  }

  // A program's run across a daemon's restart: Rmsnorm(iters) under `env` at
  // NRT_SIM_TIME_SCALE=1; once the fake daemon has 12 batches (past the model files) it goes
  // away, for `away`, and a new one takes the socket. Each daemon saw one stream of it.
  struct Restarted {
    ProcessResult run;
    RecordedStream before, after;
  };
  void RunAcrossARestart(EnvChanges env, int iters, std::chrono::milliseconds away,
                         Restarted* out) {
    StartCollector();
    env["NRT_SIM_TIME_SCALE"] = "1";
    // Batches of 100 ms, not the default 500: a dozen of them before the restart.
    env["NRTPROF_BATCH_MS"] = "100";
    std::thread program([&] { out->run = RunProcess(Rmsnorm(iters), env, kRunTimeout); });
    const bool started = collector_->WaitForBatches(12, kStreamTimeout);
    std::unique_ptr<FakeCollector> first = std::move(collector_);
    first->Stop();
    std::this_thread::sleep_for(away);
    StartCollector();
    program.join();
    ASSERT_TRUE(started);
    ASSERT_EQ(out->run.exit_code, 0) << out->run.err;
    ASSERT_TRUE(collector_->WaitForFinishedStreams(1, kStreamTimeout));
    const std::vector<RecordedStream> before = first->ProcessStreams(kStreamTimeout);
    const std::vector<RecordedStream> after = collector_->ProcessStreams(kStreamTimeout);
    ASSERT_EQ(before.size(), 1u);
    ASSERT_EQ(after.size(), 1u);
    out->before = before[0];
    out->after = after[0];
    ExpectWellFormed(out->after);
    EXPECT_TRUE(out->after.last_batch()->final());
  }

  // Checks the wire-format rules every stream must keep. `final_sent`: the stream was not
  // stopped at its bound of unacknowledged batches, so its last batch is the final one.
  static void ExpectWellFormed(const RecordedStream& stream, bool final_sent = true) {
    ASSERT_NE(stream.hello(), nullptr) << "the first message must be the Hello";
    const auto batches = stream.batches();
    ASSERT_FALSE(batches.empty());
    std::set<uint32_t> seen_strings, seen_stacks;
    // Sequences are the process's: a stream after a broken one goes on from where that one
    // was acknowledged.
    const uint64_t first = batches[0]->sequence();
    EXPECT_GE(first, 1u);
    for (size_t i = 0; i < batches.size(); ++i) {
      EXPECT_EQ(batches[i]->sequence(), first + i) << "sequence numbers with no gaps";
      EXPECT_EQ(batches[i]->final(), final_sent && i + 1 == batches.size())
          << "only the last batch is final";
      for (const auto& s : batches[i]->strings()) {
        EXPECT_TRUE(seen_strings.insert(s.iid()).second) << "string " << s.iid() << " sent twice";
      }
      for (const auto& s : batches[i]->stacks()) seen_stacks.insert(s.iid());
      // Every id an event uses was carried by this batch or an earlier one.
      for (const auto& e : batches[i]->events()) {
        for (uint32_t iid : {e.name_iid(), e.model_name_iid(), e.engine_iid(),
                             e.tensor_name_iid()}) {
          if (iid != 0) {
            EXPECT_TRUE(seen_strings.count(iid)) << "string " << iid << " unsent";
          }
        }
        if (e.stack_iid() != 0) {
          EXPECT_TRUE(seen_stacks.count(e.stack_iid()));
        }
      }
      for (const auto& s : batches[i]->stacks()) {
        for (uint32_t f : s.frame_iids()) EXPECT_TRUE(seen_strings.count(f));
      }
    }
  }

  static void ExpectNoDrops(const RecordedStream& stream) {
    const nrtprof::EventBatch* last = stream.last_batch();
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(last->drops().ring_full(), 0u);
    EXPECT_EQ(last->drops().daemon_away(), 0u);
    EXPECT_EQ(last->drops().device_overwritten(), 0u);
    EXPECT_EQ(last->drops().oversized(), 0u);
  }

  static int counter_;
  std::unique_ptr<nrtprof::testing::SocketFolder> socket_folder_;
  std::string socket_, shim_, libnrt_;
  // Declared after socket_folder_: the collector stops listening before the folder goes.
  std::unique_ptr<FakeCollector> collector_;
};

int ShimTest::counter_ = 0;

TEST_F(ShimTest, RmsnormRunsAsWithoutTheShimAndStreamsEveryLane) {
  const ProcessResult plain = RunProcess(Rmsnorm(), Plain(), kRunTimeout);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  StartCollector();
  const uint64_t test_start_realtime =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  const ProcessResult run = RunProcess(Rmsnorm(), Profiled(), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // The program's own device timer (a system trace of its own) reads the same device time.
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);

  const RecordedStream stream = OnlyStream();
  ExpectWellFormed(stream);
  ExpectNoDrops(stream);

  const nrtprof::Hello& hello = *stream.hello();
  EXPECT_EQ(hello.pid(), static_cast<uint32_t>(run.pid));
  EXPECT_EQ(hello.ppid(), static_cast<uint32_t>(getpid()));
  EXPECT_THAT(hello.executable(), MatchesRegex(".*/rmsnorm"));
  EXPECT_THAT(std::vector<std::string>(hello.command_line().begin(), hello.command_line().end()),
              ::testing::ElementsAre(::testing::EndsWith("rmsnorm"), "--variant", "naive",
                                     "--iters", "3"));
  EXPECT_EQ(hello.shim_version(), "0.1.0");
  EXPECT_EQ(hello.boot_id() + "\n", ReadFile("/proc/sys/kernel/random/boot_id"));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(hello.host(), host);
  EXPECT_GE(hello.process_start_ns() + 2'000'000'000ull, test_start_realtime);
  EXPECT_LE(hello.process_start_ns(), hello.clock().realtime_ns());
  EXPECT_GT(hello.clock().monotonic_ns(), 0u);
  EXPECT_EQ(hello.capture_id(), "");
  EXPECT_EQ(hello.mode(), nrtprof::MODE_BEST_EFFORT);

  // Runtime lane: 6 models, 6 executions per forward pass (a warm-up and 3 timed), 2 weight
  // writes plus one epsilon write per pass, one read.
  const auto calls = stream.Named(nrtprof::EVENT_API_CALL);
  EXPECT_EQ(Count(calls, "nrt_init"), 1u);
  EXPECT_EQ(Count(calls, "nrt_load"), 6u);
  EXPECT_EQ(Count(calls, "nrt_execute"), 24u);
  EXPECT_EQ(Count(calls, "nrt_tensor_write"), 6u);
  EXPECT_EQ(Count(calls, "nrt_tensor_read"), 1u);
  EXPECT_EQ(Count(calls, "nrt_tensor_allocate"), 9u);
  EXPECT_EQ(Count(calls, "nrt_close"), 1u);
  std::map<std::string, size_t> tensor_names;
  const auto strings = stream.strings();
  std::set<uint64_t> correlation_ids;
  uint64_t last_start = 0, last_correlation = 0;
  for (const auto& [name, e] : calls) {
    EXPECT_EQ(e.status(), 0) << name;
    EXPECT_EQ(e.tid(), hello.pid()) << "rmsnorm makes its calls on its main thread";
    EXPECT_TRUE(correlation_ids.insert(e.correlation_id()).second);
    // One thread: correlation ids grow with time.
    if (e.start_ns() > last_start) {
      EXPECT_GT(e.correlation_id(), last_correlation);
      last_start = e.start_ns();
      last_correlation = e.correlation_id();
    }
    if (name == "nrt_execute") {
      EXPECT_NE(e.model_handle(), 0u);
      EXPECT_EQ(e.repeat(), 1u);
      EXPECT_GT(e.duration_ns(), 0u);
    }
    if (e.tensor_name_iid() != 0) ++tensor_names[name + " " + strings.at(e.tensor_name_iid())];
  }
  EXPECT_EQ(tensor_names["nrt_tensor_allocate x"], 1u);
  EXPECT_EQ(tensor_names["nrt_tensor_allocate eps"], 1u);
  EXPECT_EQ(tensor_names["nrt_tensor_write eps"], 4u) << "writes carry their tensor's name";
  EXPECT_EQ(tensor_names["nrt_tensor_read y"], 1u);

  // Framework lane: the annotations, nested.
  const auto ranges = stream.Named(nrtprof::EVENT_RANGE);
  EXPECT_EQ(Count(ranges, "rmsnorm"), 3u);
  EXPECT_EQ(Count(ranges, "aten::mul"), 12u);
  EXPECT_EQ(Count(ranges, "aten::add"), 4u);
  EXPECT_EQ(Count(ranges, "aten::copy_"), 2u);
  // Each iteration is a step (nrtprof_step): the steps outermost, each rmsnorm inside one. The
  // last step is still open when the program ends: never recorded, as in PyTorch.
  EXPECT_EQ(Count(ranges, "ProfilerStep#0"), 1u);
  EXPECT_EQ(Count(ranges, "ProfilerStep#1"), 1u);
  EXPECT_EQ(Count(ranges, "ProfilerStep#2"), 0u);
  for (const auto& [name, e] : ranges) {
    if (name == "rmsnorm") {
      EXPECT_EQ(e.depth(), 1u);
    }
    if (absl::StartsWith(name, "ProfilerStep#")) {
      EXPECT_EQ(e.depth(), 0u);
    }
  }
  EXPECT_EQ(std::count_if(ranges.begin(), ranges.end(),
                          [](const auto& r) { return r.first == "aten::mean" && r.second.depth() == 2; }),
            3);

  // Hardware lane: every execution, including those under the program's own capture.
  const auto execs = stream.Named(nrtprof::EVENT_DEVICE_EXEC);
  EXPECT_EQ(execs.size(), 24u);
  std::set<std::string> models;
  for (const auto& [name, e] : execs) {
    EXPECT_EQ(name, "nc_exec_running");
    EXPECT_EQ(e.nc_idx(), 0);
    EXPECT_EQ(e.tid(), hello.pid());
    EXPECT_NE(e.exec_id(), 0u);
    EXPECT_FALSE(e.host_clock()) << "executions are on the device clock";
  }
  // The system trace has no engine ops (they are device-profile material).
  EXPECT_TRUE(stream.Named(nrtprof::EVENT_DEVICE_OP).empty());
  const auto dma = stream.Named(nrtprof::EVENT_DEVICE_DMA);
  EXPECT_EQ(Count(dma, "dma_h2d"), 6u) << "one per nrt_tensor_write";
  EXPECT_EQ(Count(dma, "dma_d2h"), 1u) << "one per nrt_tensor_read";
  EXPECT_EQ(Count(dma, "dma_model_load"), 6u) << "one per nrt_load";
  for (const auto& [name, e] : dma) {
    EXPECT_TRUE(e.host_clock()) << name << ": the runtime stamps transfers on the host";
    EXPECT_EQ(e.tid(), hello.pid());
    EXPECT_GT(e.bytes(), 0u);
  }
  size_t syncs = 0, model_files = 0;
  for (const auto* b : stream.batches()) {
    syncs += b->clock_syncs_size();
    for (const auto& m : b->models()) {
      ++model_files;
      EXPECT_NE(m.model_handle(), 0u);
      EXPECT_GT(m.size(), 0u);
      EXPECT_EQ(m.model_file().size(), m.size());
    }
  }
  EXPECT_GT(syncs, 0u);
  EXPECT_EQ(model_files, 6u);
}

TEST_F(ShimTest, DlopenAndDlsymThroughAHandleAreInterposed) {
  StartCollector();
  const ProcessResult run =
      RunProcess({Runfile("shim/testing/dlopen_client"), libnrt_}, Profiled(), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "dlopen client: ok\n");
  const RecordedStream stream = OnlyStream();
  ExpectWellFormed(stream);
  const auto calls = stream.Named(nrtprof::EVENT_API_CALL);
  EXPECT_EQ(Count(calls, "nrt_init"), 1u);
  EXPECT_EQ(Count(calls, "nrt_tensor_allocate"), 1u);
  EXPECT_EQ(Count(calls, "nrt_tensor_write"), 1u);
  EXPECT_EQ(Count(calls, "nrt_tensor_read"), 2u);
  EXPECT_EQ(Count(calls, "nrt_tensor_free"), 1u);
  EXPECT_EQ(Count(calls, "nrt_close"), 1u);
  const auto strings = stream.strings();
  std::vector<int32_t> read_statuses;
  for (const auto& [name, e] : calls) {
    if (name == "nrt_tensor_read") read_statuses.push_back(e.status());
    if (name == "nrt_tensor_allocate") {
      EXPECT_EQ(strings.at(e.tensor_name_iid()), "dlopen_tensor");
      EXPECT_EQ(e.bytes(), 64u);
      EXPECT_EQ(e.nc_idx(), 0);
      EXPECT_EQ(e.placement(), 0);
    }
  }
  EXPECT_THAT(read_statuses, ::testing::ElementsAre(0, 2)) << "NRT_INVALID, as the runtime says";
  // The shim found the runtime's system trace through the program's handle.
  const auto dma = stream.Named(nrtprof::EVENT_DEVICE_DMA);
  EXPECT_EQ(Count(dma, "dma_h2d"), 1u);
  EXPECT_EQ(Count(dma, "dma_d2h"), 1u);
}

TEST_F(ShimTest, PythonCtypesIsInterposed) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  StartCollector();
  const std::string script = R"(
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.nrt_init(1, b"", b"") == 0
t = ctypes.c_void_p()
assert lib.nrt_tensor_allocate(0, 0, 16, b"py_tensor", ctypes.byref(t)) == 0
buf = (ctypes.c_ubyte * 16)(*range(16))
assert lib.nrt_tensor_write(t, buf, 0, 16) == 0
out = (ctypes.c_ubyte * 16)()
assert lib.nrt_tensor_read(t, out, 0, 16) == 0
assert list(out) == list(range(16))
lib.nrt_tensor_free(ctypes.byref(t))
lib.nrt_close()
print("ctypes ok")
)";
  const ProcessResult run =
      RunProcess({"/usr/bin/python3", "-c", script, libnrt_}, Profiled(), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "ctypes ok\n");
  const RecordedStream stream = OnlyStream();
  ExpectWellFormed(stream);
  ExpectNoDrops(stream);
  const auto calls = stream.Named(nrtprof::EVENT_API_CALL);
  EXPECT_EQ(Count(calls, "nrt_init"), 1u);
  EXPECT_EQ(Count(calls, "nrt_tensor_write"), 1u);
  EXPECT_EQ(Count(calls, "nrt_tensor_read"), 1u);
  EXPECT_EQ(Count(calls, "nrt_close"), 1u);
  EXPECT_THAT(stream.hello()->executable(), HasSubstr("python"));
  EXPECT_EQ(Count(stream.Named(nrtprof::EVENT_DEVICE_DMA), "dma_h2d"), 1u);
}

TEST_F(ShimTest, WithoutADaemonTheProgramIsUnchangedAndExitsPromptly) {
  const ProcessResult plain = RunProcess(Rmsnorm(), Plain(), kRunTimeout);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // No collector on the socket; a long flush bound that must not be waited out.
  const ProcessResult run =
      RunProcess(Rmsnorm(), Profiled({{"NRTPROF_FLUSH_TIMEOUT_MS", "30000"}}), kRunTimeout);
  EXPECT_EQ(run.exit_code, plain.exit_code);
  EXPECT_EQ(run.out, plain.out);
  // The address was named (NRTPROF_ADDR): one line at exit says it ran unprofiled.
  EXPECT_EQ(run.err, plain.err + "nrtprof: no daemon answered at unix:" + socket_ +
                         " (NRTPROF_ADDR) while this process ran: it was not profiled\n");
  EXPECT_LT(run.seconds, plain.seconds + 5.0) << "waited for a daemon that is not there";
}

TEST_F(ShimTest, ADaemonThatNeverAcknowledgesDelaysExitOnlyByTheFlushBound) {
  FakeCollector::Options options;
  options.ack = false;
  StartCollector(options);
  const ProcessResult plain = RunProcess(Rmsnorm(), Plain(), kRunTimeout);
  const ProcessResult run =
      RunProcess(Rmsnorm(), Profiled({{"NRTPROF_FLUSH_TIMEOUT_MS", "2000"}}), kRunTimeout);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  EXPECT_GE(run.seconds, 2.0);
  EXPECT_LT(run.seconds, plain.seconds + 7.0);
  // The final batch unacknowledged, its event-less copy went on a connection of its own (a
  // daemon behind on the first stream would have read it there first), with the count of
  // every event the process sent.
  ASSERT_TRUE(collector_->WaitForFinishedStreams(2, kStreamTimeout));
  const std::vector<RecordedStream> streams = collector_->streams();
  ASSERT_EQ(streams.size(), 2u);
  const bool first_is_main = !streams[0].hello()->final_only();
  const RecordedStream& main = streams[first_is_main ? 0 : 1];
  const RecordedStream& alone = streams[first_is_main ? 1 : 0];
  ExpectWellFormed(main);
  ASSERT_NE(main.last_batch(), nullptr);
  EXPECT_TRUE(main.last_batch()->final());
  ASSERT_TRUE(alone.hello()->final_only());
  EXPECT_EQ(alone.hello()->pid(), static_cast<uint32_t>(run.pid));
  ASSERT_EQ(alone.batches().size(), 1u);
  const nrtprof::EventBatch& report = *alone.batches()[0];
  EXPECT_TRUE(report.final());
  EXPECT_EQ(report.sequence(), main.last_batch()->sequence());
  EXPECT_EQ(report.events_size(), 0);
  uint64_t framework = 0, runtime = 0, hardware = 0;
  for (const nrtprof::Event& e : main.events()) {
    ++(e.kind() == nrtprof::EVENT_RANGE      ? framework
       : e.kind() == nrtprof::EVENT_API_CALL ? runtime
                                             : hardware);
  }
  EXPECT_GT(runtime, 0u);
  EXPECT_EQ(report.events_sent().framework(), framework);
  EXPECT_EQ(report.events_sent().runtime(), runtime);
  EXPECT_EQ(report.events_sent().hardware(), hardware);
  EXPECT_EQ(main.last_batch()->events_sent().runtime(), runtime);
}

// The nrt_execute calls in the stream's batches numbered past `after_sequence`.
size_t ExecutesAfter(const RecordedStream& stream, uint64_t after_sequence) {
  const std::map<uint32_t, std::string> strings = stream.strings();
  size_t n = 0;
  for (const nrtprof::EventBatch* b : stream.batches()) {
    if (b->sequence() <= after_sequence) continue;
    for (const nrtprof::Event& e : b->events()) {
      auto name = strings.find(e.name_iid());
      n += e.kind() == nrtprof::EVENT_API_CALL && name != strings.end() &&
           name->second == "nrt_execute";
    }
  }
  return n;
}

TEST_F(ShimTest, ADaemonThatRestartsGetsANewStreamAndTheGapIsCounted) {
  // About two seconds of device time: the daemon restarts while the program runs.
  constexpr int kIters = 800;
  Restarted r;
  RunAcrossARestart(Profiled(), kIters, std::chrono::milliseconds(0), &r);
  if (HasFatalFailure()) return;
  const ProcessResult& run = r.run;
  const RecordedStream& after = r.after;
  EXPECT_EQ(after.hello()->pid(), static_cast<uint32_t>(run.pid));
  EXPECT_EQ(Count(after.Named(nrtprof::EVENT_API_CALL), "nrt_close"), 1u);
  // The new stream goes on from where the old daemon's acknowledgements stopped: the batches
  // sent but not acknowledged come again (the first daemon may have had some), none skipped.
  const uint64_t last_before = r.before.last_batch()->sequence();
  EXPECT_GT(after.batches().front()->sequence(), 1u);
  EXPECT_LE(after.batches().front()->sequence(), last_before + 1);
  // Every execution reached one of the daemons or is counted as lost, and none is lost twice
  // or counted twice once the resent batches are told apart by their sequence numbers.
  const size_t executes_before = Count(r.before.Named(nrtprof::EVENT_API_CALL), "nrt_execute");
  const size_t executes_after = ExecutesAfter(after, last_before);
  const size_t total = 6 * (kIters + 1);
  EXPECT_GT(executes_before, 0u);
  EXPECT_GT(executes_after, 0u);
  // (The runtime lane's losses are of every libnrt function, so they bound those of
  // nrt_execute from above.)
  const uint64_t lost = after.last_batch()->drops().by_lane().runtime();
  EXPECT_LE(executes_before + executes_after, total);
  EXPECT_GE(executes_before + executes_after + lost, total)
      << executes_before << " before, " << executes_after << " after, " << lost << " lost";
}

// Lossless: batches made while the daemon was away are in the spool, and the next stream gets
// them from it, so that a daemon anywhere (this fake one reads no spool file) has every batch.
TEST_F(ShimTest, LosslessReplaysWhatTheDaemonMissedFromTheSpool) {
  constexpr int kIters = 800;
  Restarted r;
  // Away long enough for batches to be made with no daemon (one every 100 ms here).
  RunAcrossARestart(Profiled({{"NRTPROF_MODE", "lossless"},
                              {"NRTPROF_CAPTURE", "replay"},
                              {"NRTPROF_SPOOL_DIR", TempDir("spool")}}),
                    kIters, std::chrono::milliseconds(400), &r);
  if (HasFatalFailure()) return;
  const RecordedStream& after = r.after;
  const uint64_t last_before = r.before.last_batch()->sequence();
  // The second stream starts at or before the first batch the first daemon did not have, and
  // from there no batch is missing.
  const auto batches = after.batches();
  EXPECT_LE(batches.front()->sequence(), last_before + 1);
  for (size_t i = 1; i < batches.size(); ++i) {
    EXPECT_EQ(batches[i]->sequence(), batches[i - 1]->sequence() + 1) << "at " << i;
  }
  const size_t executes = Count(r.before.Named(nrtprof::EVENT_API_CALL), "nrt_execute") +
                          ExecutesAfter(after, last_before);
  EXPECT_EQ(executes, 6u * (kIters + 1)) << "every execution, once";
  EXPECT_EQ(after.last_batch()->drops().by_lane().runtime(), 0u);
}

// Lossless against a daemon that answers the Hello and then acknowledges no batch: no more
// batches wait for an ack on the stream than the bound (64), the rest stays in the spool, which
// holds every batch, in order, the final one last; the program is unchanged.
TEST_F(ShimTest, LosslessKeepsTheStreamWithinItsBoundAndEverythingInTheSpool) {
  FakeCollector::Options options;
  options.ack_batches = false;
  StartCollector(options);
  constexpr int kIters = 3200;  // about 8 s at NRT_SIM_TIME_SCALE=1: over 100 batches
  const std::string spool = TempDir("bounded-spool");
  EnvChanges env = Profiled({{"NRTPROF_MODE", "lossless"},
                             {"NRTPROF_CAPTURE", "bounded"},
                             {"NRTPROF_SPOOL_DIR", spool}});
  env["NRT_SIM_TIME_SCALE"] = "1";
  env["NRTPROF_BATCH_MS"] = "100";  // not the default 500: over 64 batches in 8 s
  const ProcessResult plain = RunProcess(Rmsnorm(kIters), Plain(), kRunTimeout);
  const ProcessResult run = RunProcess(Rmsnorm(kIters), env, kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  ASSERT_TRUE(collector_->WaitForFinishedStreams(1, kStreamTimeout));
  const auto streams = collector_->ProcessStreams(kStreamTimeout);
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_EQ(streams[0].batches().size(), 64u) << "the bound on batches waiting for an ack";

  const ProcessResult ls = RunProcess({"/bin/ls", spool}, Plain(), kRunTimeout);
  ASSERT_THAT(ls.out, MatchesRegex("bounded\\.[0-9]+\\.[0-9]+\\.spool\n")) << ls.out;
  nrtprof::SpoolContents contents;
  std::string error;
  ASSERT_TRUE(nrtprof::ReadSpool(spool + "/" + ls.out.substr(0, ls.out.size() - 1), &contents,
                                 &error))
      << error;
  ASSERT_GT(contents.records.size(), 65u);
  uint64_t expected = 1;
  size_t executes = 0;
  std::map<uint32_t, std::string> strings;
  nrtprof::ShimMessage last;
  for (size_t i = 1; i < contents.records.size(); ++i) {  // after the Hello
    ASSERT_TRUE(last.ParseFromString(contents.records[i]));
    ASSERT_TRUE(last.has_batch());
    EXPECT_EQ(last.batch().sequence(), expected++);
    for (const nrtprof::InternedString& str : last.batch().strings()) strings[str.iid()] = str.value();
    for (const nrtprof::Event& e : last.batch().events()) {
      executes += e.kind() == nrtprof::EVENT_API_CALL && strings[e.name_iid()] == "nrt_execute";
    }
  }
  EXPECT_TRUE(last.batch().final());
  EXPECT_EQ(executes, 6u * (kIters + 1)) << "every execution in the spool";
}

// A daemon that never answers (an older one would not answer the Hello with an Ack): after a
// second, a lossless stream sends from the spool's start anyway, within the bound.
TEST_F(ShimTest, LosslessSendsFromTheStartToADaemonThatDoesNotSayWhereItIs) {
  FakeCollector::Options options;
  options.ack = false;
  StartCollector(options);
  EnvChanges env = Profiled({{"NRTPROF_MODE", "lossless"},
                             {"NRTPROF_CAPTURE", "silent"},
                             {"NRTPROF_SPOOL_DIR", TempDir("silent-spool")}});
  env["NRT_SIM_TIME_SCALE"] = "1";
  const ProcessResult run = RunProcess(Rmsnorm(1000), env, kRunTimeout);  // about 2.5 s
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto streams = collector_->ProcessStreams(kStreamTimeout);
  ASSERT_EQ(streams.size(), 1u);
  const auto batches = streams[0].batches();
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(batches.front()->sequence(), 1u);
  EXPECT_LE(batches.size(), 64u);
  // A slow machine seals more batches (by age) than the 64 a daemon that never acknowledges
  // may have in flight: then the final batch is in the spool only, not on the stream.
  ExpectWellFormed(streams[0], /*final_sent=*/batches.size() < 64u || batches.back()->final());
}

TEST_F(ShimTest, DisabledPassesEverythingThrough) {
  StartCollector();
  const ProcessResult plain = RunProcess(Rmsnorm(), Plain(), kRunTimeout);
  const ProcessResult run =
      RunProcess(Rmsnorm(), Profiled({{"NRTPROF_DISABLE", "1"}}), kRunTimeout);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);
  EXPECT_EQ(collector_->streams_opened(), 0u);
}

TEST_F(ShimTest, ProcessesThatNeverCallLibnrtNeverConnect) {
  StartCollector();
  const ProcessResult run =
      RunProcess({"/bin/sh", "-c", "echo hello; /bin/true"}, Profiled(), kRunTimeout);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "hello\n");
  EXPECT_EQ(run.err, "");
  EXPECT_EQ(collector_->streams_opened(), 0u);
}

TEST_F(ShimTest, AProgramWithTheWireFormatInItsOwnProtobufPoolRuns) {
  StartCollector();
  const ProcessResult run =
      RunProcess({Runfile("shim/testing/proto_user")}, Profiled(), kRunTimeout);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "proto user: EVENT_API_CALL ok\n");
  const RecordedStream stream = OnlyStream();
  EXPECT_EQ(Count(stream.Named(nrtprof::EVENT_API_CALL), "nrt_init"), 1u);
}

TEST_F(ShimTest, AChildForkedAfterStartRecordsNothingAndNeverHangs) {
  StartCollector();
  const ProcessResult run =
      RunProcess({Runfile("shim/testing/fork_client"), "after"}, Profiled(), kRunTimeout);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("child: ok"));
  EXPECT_THAT(run.out, HasSubstr("parent: ok, child exited 0"));
  EXPECT_THAT(run.err, HasSubstr("was forked from a profiled process"));
  const RecordedStream stream = OnlyStream();
  ExpectWellFormed(stream);
  EXPECT_EQ(stream.hello()->pid(), static_cast<uint32_t>(run.pid));
  // The parent's round trips: 1 before the fork, 1 after (2 writes in all).
  EXPECT_EQ(Count(stream.Named(nrtprof::EVENT_API_CALL), "nrt_tensor_write"), 2u);
}

TEST_F(ShimTest, AChildForkedBeforeStartIsProfiledOnItsOwn) {
  StartCollector();
  const ProcessResult run =
      RunProcess({Runfile("shim/testing/fork_client"), "before"}, Profiled(), kRunTimeout);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  ASSERT_TRUE(collector_->WaitForFinishedStreams(2, kStreamTimeout));
  const auto streams = collector_->ProcessStreams(kStreamTimeout);
  ASSERT_EQ(streams.size(), 2u);
  std::map<uint32_t, const RecordedStream*> by_pid;
  for (const auto& s : streams) {
    ExpectWellFormed(s);
    ExpectNoDrops(s);
    by_pid[s.hello()->pid()] = &s;
  }
  ASSERT_EQ(by_pid.count(static_cast<uint32_t>(run.pid)), 1u);
  for (const auto& [pid, s] : by_pid) {
    const auto strings = s->strings();
    std::set<std::string> names;
    for (const auto& [name, e] : s->Named(nrtprof::EVENT_API_CALL)) {
      if (e.tensor_name_iid() != 0) names.insert(strings.at(e.tensor_name_iid()));
    }
    if (pid == static_cast<uint32_t>(run.pid)) {
      EXPECT_THAT(names, ::testing::ElementsAre("parent_tensor"));
    } else {
      EXPECT_EQ(s->hello()->ppid(), static_cast<uint32_t>(run.pid));
      EXPECT_THAT(names, ::testing::ElementsAre("child_tensor"));
    }
  }
}

TEST_F(ShimTest, StacksNameTheProgramsCallSites) {
  StartCollector();
  const ProcessResult run =
      RunProcess(Rmsnorm(1), Profiled({{"NRTPROF_STACKS", "6"}}), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const RecordedStream stream = OnlyStream();
  ExpectWellFormed(stream);
  const auto strings = stream.strings();
  const auto stacks = stream.stacks();
  size_t executes = 0;
  for (const auto& [name, e] : stream.Named(nrtprof::EVENT_API_CALL)) {
    ASSERT_NE(e.stack_iid(), 0u) << name;
    const std::vector<uint32_t>& frames = stacks.at(e.stack_iid());
    ASSERT_FALSE(frames.empty());
    EXPECT_LE(frames.size(), 6u);
    for (uint32_t f : frames) {
      EXPECT_THAT(strings.at(f), MatchesRegex(".+ \\(.+\\+0x[0-9a-f]+\\)"));
      EXPECT_THAT(strings.at(f), ::testing::Not(HasSubstr("libnrtprof_shim")));
    }
    if (name == "nrt_execute") {
      ++executes;
      // The innermost frame is the program's own function that called nrt_execute.
      EXPECT_THAT(strings.at(frames[0]), StartsWith("(anonymous namespace)::"));
      EXPECT_THAT(strings.at(frames[0]), HasSubstr("(rmsnorm+0x"));
    }
  }
  EXPECT_EQ(executes, 12u);
}

TEST_F(ShimTest, ManyThreadsEachGetTheirOwnEventsAndThreadExitLosesNothing) {
  StartCollector();
  const ProcessResult run = RunProcess(
      {Runfile("examples/mlp"), "--threads", "4", "--cores", "2", "--iters", "5"}, Profiled(),
      kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const RecordedStream stream = OnlyStream();
  ExpectWellFormed(stream);
  ExpectNoDrops(stream);
  std::set<uint32_t> tids;
  std::set<uint64_t> correlation_ids;
  size_t executes = 0;
  for (const auto& [name, e] : stream.Named(nrtprof::EVENT_API_CALL)) {
    tids.insert(e.tid());
    EXPECT_TRUE(correlation_ids.insert(e.correlation_id()).second);
    if (name == "nrt_execute") ++executes;
  }
  EXPECT_GE(tids.size(), 5u) << "the main thread and four workers";
  EXPECT_EQ(executes, stream.Named(nrtprof::EVENT_DEVICE_EXEC).size());
  std::set<uint32_t> range_tids;
  for (const auto& [name, e] : stream.Named(nrtprof::EVENT_RANGE)) {
    if (name == "mlp.forward") range_tids.insert(e.tid());
  }
  EXPECT_EQ(range_tids.size(), 4u);
}

TEST_F(ShimTest, AFullRingDropsAreCountedNotLost) {
  StartCollector();
  // How many events a run makes, with room for all of them.
  const ProcessResult full = RunProcess(Rmsnorm(300), Profiled(), kRunTimeout);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const RecordedStream all = OnlyStream();
  ExpectNoDrops(all);
  const size_t expected = all.Named(nrtprof::EVENT_API_CALL).size() +
                          all.Named(nrtprof::EVENT_RANGE).size();

  collector_.reset();
  StartCollector();
  const ProcessResult small =
      RunProcess(Rmsnorm(300), Profiled({{"NRTPROF_RING_EVENTS", "64"}}), kRunTimeout);
  ASSERT_EQ(small.exit_code, 0) << small.err;
  const RecordedStream some = OnlyStream();
  ExpectWellFormed(some);
  const size_t received = some.Named(nrtprof::EVENT_API_CALL).size() +
                          some.Named(nrtprof::EVENT_RANGE).size();
  const uint64_t dropped = some.last_batch()->drops().ring_full();
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(received + dropped, expected);
}

// A burst that fills three quarters of its thread's ring between two ticks wakes the flusher,
// which copies the ring's records out and builds them at the next tick (flusher.h,
// StageFillingRings), before what the ring holds by then; the last burst's copy is built by
// the exit's drain. Each 30,000-call burst comes after a pause in which a tick empties the
// ring, passes three quarters of the default 32,768 at one of the looks a thread makes every
// 4,096 calls, and is followed 5 ms later by 2,000 calls more: together they fit in the ring,
// so nothing may be dropped whenever the flusher runs, and every call must arrive, once, in
// the order it was made.
TEST_F(ShimTest, CallsCopiedOutOfAFillingRingArriveInOrder) {
  StartCollector();
  const ProcessResult run = RunProcess({Runfile("shim/testing/burst_client"), "200:30000",
                                        "5:2000", "200:30000", "5:2000", "200:30000"},
                                       Profiled(), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "writes 94000 last 93999\n");
  const RecordedStream stream = OnlyStream();
  ExpectNoDrops(stream);
  std::vector<nrtprof::Event> writes;
  for (const auto& [name, e] : stream.Named(nrtprof::EVENT_API_CALL)) {
    if (name == "nrt_tensor_write") writes.push_back(e);
  }
  ASSERT_EQ(writes.size(), 94000u);
  std::set<uint64_t> ids;
  for (size_t i = 0; i < writes.size(); ++i) {
    EXPECT_TRUE(ids.insert(writes[i].correlation_id()).second) << "call " << i << " twice";
    if (i == 0) continue;
    ASSERT_GE(writes[i].start_ns(), writes[i - 1].start_ns()) << "call " << i << " out of order";
    ASSERT_GT(writes[i].correlation_id(), writes[i - 1].correlation_id()) << "call " << i;
  }
}

TEST_F(ShimTest, CaptureIdFromTheEnvironmentRecordsWhateverTheDaemonSays) {
  FakeCollector::Options options;
  options.control.emplace();
  options.control->set_capturing(false);
  StartCollector(options);
  const ProcessResult run =
      RunProcess(Rmsnorm(), Profiled({{"NRTPROF_CAPTURE", "capture-7"}}), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const RecordedStream stream = OnlyStream();
  EXPECT_EQ(stream.hello()->capture_id(), "capture-7");
  EXPECT_EQ(Count(stream.Named(nrtprof::EVENT_API_CALL), "nrt_execute"), 24u);
  EXPECT_EQ(stream.Named(nrtprof::EVENT_DEVICE_EXEC).size(), 24u);
}

TEST_F(ShimTest, AMalformedSettingIsOneLineOnStderrAndTheDefault) {
  StartCollector();
  const ProcessResult plain = RunProcess(Rmsnorm(), Plain(), kRunTimeout);
  const ProcessResult run =
      RunProcess(Rmsnorm(), Profiled({{"NRTPROF_RING_EVENTS", "lots"}}), kRunTimeout);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err +
                         "nrtprof: NRTPROF_RING_EVENTS='lots' is not a count from 64 to "
                         "4194304; using 32768\n");
  const RecordedStream stream = OnlyStream();
  ExpectNoDrops(stream);
  EXPECT_EQ(Count(stream.Named(nrtprof::EVENT_API_CALL), "nrt_execute"), 24u);
}

}  // namespace
}  // namespace nrtprof::shim::testing
