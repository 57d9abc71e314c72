// libFuzzer target: the daemon from a shim message's bytes to the capture's files. Each input
// (fuzz_input.h) is up to four shim streams' messages; they go through CollectorCore exactly
// as CollectorService hands them over (Hello first, then batches; a refusal, garbage or half a
// message ends the stream), into one capture ("seed", the one the recorded seeds name), which
// is then stopped: correlated and written by the daemon's real writers into a temporary
// folder. Every file must then read back (output_checks.h): a crash, a sanitizer report or a
// file that does not read back is a finding.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <ftw.h>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trace/artifact_writer.h"
#include "trace/chrome_json_writer.h"
#include "daemon/collector_core.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "daemon/wire_events.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/nrtprof.pb.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/output_checks.h"

namespace nrtprof::fuzz {
namespace {

using daemon::CollectorCore;

// Time moves on by a microsecond a reading; nothing waits.
class FuzzClock : public daemon::CollectorClock {
 public:
  uint64_t MonotonicNs() override { return now_ += 1000; }
  int64_t RealtimeNs() override { return 1'700'000'000'000'000'000 + now_; }
  void WaitUntil(std::condition_variable*, std::unique_lock<std::mutex>*, uint64_t) override {
    now_ += 1'000'000'000;
  }

 private:
  uint64_t now_ = 1'000'000'000;
};

void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); },
      16, FTW_DEPTH | FTW_PHYS);
}

// Where the captures go, one folder an input: TEST_TMPDIR in the replay test; for the fuzzer,
// /dev/shm when there is one, since the writers fsync every file and tmpfs makes that free.
// Removed with all in it when the program exits.
const std::string& TempRoot() {
  static const std::string* const root = [] {
    const char* bazel = getenv("TEST_TMPDIR");
    const char* shm = "/dev/shm";
    const char* base = bazel != nullptr ? bazel : access(shm, W_OK) == 0 ? shm : "/tmp";
    auto* made = new std::string(absl::StrCat(base, "/nrtprof-fuzz-XXXXXX"));
    if (mkdtemp(made->data()) == nullptr) {
      perror("mkdtemp");
      abort();
    }
    atexit([] { RemoveTree(TempRoot()); });
    return made;
  }();
  return *root;
}

[[noreturn]] void Finding(const std::string& what) {
  fprintf(stderr, "collector_fuzzer: %s\n", what.c_str());
  abort();
}

// The daemon's writers (nrtprofd_main.cc's ProductionSink), noting how many rows the
// summary they were given has.
class CheckedSink : public daemon::TraceSink {
 public:
  CheckedSink() {
    std::vector<std::unique_ptr<daemon::TraceSink>> sinks;
    sinks.push_back(std::make_unique<daemon::PerfettoWriter>());
    sinks.push_back(std::make_unique<daemon::ChromeJsonWriter>());
    sinks.push_back(std::make_unique<daemon::SummarySink>());
    sinks.push_back(std::make_unique<daemon::ArtifactWriter>());
    writers_ = std::make_unique<daemon::CompositeSink>(std::move(sinks));
  }
  absl::Status Write(const daemon::Trace& trace, const daemon::Summary& summary,
                     const std::string& output_dir, std::vector<std::string>* files) override {
    rows = summary.rows.size();
    return writers_->Write(trace, summary, output_dir, files);
  }
  size_t rows = 0;

 private:
  std::unique_ptr<daemon::TraceSink> writers_;
};

// The daemon's own readers of a message's bytes (daemon/wire_events.h) against protobuf's
// parse (`parsed`, null if it refused them): the counter must count whatever protobuf parses,
// and what the wire reader takes it must read as protobuf does.
void CheckWireReaders(absl::string_view message, bool truncated,
                      const nrtprof::ShimMessage* parsed) {
  if (truncated) return;
  const std::string_view bytes(message.data(), message.size());
  uint64_t elements = 0;
  if (!daemon::CountWireElements(bytes, &elements) && parsed != nullptr) {
    Finding("CountWireElements failed on a message protobuf parses");
  }
  nrtprof::EventBatch rest;
  std::vector<daemon::IngestedEvent> events;
  std::string scratch;
  if (!daemon::ReadWireBatch(bytes, &rest, &events, &scratch)) return;
  if (parsed == nullptr || !parsed->has_batch()) {
    Finding("ReadWireBatch took a message protobuf refuses, or one without a batch");
  }
  // The events of `events`, then of events_encoded, as the ingest takes them from protobuf.
  std::vector<daemon::IngestedEvent> expected;
  if (!daemon::RecordsOf(parsed->batch(), &expected)) {
    Finding("ReadWireBatch took an events_encoded the ingest refuses");
  }
  if (events.size() != expected.size()) {
    Finding("ReadWireBatch read another number of events than protobuf");
  }
  for (size_t i = 0; i < events.size() && i < expected.size(); ++i) {
    if (!daemon::SameRecord(events[i], expected[i])) {
      Finding(absl::StrCat("ReadWireBatch read event ", i, " otherwise than protobuf"));
    }
  }
  nrtprof::EventBatch without = parsed->batch();
  without.clear_events();
  without.clear_events_encoded();
  if (rest.SerializeAsString() != without.SerializeAsString()) {
    Finding("ReadWireBatch's rest of the batch is not protobuf's");
  }
}

