// nrtprof_recorder_bench: the flight recorder's figures (issue 14), on one core, without gRPC:
//
//   record     each serialized batch read as the collector service reads it (ReadWireBatch) and
//              CollectorCore::OnBatch with the recorder on and no capture: the interning state
//              and a copy of the batch as it came -- what a standing daemon does all the time.
//              Events per second of the thread's CPU time.
//   held       the recorder's bytes per event held (FlightRecorder::Stats), bookkeeping included.
//   last       `capture --last` of everything recorded: StartCapture(last_ms) + StopCapture,
//              decoding the recorded batches, correlating and writing the files, twice from the
//              same recording: every file nrtprofd writes (trace.pftrace, trace.json, the
//              summary, the artifacts), then trace.pftrace and the summary alone (issue 14's
//              figure). Events per second of the thread's CPU time, and the peak resident
//              memory during the capture (VmHWM, reset before it), above the RSS before it.
//
// The batches are the synthetic RMSNorm processes of nrtprof_loadgen (synthetic_process.h),
// round robin over --processes streams. Prints figures; asserts nothing.
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/load/synthetic_process.h"
#include "trace/artifact_writer.h"
#include "trace/chrome_json_writer.h"
#include "daemon/collector_core.h"
#include "trace/huge_page_allocator.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "trace/trace_lanes.h"
#include "daemon/wire_events.h"
#include "google/protobuf/arena.h"
#include "proto/nrtprof.pb.h"

ABSL_FLAG(uint64_t, events, 3'000'000, "events in all");
ABSL_FLAG(uint32_t, processes, 4, "synthetic processes (streams)");
ABSL_FLAG(uint32_t, threads, 2, "host threads per process");
ABSL_FLAG(uint32_t, batch_events, 1000, "events per batch");
ABSL_FLAG(bool, write, true, "also time capture --last of everything (the writers)");
ABSL_FLAG(std::string, codec, "lz4", "how the recorder keeps batches: none, lz4 or zstd");
ABSL_FLAG(std::string, dump, "", "write the recorded batches, as they came, to this file");
ABSL_FLAG(std::string, captures, "both",
          "which capture --last to time: every (every file), pftrace (trace.pftrace + summary) "
          "or both (every, then pftrace)");
ABSL_FLAG(bool, keep_files, true, "leave the captures' files (in $TMPDIR, else /tmp) when done");

