// What the collector core's tests share (collector_core_test.cc, collector_recorded_test.cc):
// a clock that moves only when told, a sink that keeps what it is given, a stream's controls,
// Hellos and batches, and the fixture with a core of them. Test-only.
#ifndef NRTPROF_DAEMON_TESTING_COLLECTOR_CORE_FIXTURE_H_
#define NRTPROF_DAEMON_TESTING_COLLECTOR_CORE_FIXTURE_H_

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/collector_core.h"
#include "gtest/gtest.h"
#include "trace/trace_sink.h"

namespace nrtprof::daemon::core_testing {

// Time moves only when the test says. A waiter is woken by Advance (or by the core's own
// notifications); AwaitWaits lets the test know the core is blocked waiting.
class FakeClock : public CollectorClock {
 public:
  uint64_t MonotonicNs() override { return now_.load(); }
  int64_t RealtimeNs() override {
    // 2023-11-14 22:13:20 UTC at monotonic 0.
    return 1'700'000'000'000'000'000 + static_cast<int64_t>(now_.load());
  }
  void WaitUntil(std::condition_variable* cv, std::unique_lock<std::mutex>* lock,
                 uint64_t deadline_ns) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      waiters_.insert({cv, lock->mutex()});
      ++waits_;
      waits_cv_.notify_all();
    }
    if (now_.load() < deadline_ns) cv->wait(*lock);
    std::lock_guard<std::mutex> g(mu_);
    waiters_.erase({cv, lock->mutex()});
  }

  void Advance(uint64_t ns) {
    now_ += ns;
    std::set<std::pair<std::condition_variable*, std::mutex*>> waiters;
    {
      std::lock_guard<std::mutex> g(mu_);
      waiters = waiters_;
    }
    // Under the waiter's mutex: it is either before its check of the time or inside wait().
    for (auto [cv, m] : waiters) {
      std::lock_guard<std::mutex> g(*m);
      cv->notify_all();
    }
  }
  void AwaitWaits(int n) {
    std::unique_lock<std::mutex> g(mu_);
    waits_cv_.wait(g, [&] { return waits_ >= n; });
  }

 private:
  std::atomic<uint64_t> now_{0};
  std::mutex mu_;
  std::condition_variable waits_cv_;
  std::set<std::pair<std::condition_variable*, std::mutex*>> waiters_;
  int waits_ = 0;
};

// Keeps the traces it is given; fails when told to.
class FakeSink : public TraceSink {
 public:
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    std::lock_guard<std::mutex> lock(mu);
    traces.push_back(trace);
    dirs.push_back(output_dir);
    if (!fail.ok()) return fail;
    files->push_back("fake.trace");
    return absl::OkStatus();
  }
  std::mutex mu;
  std::vector<Trace> traces;
  std::vector<std::string> dirs;
  absl::Status fail;
};

// What the core sent one stream.
struct Controls {
  std::vector<nrtprof::CaptureControl> sent;
  CollectorCore::ControlSender Sender() {
    return [this](const nrtprof::CaptureControl& c) { sent.push_back(c); };
  }
};

inline nrtprof::Hello Hello(uint32_t pid, const std::string& capture_id = "") {
  nrtprof::Hello h;
  h.set_pid(pid);
  h.set_executable(absl::StrCat("/bin/app", pid));
  h.set_capture_id(capture_id);
  return h;
}

// One batch: a range around a call, with the strings on the first batch.
inline nrtprof::EventBatch Batch(uint64_t sequence, bool final = false) {
  nrtprof::EventBatch b;
  b.set_sequence(sequence);
  b.set_final(final);
  if (sequence == 1) {
    nrtprof::InternedString* s = b.add_strings();
    s->set_iid(1);
    s->set_value("aten::mul");
    s = b.add_strings();
    s->set_iid(2);
    s->set_value("nrt_execute");
  }
  nrtprof::Event* r = b.add_events();
  r->set_kind(nrtprof::EVENT_RANGE);
  r->set_name_iid(1);
  r->set_tid(1);
  r->set_start_ns(sequence * 1000);
  r->set_duration_ns(500);
  nrtprof::Event* c = b.add_events();
  c->set_kind(nrtprof::EVENT_API_CALL);
  c->set_name_iid(2);
  c->set_tid(1);
  c->set_start_ns(sequence * 1000 + 100);
  c->set_duration_ns(200);
  c->set_nc_idx(-1);
  c->set_correlation_id(sequence);
  return b;
}

inline std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  return dir;
}

class CollectorCoreTest : public ::testing::Test {
 protected:
  CollectorCoreTest() : core_(Options(), &sink_, &clock_) {}

  static CollectorOptions Options() {
    CollectorOptions o;
    o.address = "unix:/test.sock";
    o.output_root = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    o.daemon_version = "test";
    o.limits.max_events_per_process = 5;
    return o;
  }

  nrtprof::StartCaptureReply Start(const std::string& id) {
    nrtprof::StartCaptureRequest request;
    request.set_capture_id(id);
    absl::StatusOr<nrtprof::StartCaptureReply> reply = core_.StartCapture(request);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.value_or(nrtprof::StartCaptureReply());
  }

  // The daemon's total of one drop reason, as `nrtprof status` shows it.
  uint64_t DroppedInStatus(const std::string& reason) {
    const nrtprof::StatusReply status = core_.Status();
    for (const nrtprof::DropReason& d : status.dropped()) {
      if (d.reason() == reason) return d.events();
    }
    ADD_FAILURE() << "no reason " << reason << " in Status";
    return 0;
  }

  absl::StatusOr<nrtprof::CaptureFiles> Stop(const std::string& id, uint32_t wait_ms = 0) {
    nrtprof::StopCaptureRequest request;
    request.set_capture_id(id);
    request.set_wait_ms(wait_ms);
    return core_.StopCapture(request);
  }

  std::set<uint32_t> Pids(const Trace& t) {
    std::set<uint32_t> pids;
    for (const ProcessTrace& p : t.processes) pids.insert(p.pid);
    return pids;
  }

  FakeClock clock_;
  FakeSink sink_;
  CollectorCore core_;
};

}  // namespace nrtprof::daemon::core_testing

#endif  // NRTPROF_DAEMON_TESTING_COLLECTOR_CORE_FIXTURE_H_