// One slot of the input's four streams, as CollectorService's ShimStream keeps it.
struct Slot {
  CollectorCore::StreamId id = 0;
  bool open = false;        // the stream exists (it may not have said Hello yet)
  bool hello_seen = false;
};

void Run(absl::string_view input) {
  // Each input's folder is removed after it, the root at exit.
  const std::string& root = TempRoot();
  static uint64_t run = 0;
  const std::string dir = absl::StrCat(root, "/", ++run);

  daemon::CollectorOptions options;
  options.address = "unix:/fuzz.sock";
  options.output_root = root;
  options.daemon_version = "fuzz";
  CheckedSink sink;
  FuzzClock clock;
  CollectorCore core(options, &sink, &clock);

  nrtprof::StartCaptureRequest start;
  start.set_capture_id("seed");  // as the recorded streams name it (NRTPROF_CAPTURE)
  start.set_output_dir(dir);
  start.set_stack_depth(8);
  if (absl::StatusOr<nrtprof::StartCaptureReply> s = core.StartCapture(start); !s.ok()) {
    Finding(absl::StrCat("StartCapture: ", s.status().ToString()));
  }

  Slot slots[kStreams];
  CollectorCore::StreamId next_id = 1;
  auto close = [&](Slot* slot) {
    if (slot->hello_seen) core.OnStreamClosed(slot->id);
    *slot = Slot();
  };
  for (const FuzzRecord& r : SplitRecords(input)) {
    Slot* slot = &slots[r.stream];
    if (!slot->open) {
      slot->open = true;
      slot->id = next_id++;
    }
    nrtprof::ShimMessage m;
    const bool parsed = !r.truncated && m.ParseFromArray(r.message.data(), r.message.size());
    CheckWireReaders(r.message, r.truncated, parsed ? &m : nullptr);
    bool keep = parsed;
    if (keep && !slot->hello_seen) {
      keep = m.msg_case() == nrtprof::ShimMessage::kHello &&
             core.OnHello(slot->id, m.hello(), [](const nrtprof::CaptureControl&) {}).ok();
      slot->hello_seen = keep;
    } else if (keep) {
      keep = m.msg_case() == nrtprof::ShimMessage::kBatch && core.OnBatch(slot->id, m.batch()).ok();
    }
    if (!keep || r.close_after) close(slot);
    if (r.status_after) core.Status();
  }

  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("seed");
  stop.set_wait_ms(1);
  absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
  for (Slot& slot : slots) close(&slot);
  if (!files.ok()) Finding(absl::StrCat("StopCapture: ", files.status().ToString()));
  if (absl::Status s = CheckUtf8(files->summary_text()); !s.ok()) {
    Finding(absl::StrCat("the summary table in StopCapture's reply: ", s.ToString()));
  }
  if (absl::Status s = CheckCaptureFolder(dir, sink.rows); !s.ok()) Finding(s.ToString());
  if (getenv("NRTPROF_FUZZ_VERBOSE") != nullptr) {
    fprintf(stderr, "collector_fuzzer: %u processes, %llu events, %zu rows, %d files\n",
            files->processes(), static_cast<unsigned long long>(files->events()), sink.rows,
            files->files_size());
  }
  RemoveTree(dir);
}

}  // namespace
}  // namespace nrtprof::fuzz

// Under ASan (the fuzzer's build): the shadow of a block larger than this is cleared by mapping
// it afresh rather than by memset (64 KiB by default). The daemon's writers buffer each file in a
// block of 1 MiB (trace/atomic_file.cc), so every file of every input paid an mmap, its page
// faults and TLB flushes for its shadow; memset gives the same zeros for less. No check changes.
extern "C" const char* __asan_default_options() {
  return "clear_shadow_mmap_threshold=16777216";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // protobuf logs every string field that is not UTF-8: thousands of lines a second.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  nrtprof::fuzz::Run(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