namespace nrtprof::bench {
namespace {

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Resident memory from /proc/self/status: "VmRSS" now, "VmHWM" the peak since the last reset.
uint64_t StatusKiB(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return strtoull(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

// Makes VmHWM start again from the current RSS (proc(5), clear_refs "5").
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Hands each capture to one of several sink sets, chosen between captures.
class SwitchSink : public daemon::TraceSink {
 public:
  void Use(daemon::TraceSink* sink) { sink_ = sink; }
  absl::Status Write(const daemon::Trace& trace, const daemon::Summary& summary,
                     const std::string& output_dir, std::vector<std::string>* files) override {
    return sink_->Write(trace, summary, output_dir, files);
  }
  // streams:begin (run_capture_last.sh drops this for a daemon older than TraceStream)
  std::unique_ptr<daemon::TraceStream> OpenStream(const std::string& output_dir) override {
    return sink_->OpenStream(output_dir);
  }
  // streams:end

 private:
  daemon::TraceSink* sink_ = nullptr;
};

std::unique_ptr<daemon::TraceSink> Sinks(bool everything) {
  std::vector<std::unique_ptr<daemon::TraceSink>> sinks;
  std::vector<std::unique_ptr<daemon::LaneSink>> traces;
  traces.push_back(std::make_unique<daemon::PerfettoWriter>());
  if (everything) traces.push_back(std::make_unique<daemon::ChromeJsonWriter>());
  sinks.push_back(std::make_unique<daemon::LaneSinkGroup>(std::move(traces)));
  sinks.push_back(std::make_unique<daemon::SummarySink>());
  if (everything) sinks.push_back(std::make_unique<daemon::ArtifactWriter>());
  return std::make_unique<daemon::CompositeSink>(std::move(sinks));
}

// `capture --last` of everything recorded, written by the sink `sink` now uses.
bool CaptureLast(daemon::CollectorCore* core, const std::string& id, const char* what,
                 const std::string& root) {
  nrtprof::StartCaptureRequest request;
  request.set_capture_id(id);
  request.set_last_ms(3'600'000);
  const uint64_t rss_before = StatusKiB("VmRSS");
  ResetPeakRss();
  const double last_start = CpuNow();
  if (!core->StartCapture(request).ok()) return false;
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id(id);
  absl::StatusOr<nrtprof::CaptureFiles> files = core->StopCapture(stop);
  const double last_s = CpuNow() - last_start;
  const uint64_t peak = StatusKiB("VmHWM");
  if (!files.ok()) {
    fprintf(stderr, "capture: %s\n", files.status().ToString().c_str());
    return false;
  }
  const double events = static_cast<double>(files->events());
  const double added = peak > rss_before ? static_cast<double>(peak - rss_before) * 1024 : 0;
  printf("last, %s: %.3f s CPU for %" PRIu64
         " events: %.2f M events/s; peak RSS %.0f MiB, %.0f MiB over the %.0f MiB before "
         "(%.0f B/event) (files in %s/%s)\n",
         what, last_s, static_cast<uint64_t>(files->events()), events / last_s / 1e6,
         peak / 1024.0, added / (1 << 20), rss_before / 1024.0, added / events, root.c_str(),
         id.c_str());
  return true;
}

int Main() {
  const uint64_t events = absl::GetFlag(FLAGS_events);
  const uint32_t processes = std::max<uint32_t>(absl::GetFlag(FLAGS_processes), 1);
  const uint32_t batch_events = std::max<uint32_t>(absl::GetFlag(FLAGS_batch_events), 1);

  WireBatches made = MakeWireBatches(events, processes, absl::GetFlag(FLAGS_threads),
                                     batch_events, /*final=*/false);
  std::vector<std::string>& wire = made.batches;
  const std::vector<uint32_t>& wire_process = made.process;
  const std::vector<nrtprof::Hello>& hellos = made.hellos;
  const uint64_t total = made.events;
  if (const std::string dump = absl::GetFlag(FLAGS_dump); !dump.empty()) {
    FILE* f = fopen(dump.c_str(), "w");
    for (const std::string& w : wire) fwrite(w.data(), 1, w.size(), f);
    fclose(f);
  }

  const char* tmp = getenv("TMPDIR");
  std::string root = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                  "/nrtprof-recorder-bench-XXXXXX");
  if (mkdtemp(root.data()) == nullptr) return 1;
  daemon::CollectorOptions options;
  options.output_root = root;
  options.limits.max_events_per_process = ~uint64_t{0};
  options.flight_recorder = true;
  options.flight_recorder_limits.max_age_ns = 3600ull * 1'000'000'000;
  options.flight_recorder_limits.max_bytes = 64ull << 30;
  const std::string codec = absl::GetFlag(FLAGS_codec);
  options.flight_recorder_codec = codec == "none"   ? daemon::FlightRecorder::Codec::kNone
                                  : codec == "zstd" ? daemon::FlightRecorder::Codec::kZstd
                                                    : daemon::FlightRecorder::Codec::kLz4;
  const std::unique_ptr<daemon::TraceSink> every_file = Sinks(/*everything=*/true);
  const std::unique_ptr<daemon::TraceSink> pftrace_summary = Sinks(/*everything=*/false);
  SwitchSink sink;
  daemon::UseSteadyMallocThresholds();  // as nrtprofd does at its start
  daemon::CollectorCore core(options, &sink, daemon::SystemClock());
  for (uint32_t i = 0; i < processes; ++i) {
    if (!core.OnHello(i + 1, hellos[i], [](const nrtprof::CaptureControl&) {}).ok()) return 1;
  }

  // Read as the collector service reads a stream's batches with the recorder on: the events
  // straight from the bytes into records (wire_events.h), the rest of the batch onto an arena
  // emptied first.
  google::protobuf::ArenaOptions arena_options;
  arena_options.start_block_size = 64 << 10;
  arena_options.max_block_size = 1 << 20;
  google::protobuf::Arena arena(arena_options);
  std::vector<daemon::IngestedEvent> records;
  std::string scratch;
  const double start = CpuNow();
  for (size_t b = 0; b < wire.size(); ++b) {
    arena.Reset();
    auto* rest = google::protobuf::Arena::CreateMessage<nrtprof::EventBatch>(&arena);
    if (!daemon::ReadWireBatch(wire[b], rest, &records, &scratch)) return 1;
    absl::StatusOr<uint64_t> ack =
        core.OnBatch(wire_process[b] + 1, *rest, records, std::move(wire[b]));
    if (!ack.ok()) {
      fprintf(stderr, "refused: %s\n", ack.status().ToString().c_str());
      return 1;
    }
  }
  const double record_s = CpuNow() - start;
  const nrtprof::StatusReply status = core.Status();
  const nrtprof::FlightRecorderStatus& r = status.flight_recorder();
  printf("events %" PRIu64 " in %zu batches over %u streams, codec %s\n", total, wire.size(),
         processes, codec.c_str());
  printf("record: %.3f s CPU, %.2f M events/s\n", record_s, total / record_s / 1e6);
  printf("held:   %" PRIu64 " bytes for %" PRIu64 " events: %.1f bytes/event\n",
         static_cast<uint64_t>(r.bytes()), static_cast<uint64_t>(r.events()),
         static_cast<double>(r.bytes()) / static_cast<double>(r.events()));
  if (!absl::GetFlag(FLAGS_write)) return 0;

  const std::string captures = absl::GetFlag(FLAGS_captures);
  if (captures != "both" && captures != "every" && captures != "pftrace") {
    fprintf(stderr, "nrtprof_recorder_bench: --captures is every, pftrace or both, not '%s'\n",
            captures.c_str());
    return 2;
  }
  bool ok = true;
  if (captures != "pftrace") {
    sink.Use(every_file.get());
    ok = CaptureLast(&core, "last", "every file", root);
  }
  if (captures != "every") {
    sink.Use(pftrace_summary.get());
    ok = ok && CaptureLast(&core, "last-pftrace", "trace.pftrace + summary", root);
  }
  if (!absl::GetFlag(FLAGS_keep_files)) std::filesystem::remove_all(root);
  if (!ok) return 1;
  return 0;
}

}  // namespace
}  // namespace nrtprof::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return nrtprof::bench::Main();
}
