// nrtprof_loadgen: drives a running nrtprofd as many profiled processes would, and reports what
// the daemon sustained. It starts a capture (Control.StartCapture), opens P Collector streams,
// each a synthetic process with its own Hello (distinct pid, the capture's id) sending
// EventBatches of ~1000 events (bench/load/synthetic_process.h) as fast as the daemon takes
// them or at --rate, until --events are sent (or --duration_s has passed); the last batch of
// each stream is `final`, as a process's last batch is when it exits. Once every batch is
// acknowledged it asks Status for what the daemon received, then StopCapture, which correlates
// and writes trace.pftrace, trace.json and the rest before it returns.
//
// Prints a human-readable report and one `RESULT key=value ...` line for scripts
// (bench/load/run_load.sh). Times:
//   ingest  first batch sent -> last ack received (the daemon decoded and stored every event)
//   e2e     first batch sent -> StopCapture returned (correlated, every file written)
// With --capture=false it starts no capture: the streams feed the daemon's flight recorder
// only, and it reports ingest alone (bench/load/run_capture_last_daemon.sh then asks for
// `nrtprof capture --last`).
// With --daemon_pid it also reads that process's peak resident memory (VmHWM) and its CPU
// time in each phase from /proc. A benchmark: it prints figures and asserts nothing about time;
// it exits non-zero only when the daemon refuses it or loses the connection.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/load/synthetic_process.h"
#include "common/address.h"
#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"

ABSL_FLAG(std::string, addr, "",
          "the daemon: unix:/path or /path (default: NRTPROF_ADDR, else "
          "the per-user socket)");
ABSL_FLAG(uint32_t, streams, 4, "concurrent Collector streams (synthetic processes)");
ABSL_FLAG(uint32_t, threads, 2, "host threads per synthetic process");
ABSL_FLAG(uint64_t, events, 2'000'000, "events to send in all (whole batches; 0: no limit)");
ABSL_FLAG(double, duration_s, 0, "stop sending after this long (0: no limit)");
ABSL_FLAG(double, rate, 0, "events per second over all streams (0: as fast as acks allow)");
ABSL_FLAG(uint32_t, batch_events, 1000, "events per EventBatch (rounded up to whole iterations)");
ABSL_FLAG(std::string, capture_id, "", "capture id (default: loadgen-PID)");
ABSL_FLAG(std::string, output_dir, "", "the capture's folder (default: the daemon's choice)");
ABSL_FLAG(uint32_t, first_pid, 100000, "pid of the first synthetic process; others follow");
ABSL_FLAG(int64_t, daemon_pid, 0, "the daemon's pid, to report its memory and CPU time");
ABSL_FLAG(bool, capture, true,
          "start a capture first and stop it at the end; false: feed the flight recorder only");
ABSL_FLAG(uint32_t, stop_wait_ms, 10'000, "StopCapture's wait for the processes' final batches");

namespace nrtprof::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A field of /proc/PID/status in kB ("VmHWM"), or -1.
int64_t ProcStatusKb(int64_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// utime + stime of a process, in seconds, or -1.
double ProcCpuSeconds(int64_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string f;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t FileBytes(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// One synthetic process's stream: a writer (this object's Run, on its own thread) and a
// reader thread for the acks.
class ShimStream {
 public:
  ShimStream(nrtprof::Collector::Stub* stub, const SyntheticProcessOptions& options)
      : stub_(stub), process_(options) {}

  // Sends batches while `more(batch_events)` says another should follow; the last one is
  // final. Returns once the daemon has acknowledged everything and closed the stream.
  template <typename More, typename Pace>
  void Run(uint32_t batch_events, More more, Pace pace, std::atomic<bool>* failed) {
    stream_ = stub_->Stream(&context_);
    nrtprof::ShimMessage hello;
    *hello.mutable_hello() = process_.MakeHello();
    if (!stream_->Write(hello)) {
      Fail("the daemon refused the stream's Hello", failed);
      return;
    }
    std::thread reader([this] { Read(); });
    nrtprof::ShimMessage message;
    nrtprof::EventBatch* batch = message.mutable_batch();
    bool last = false;
    while (!last) {
      pace(batch_events);
      last = !more(batch_events);
      const uint32_t n = process_.NextBatch(batch_events, last, batch);
      if (!stream_->Write(message)) {
        Fail("the stream broke while sending", failed);
        break;
      }
      events_sent_ += n;
    }
    stream_->WritesDone();
    reader.join();
    const grpc::Status status = stream_->Finish();
    if (!status.ok() && !failed_) {
      Fail(absl::StrCat("stream ended with ", status.error_message()), failed);
    } else if (!failed_ && acked_ != process_.last_sequence()) {
      Fail(absl::StrCat("the daemon acknowledged batches up to ", acked_.load(), " of ",
                        process_.last_sequence()),
           failed);
    }
  }

  uint64_t events_sent() const { return events_sent_; }
  bool capturing() const { return capturing_; }
  Clock::time_point last_ack_time() const { return last_ack_time_; }
  const std::string& error() const { return error_; }

 private:
  void Fail(const std::string& why, std::atomic<bool>* failed) {
    error_ = why;
    failed_ = true;
    failed->store(true);
  }

  void Read() {
    nrtprof::DaemonMessage in;
    while (stream_->Read(&in)) {
      if (in.has_control()) capturing_ = in.control().capturing() || capturing_;
      if (in.has_ack()) {
        acked_ = in.ack().sequence();
        last_ack_time_ = Clock::now();
      }
    }
  }

  nrtprof::Collector::Stub* const stub_;
  SyntheticProcess process_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<nrtprof::ShimMessage, nrtprof::DaemonMessage>> stream_;
  std::atomic<uint64_t> acked_{0};
  std::atomic<bool> capturing_{false};
  Clock::time_point last_ack_time_{};
  uint64_t events_sent_ = 0;
  bool failed_ = false;
  std::string error_;
};

int Main() {
  const std::string address =
      ToGrpcTarget(absl::GetFlag(FLAGS_addr).empty() ? DaemonAddress() : absl::GetFlag(FLAGS_addr));
  const uint32_t streams = std::max<uint32_t>(absl::GetFlag(FLAGS_streams), 1);
  const uint64_t event_limit = absl::GetFlag(FLAGS_events);
  const double duration_s = absl::GetFlag(FLAGS_duration_s);
  const double rate = absl::GetFlag(FLAGS_rate);
  const uint32_t batch_events = std::max<uint32_t>(absl::GetFlag(FLAGS_batch_events), 1);
  const int64_t daemon_pid = absl::GetFlag(FLAGS_daemon_pid);
  const bool capture = absl::GetFlag(FLAGS_capture);
  std::string capture_id = absl::GetFlag(FLAGS_capture_id);
  if (capture_id.empty() && capture) capture_id = absl::StrCat("loadgen-", getpid());
  if (event_limit == 0 && duration_s <= 0) {
    fprintf(stderr, "nrtprof_loadgen: give --events or --duration_s\n");
    return 2;
  }

  // Each stream is its own channel, as each process has its own connection.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<nrtprof::Collector::Stub>> stubs;
  for (uint32_t i = 0; i < streams; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    args.SetMaxSendMessageSize(64 << 20);
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(nrtprof::Collector::NewStub(channels.back()));
  }
  auto control =
      nrtprof::Control::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));

  nrtprof::StartCaptureRequest start;
  start.set_capture_id(capture_id);
  start.set_output_dir(absl::GetFlag(FLAGS_output_dir));
  nrtprof::StartCaptureReply started;
  if (capture) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    const grpc::Status s = control->StartCapture(&context, start, &started);
    if (!s.ok()) {
      fprintf(stderr, "nrtprof_loadgen: StartCapture at %s: %s\n", address.c_str(),
              s.error_message().c_str());
      return 1;
    }
  }

  // Events are claimed a batch at a time from one budget, so the streams share --events.
  std::atomic<uint64_t> claimed{0};
  std::atomic<bool> failed{false};
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline = duration_s > 0
                                         ? t0 + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(duration_s))
                                         : Clock::time_point::max();
  const double daemon_cpu_start = daemon_pid > 0 ? ProcCpuSeconds(daemon_pid) : -1;

  const uint64_t start_ns = MonotonicNs();
  std::vector<std::unique_ptr<ShimStream>> shims;
  for (uint32_t i = 0; i < streams; ++i) {
    SyntheticProcessOptions o;
    o.pid = absl::GetFlag(FLAGS_first_pid) + i * 1000;
    o.threads = absl::GetFlag(FLAGS_threads);
    o.start_ns = start_ns;
    o.capture_id = capture_id;
    shims.push_back(std::make_unique<ShimStream>(stubs[i].get(), o));
  }
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      // Pacing: this stream's share of --rate, batch by batch from t0.
      const double stream_rate = rate > 0 ? rate / streams : 0;
      uint64_t paced_events = 0;
      auto pace = [&](uint32_t n) {
        if (stream_rate <= 0) return;
        const auto due = t0 + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(paced_events / stream_rate));
        std::this_thread::sleep_until(due);
        paced_events += n;
      };
      // True while another batch after this one is wanted.
      auto more = [&](uint32_t n) {
        if (failed.load()) return false;
        if (Clock::now() >= deadline) return false;
        if (event_limit == 0) return true;
        return claimed.fetch_add(n) + 2 * uint64_t{n} <= event_limit;
      };
      shims[i]->Run(batch_events, more, pace, &failed);
    });
  }
  for (std::thread& t : threads) t.join();
  const double daemon_cpu_ingest = daemon_pid > 0 ? ProcCpuSeconds(daemon_pid) : -1;

  uint64_t sent = 0;
  Clock::time_point last_ack = t0;
  bool all_capturing = true;
  for (const auto& s : shims) {
    sent += s->events_sent();
    last_ack = std::max(last_ack, s->last_ack_time());
    all_capturing = all_capturing && s->capturing();
    if (!s->error().empty()) fprintf(stderr, "nrtprof_loadgen: %s\n", s->error().c_str());
  }
  if (capture && !all_capturing) {
    fprintf(stderr, "nrtprof_loadgen: a stream was never told to capture\n");
  }

  nrtprof::StatusReply status;
  {
    grpc::ClientContext context;
    const grpc::Status s = control->Status(&context, nrtprof::StatusRequest(), &status);
    if (!s.ok()) fprintf(stderr, "nrtprof_loadgen: Status: %s\n", s.error_message().c_str());
  }
  if (!capture) {
    const double ingest_s = Seconds(last_ack - t0);
    printf("nrtprof_loadgen: %u streams x %u threads, %" PRIu64
           " events into the flight recorder, daemon received %" PRIu64 "\n",
           streams, absl::GetFlag(FLAGS_threads), sent, status.events_received());
    printf("  ingest  %.3f s  %.0f events/s   (first batch -> last ack)\n", ingest_s,
           sent / ingest_s);
    if (daemon_pid > 0) {
      printf("  daemon  CPU %.2f s ingesting\n", daemon_cpu_ingest - daemon_cpu_start);
    }
    printf("RESULT streams=%u sent=%" PRIu64 " received=%" PRIu64 " ingest_s=%.4f\n", streams,
           sent, status.events_received(), ingest_s);
    return failed.load() ? 1 : 0;
  }
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id(capture_id);
  stop.set_wait_ms(absl::GetFlag(FLAGS_stop_wait_ms));
  nrtprof::CaptureFiles files;
  const Clock::time_point stop_start = Clock::now();
  {
    grpc::ClientContext context;
    const grpc::Status s = control->StopCapture(&context, stop, &files);
    if (!s.ok()) {
      fprintf(stderr, "nrtprof_loadgen: StopCapture: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  const Clock::time_point stopped = Clock::now();
  const double daemon_cpu_stop = daemon_pid > 0 ? ProcCpuSeconds(daemon_pid) : -1;
  const int64_t hwm_kb = daemon_pid > 0 ? ProcStatusKb(daemon_pid, "VmHWM") : -1;
  const int64_t rss_kb = daemon_pid > 0 ? ProcStatusKb(daemon_pid, "VmRSS") : -1;

  const std::string dir = files.output_dir();
  const int64_t pftrace = FileBytes(dir + "/trace.pftrace");
  const int64_t json = FileBytes(dir + "/trace.json");
  const double ingest_s = Seconds(last_ack - t0);
  const double stop_s = Seconds(stopped - stop_start);
  const double e2e_s = Seconds(stopped - t0);
  const double in_trace = static_cast<double>(files.events());
  auto per_event = [&](int64_t bytes) { return in_trace > 0 ? bytes / in_trace : 0.0; };

  printf("nrtprof_loadgen: %u streams x %u threads, %" PRIu64 " events in batches of ~%u%s\n",
         streams, absl::GetFlag(FLAGS_threads), sent, batch_events,
         rate > 0 ? absl::StrCat(", paced at ", rate, " events/s").c_str() : ", unpaced");
  printf("  sent %" PRIu64 ", daemon received %" PRIu64 ", in trace %" PRIu64 ", dropped %" PRIu64
         " (%u processes)\n",
         sent, status.events_received(), files.events(), files.events_dropped(), files.processes());
  printf("  ingest  %.3f s  %.0f events/s   (first batch -> last ack)\n", ingest_s,
         sent / ingest_s);
  printf("  stop    %.3f s                 (StopCapture: correlate, write every file)\n", stop_s);
  printf("  e2e     %.3f s  %.0f events/s   (first batch -> files written)\n", e2e_s, sent / e2e_s);
  if (daemon_pid > 0) {
    printf("  daemon  peak RSS %.1f MiB (now %.1f MiB), CPU %.2f s ingesting, %.2f s stopping\n",
           hwm_kb / 1024.0, rss_kb / 1024.0, daemon_cpu_ingest - daemon_cpu_start,
           daemon_cpu_stop - daemon_cpu_ingest);
  }
  printf("  trace.pftrace %" PRId64 " bytes (%.1f B/event), trace.json %" PRId64
         " bytes (%.1f B/event) in %s\n",
         pftrace, per_event(pftrace), json, per_event(json), dir.c_str());
  printf("RESULT streams=%u sent=%" PRIu64 " received=%" PRIu64 " in_trace=%" PRIu64
         " dropped=%" PRIu64
         " ingest_s=%.4f stop_s=%.4f e2e_s=%.4f ingest_eps=%.0f e2e_eps=%.0f"
         " daemon_hwm_kb=%" PRId64 " daemon_rss_after_kb=%" PRId64
         " daemon_cpu_ingest_s=%.3f daemon_cpu_stop_s=%.3f"
         " pftrace_bytes=%" PRId64 " json_bytes=%" PRId64 " pftrace_bpe=%.2f json_bpe=%.2f\n",
         streams, sent, status.events_received(), files.events(), files.events_dropped(), ingest_s,
         stop_s, e2e_s, sent / ingest_s, sent / e2e_s, hwm_kb, rss_kb,
         daemon_cpu_ingest - daemon_cpu_start,
         daemon_cpu_stop - daemon_cpu_ingest, pftrace, json, per_event(pftrace), per_event(json));
  return failed.load() ? 1 : 0;
}

}  // namespace
}  // namespace nrtprof::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return nrtprof::bench::Main();
}
