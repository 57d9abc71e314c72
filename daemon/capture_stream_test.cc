// A capture written a process at a time (TraceStream, CaptureCorrelator, SummaryBuilder) must
// give the files the whole Trace gives: the same packets in trace.pftrace, the same bytes in
// every other file.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/load/synthetic_process.h"
#include "trace/artifact_writer.h"
#include "trace/chrome_json_writer.h"
#include "daemon/collector_core.h"
#include "trace/correlator.h"
#include "daemon/ingest.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "trace/trace_from_pftrace.h"
#include "trace/trace_lanes.h"
#include "trace/trace_sink.h"
#include "trace/writer_test_util.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

constexpr char kCaptureId[] = "streamed";
constexpr int64_t kRealtimeOffsetNs = 1'700'000'000'000'000'000;

// What the streams of a few synthetic processes sent during a capture: two on one host, one of
// them with the same pid on another host (so the order is by pid, then host), as ingest keeps it.
std::vector<ProcessCapture> Captures() {
  struct Spec {
    uint32_t pid;
    const char* host;
    uint32_t threads;
    uint32_t batches;
  };
  const Spec specs[] = {{4242, "b", 2, 3}, {17, "a", 1, 2}, {4242, "a", 3, 4}};
  std::vector<ProcessCapture> out;
  for (const Spec& spec : specs) {
    bench::SyntheticProcessOptions options;
    options.pid = spec.pid;
    options.host = spec.host;
    options.threads = spec.threads;
    options.start_ns = 5'000'000'000 + spec.pid * 1000;
    bench::SyntheticProcess process(options);
    ProcessIngest ingest(process.MakeHello(), IngestLimits());
    ingest.BeginCapture();
    nrtprof::EventBatch batch;
    for (uint32_t b = 1; b <= spec.batches; ++b) {
      process.NextBatch(300, /*final=*/b == spec.batches, &batch);
      EXPECT_TRUE(ingest.OnBatch(batch).ok());
    }
    out.push_back(ingest.TakeCapture());
  }
  return out;
}

// Every file nrtprofd writes (nrtprofd_main.cc's ProductionSink).
std::unique_ptr<TraceSink> EveryFile() {
  std::vector<std::unique_ptr<LaneSink>> lanes;
  lanes.push_back(std::make_unique<PerfettoWriter>());
  lanes.push_back(std::make_unique<ChromeJsonWriter>());
  std::vector<std::unique_ptr<TraceSink>> sinks;
  sinks.push_back(std::make_unique<LaneSinkGroup>(std::move(lanes)));
  sinks.push_back(std::make_unique<SummarySink>());
  sinks.push_back(std::make_unique<ArtifactWriter>());
  return std::make_unique<CompositeSink>(std::move(sinks));
}

TEST(CaptureStreamTest, ProcessAtATimeWritesTheWholeTracesFiles) {
  const std::unique_ptr<TraceSink> sink = EveryFile();

  const std::string whole_dir = TempDir("capture_stream_whole");
  const Trace trace = Correlate(kCaptureId, Captures(), kRealtimeOffsetNs);
  ASSERT_EQ(trace.processes.size(), 3u);
  std::vector<std::string> whole_files;
  ASSERT_TRUE(sink->Write(trace, ComputeSummary(trace), whole_dir, &whole_files).ok());

  const std::string streamed_dir = TempDir("capture_stream_streamed");
  std::unique_ptr<TraceStream> stream = sink->OpenStream(streamed_dir);
  ASSERT_NE(stream, nullptr);
  std::vector<ProcessCapture> raw = Captures();
  CaptureCorrelator correlator(kCaptureId, kRealtimeOffsetNs);
  SummaryBuilder summary;
  std::vector<uint32_t> pids;
  for (const std::vector<size_t>& group : ProcessOrder(raw)) {
    std::vector<ProcessCapture*> streams;
    for (size_t i : group) streams.push_back(&raw[i]);
    Trace one;
    one.capture_id = kCaptureId;
    one.processes.push_back(correlator.Next(streams));
    pids.push_back(one.processes[0].pid);
    EXPECT_TRUE(raw[group[0]].events.empty()) << "a process's events are freed once correlated";
    summary.Add(one);
    ASSERT_TRUE(stream->Add(one).ok());
  }
  EXPECT_EQ(pids, (std::vector<uint32_t>{17, 4242, 4242}));
  EXPECT_EQ(correlator.header().start_ns, trace.start_ns);
  EXPECT_EQ(correlator.header().end_ns, trace.end_ns);
  std::vector<std::string> streamed_files;
  ASSERT_TRUE(stream->Finish(correlator.header(), summary.Finish(correlator.header()),
                             &streamed_files)
                  .ok());

  EXPECT_EQ(streamed_files, whole_files);
  // Six models on two NeuronCores: a device trace each, named by the models' names.
  EXPECT_EQ(whole_files.size(), 5u + 12u) << absl::StrJoin(whole_files, " ");
  for (const std::string& name : whole_files) {
    if (name == "trace.pftrace") continue;  // its bundles may be cut elsewhere: packets below
    EXPECT_EQ(ReadFile(streamed_dir + "/" + name), ReadFile(whole_dir + "/" + name)) << name;
  }
  EXPECT_NE(ReadFile(whole_dir + "/summary.txt").find("aten::mul"), std::string::npos);

  absl::StatusOr<ReadTrace> whole = ReadPerfettoTrace(ReadFile(whole_dir + "/trace.pftrace"));
  absl::StatusOr<ReadTrace> streamed =
      ReadPerfettoTrace(ReadFile(streamed_dir + "/trace.pftrace"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_EQ(streamed->trace.packet_size(), whole->trace.packet_size());
  // Three processes with threads and cores: well over a hundred packets, flows among them.
  EXPECT_GT(whole->trace.packet_size(), 100);
  size_t flows = 0;
  for (int i = 0; i < whole->trace.packet_size(); ++i) {
    EXPECT_EQ(streamed->trace.packet(i).SerializeAsString(),
              whole->trace.packet(i).SerializeAsString())
        << "packet " << i;
    flows += whole->trace.packet(i).track_event().flow_ids_size();
  }
  EXPECT_GT(flows, 0u);
  EXPECT_EQ(streamed->times, whole->times);
}

// `p` in two parts (ProcessTrace::continues), cut for each thread where nothing of it is open:
// at the start of its middle outermost range. Device work goes with the thread that submitted
// it.
std::vector<ProcessTrace> InTwo(const ProcessTrace& p) {
  std::map<uint32_t, std::vector<uint64_t>> outermost;  // by tid: its depth-0 ranges' starts
  for (const RangeEvent& r : p.ranges) {
    if (r.depth == 0) outermost[r.tid].push_back(r.start_ns);
  }
  std::map<uint32_t, uint64_t> cut;
  for (auto& [tid, starts] : outermost) {
    std::sort(starts.begin(), starts.end());
    cut[tid] = starts[starts.size() / 2];
  }
  auto part_of = [&](uint32_t tid, uint64_t start) -> size_t {
    auto it = cut.find(tid);
    return it != cut.end() && start >= it->second ? 1 : 0;
  };
  std::vector<ProcessTrace> parts(2);
  for (ProcessTrace& part : parts) {
    part.names = p.names;
    part.pid = p.pid;
    part.host = p.host;
    part.executable = p.executable;
    part.command_line = p.command_line;
    part.thread_names = p.thread_names;
  }
  // The models with the first part; the counts with the last, as when they are known only
  // once all of the process was read.
  parts[0].models = p.models;
  parts[1].notices = p.notices;
  parts[1].drops = p.drops;
  parts[1].events_received = p.events_received;
  parts[1].batches_missing = p.batches_missing;
  parts[1].cut_off = p.cut_off;
  parts[1].executions_held_by_program = p.executions_held_by_program;
  parts[1].continues = true;
  std::map<uint64_t, size_t> range_part, call_part, device_part;
  for (const RangeEvent& r : p.ranges) {
    range_part[r.id] = part_of(r.tid, r.start_ns);
    parts[range_part[r.id]].ranges.push_back(r);
  }
  for (const ApiCall& c : p.calls) {
    call_part[c.correlation_id] = part_of(c.tid, c.start_ns);
    parts[call_part[c.correlation_id]].calls.push_back(c);
    if (c.range != 0) {
      EXPECT_EQ(range_part[c.range], call_part[c.correlation_id]);
    }
  }
  for (const DeviceEvent& d : p.device) {
    device_part[d.id] = part_of(d.submitting_tid, d.start_ns);
    ProcessTrace& part = parts[device_part[d.id]];
    part.device.push_back(d);
    if (d.correlation_id == 0) ++part.device_uncorrelated;
    if (d.correlation_id != 0) {
      EXPECT_EQ(call_part[d.correlation_id], device_part[d.id]);
    }
    if (d.parent != 0) {
      EXPECT_EQ(device_part[d.parent], device_part[d.id]);
    }
  }
  return parts;
}

// The lines of a trace.json, sorted, each without its closing comma and with flow ids left
// out (they are numbered in the order the lanes were laid out, part by part).
std::vector<std::string> JsonLines(const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(ReadFile(path), '\n');
  for (std::string& line : lines) {
    if (absl::EndsWith(line, ",")) line.pop_back();
    const size_t id = line.find("\"id\":");
    if (absl::StartsWith(line, "{\"ph\":\"") && id != std::string::npos) {
      line.erase(id + 5, line.find_first_not_of("0123456789", id + 5) - (id + 5));
    }
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

// JsonLines of a trace.json, with the capture's id left out.
std::vector<std::string> JsonLinesWithout(const std::string& path, const std::string& id) {
  std::vector<std::string> lines = JsonLines(path);
  for (std::string& line : lines) line = absl::StrReplaceAll(line, {{id, ""}});
  return lines;
}

// A big process may be written in parts, so that a writer never holds all of its events
// (ProcessTrace::continues): split so, the processes give the files they give whole -- the
// same summary, device traces and models byte for byte, and traces with the same events.
TEST(CaptureStreamTest, AProcessInPartsWritesWhatTheWholeProcessWrites) {
  const std::unique_ptr<TraceSink> sink = EveryFile();
  const std::string whole_dir = TempDir("capture_parts_whole");
  Trace trace = Correlate(kCaptureId, Captures(), kRealtimeOffsetNs);
  // Counts of each kind, in both parts: an execution late in the process that lost its call,
  // one early; drops, a notice, missing batches.
  for (ProcessTrace& p : trace.processes) {
    for (size_t i : {p.device.size() / 4, p.device.size() * 3 / 4}) {
      size_t e = i;
      while (e < p.device.size() && p.device[e].kind != DeviceEventKind::kExecution) ++e;
      ASSERT_LT(e, p.device.size());
      for (DeviceEvent& d : p.device) {  // it and its work
        if (d.correlation_id == p.device[e].correlation_id && &d != &p.device[e]) {
          d.correlation_id = 0;
          ++p.device_uncorrelated;
        }
      }
      p.device[e].correlation_id = 0;
      ++p.device_uncorrelated;
    }
    p.drops.ring_full = 3;
    p.drops.by_lane.runtime = 3;
    p.batches_missing = 1;
    p.notices.push_back("a notice");
  }
  std::vector<std::string> whole_files;
  ASSERT_TRUE(sink->Write(trace, ComputeSummary(trace), whole_dir, &whole_files).ok());

  const std::string parts_dir = TempDir("capture_parts_parts");
  std::unique_ptr<TraceStream> stream = sink->OpenStream(parts_dir);
  ASSERT_NE(stream, nullptr);
  SummaryBuilder summary;
  size_t added = 0;
  // Not the process whose three threads share two NeuronCores: the synthetic threads keep
  // clocks of their own, so their executions on a shared core overlap, and the lanes clamp
  // overlapping slices part by part (a real core runs one execution at a time).
  auto shares_a_core = [](const ProcessTrace& p) {
    std::map<int32_t, std::set<uint32_t>> threads_of_core;
    for (const DeviceEvent& d : p.device) {
      if (d.kind == DeviceEventKind::kExecution) {
        threads_of_core[d.nc_idx].insert(d.submitting_tid);
      }
    }
    for (const auto& [nc, threads] : threads_of_core) {
      if (threads.size() > 1) return true;
    }
    return false;
  };
  for (const ProcessTrace& p : trace.processes) {
    if (shares_a_core(p)) {
      Trace one;
      one.capture_id = kCaptureId;
      one.realtime_offset_ns = trace.realtime_offset_ns;
      one.processes.push_back(p);
      summary.Add(one);
      ASSERT_TRUE(stream->Add(one).ok());
      continue;
    }
    for (ProcessTrace& part : InTwo(p)) {
      EXPECT_FALSE(part.calls.empty() || part.device.empty() || part.ranges.empty())
          << "pid " << p.pid << ": each part has events of every lane";
      Trace one;
      one.capture_id = kCaptureId;
      one.realtime_offset_ns = trace.realtime_offset_ns;
      one.processes.push_back(std::move(part));
      summary.Add(one);
      ASSERT_TRUE(stream->Add(one).ok());
      ++added;
    }
  }
  EXPECT_EQ(added, 4u) << "two processes in two parts each";
  Trace header = trace;
  header.processes.clear();
  std::vector<std::string> parts_files;
  ASSERT_TRUE(stream->Finish(header, summary.Finish(header), &parts_files).ok());

  EXPECT_EQ(parts_files, whole_files);
  for (const std::string& name : whole_files) {
    if (name == "trace.pftrace") continue;
    if (name == "trace.json") {
      EXPECT_EQ(JsonLines(parts_dir + "/" + name), JsonLines(whole_dir + "/" + name));
      continue;
    }
    EXPECT_EQ(ReadFile(parts_dir + "/" + name), ReadFile(whole_dir + "/" + name)) << name;
  }
  // trace.pftrace: the parts go on on the process's tracks (one process track per process, one
  // thread track per thread), and the events read back give the same table.
  absl::StatusOr<ReadTrace> whole = ReadPerfettoTrace(ReadFile(whole_dir + "/trace.pftrace"));
  absl::StatusOr<ReadTrace> parts = ReadPerfettoTrace(ReadFile(parts_dir + "/trace.pftrace"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto tracks = [](const ReadTrace& read) {
    std::vector<std::string> names;
    for (const auto& packet : read.trace.packet()) {
      if (!packet.has_track_descriptor()) continue;
      const auto& t = packet.track_descriptor();
      names.push_back(t.has_thread()    ? absl::StrCat("thread ", t.thread().tid())
                      : t.has_process() ? absl::StrCat("process ", t.process().pid())
                                        : t.name());
    }
    return names;
  };
  EXPECT_EQ(tracks(*parts), tracks(*whole));
  absl::StatusOr<Trace> whole_read = TraceFromPerfetto(*whole);
  absl::StatusOr<Trace> parts_read = TraceFromPerfetto(*parts);
  ASSERT_TRUE(whole_read.ok()) << whole_read.status();
  ASSERT_TRUE(parts_read.ok()) << parts_read.status();
  ASSERT_EQ(parts_read->processes.size(), whole_read->processes.size());
  for (size_t i = 0; i < whole_read->processes.size(); ++i) {
    const ProcessTrace& a = parts_read->processes[i];
    const ProcessTrace& b = whole_read->processes[i];
    EXPECT_EQ(a.device_uncorrelated, b.device_uncorrelated);
    EXPECT_GE(b.device_uncorrelated, 4u);
    EXPECT_EQ(a.drops.ring_full, 3u);
    EXPECT_EQ(a.batches_missing, 1u);
    EXPECT_EQ(a.notices, b.notices);
    EXPECT_EQ(parts_read->processes[i].ranges.size(), whole_read->processes[i].ranges.size());
    EXPECT_EQ(parts_read->processes[i].calls.size(), whole_read->processes[i].calls.size());
    EXPECT_EQ(parts_read->processes[i].device.size(), whole_read->processes[i].device.size());
  }
  EXPECT_EQ(FormatSummary(ComputeSummary(*parts_read)), FormatSummary(ComputeSummary(*whole_read)));
}

// Hands each capture to the sink set chosen before it; `whole` hides the sinks' streams.
class SwitchSink : public TraceSink {
 public:
  explicit SwitchSink(TraceSink* sink) : sink_(sink) {}
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    ++writes;
    return sink_->Write(trace, summary, output_dir, files);
  }
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override {
    return whole ? nullptr : sink_->OpenStream(output_dir);
  }
  bool whole = false;
  int writes = 0;

 private:
  TraceSink* sink_;
};

// The packets of a trace.pftrace, each serialized, with the capture's id replaced by `as`
// (same length), so that two captures of one recording compare.
std::vector<std::string> Packets(const std::string& path, const std::string& id,
                                 const std::string& as) {
  absl::StatusOr<ReadTrace> read = ReadPerfettoTrace(ReadFile(path));
  EXPECT_TRUE(read.ok()) << read.status();
  std::vector<std::string> out;
  if (!read.ok()) return out;
  for (const auto& packet : read->trace.packet()) {
    std::string bytes = packet.SerializeAsString();
    for (size_t at = bytes.find(id); at != std::string::npos; at = bytes.find(id, at + as.size())) {
      bytes.replace(at, id.size(), as);
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

// capture --last on a daemon whose writers all stream: each process's recorded batches are
// decoded only when its turn comes, and the files are those of the capture written whole.
TEST(CaptureStreamTest, ACaptureOfThePastIsDecodedAProcessAtATime) {
  const std::unique_ptr<TraceSink> files = EveryFile();
  SwitchSink sink(files.get());
  CollectorOptions options;
  options.output_root = TempDir("capture_stream_recorder");
  options.flight_recorder = true;
  CollectorCore core(options, &sink, SystemClock());
  const uint32_t pids[] = {300, 100, 200};
  for (uint32_t i = 0; i < 3; ++i) {
    bench::SyntheticProcessOptions p;
    p.pid = pids[i];
    p.threads = 2;
    p.start_ns = 7'000'000'000 + i * 1'000'000;
    bench::SyntheticProcess process(p);
    ASSERT_TRUE(core.OnHello(i + 1, process.MakeHello(), [](const nrtprof::CaptureControl&) {})
                    .ok());
    nrtprof::EventBatch batch;
    for (int b = 0; b < 3; ++b) {
      process.NextBatch(200, /*final=*/false, &batch);
      ASSERT_TRUE(core.OnBatch(i + 1, batch).ok());
    }
  }
  auto capture_last = [&](const std::string& id) {
    nrtprof::StartCaptureRequest start;
    start.set_capture_id(id);
    start.set_last_ms(3'600'000);
    absl::StatusOr<nrtprof::StartCaptureReply> started = core.StartCapture(start);
    EXPECT_TRUE(started.ok()) << started.status();
    nrtprof::StopCaptureRequest stop;
    stop.set_capture_id(id);
    absl::StatusOr<nrtprof::CaptureFiles> written = core.StopCapture(stop);
    EXPECT_TRUE(written.ok()) << written.status();
    return written.value_or(nrtprof::CaptureFiles());
  };
  sink.whole = true;
  const nrtprof::CaptureFiles whole = capture_last("last-a");
  EXPECT_EQ(sink.writes, 1);
  sink.whole = false;
  const nrtprof::CaptureFiles streamed = capture_last("last-b");
  EXPECT_EQ(sink.writes, 1) << "the second capture was not streamed";

  EXPECT_EQ(streamed.processes(), 3u);
  EXPECT_GT(streamed.events(), 1000u);
  EXPECT_EQ(streamed.events(), whole.events());
  EXPECT_EQ(streamed.summary_text(), absl::StrReplaceAll(whole.summary_text(),
                                                         {{"last-a", "last-b"}}));
  EXPECT_EQ(std::vector<std::string>(streamed.files().begin(), streamed.files().end()),
            std::vector<std::string>(whole.files().begin(), whole.files().end()));
  const std::vector<std::string> whole_packets =
      Packets(whole.output_dir() + "/trace.pftrace", "last-a", "last-b");
  const std::vector<std::string> streamed_packets =
      Packets(streamed.output_dir() + "/trace.pftrace", "last-b", "last-b");
  EXPECT_GT(whole_packets.size(), 100u);
  EXPECT_TRUE(whole_packets == streamed_packets);
}

// Counts what the streams of a sink are given: processes, and later parts of them.
class CountingSink : public TraceSink {
 public:
  explicit CountingSink(TraceSink* sink) : sink_(sink) {}
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    return sink_->Write(trace, summary, output_dir, files);
  }
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override {
    class Counting : public TraceStream {
     public:
      Counting(std::unique_ptr<TraceStream> stream, CountingSink* sink)
          : stream_(std::move(stream)), sink_(sink) {}
      absl::Status Add(const Trace& trace) override {
        for (const ProcessTrace& p : trace.processes)
          ++(p.continues ? sink_->later_parts : sink_->processes);
        return stream_->Add(trace);
      }
      absl::Status Finish(const Trace& trace, const Summary& summary,
                          std::vector<std::string>* files) override {
        return stream_->Finish(trace, summary, files);
      }

     private:
      std::unique_ptr<TraceStream> stream_;
      CountingSink* sink_;
    };
    std::unique_ptr<TraceStream> stream = sink_->OpenStream(output_dir);
    if (stream == nullptr) return nullptr;
    return std::make_unique<Counting>(std::move(stream), this);
  }
  int processes = 0;
  int later_parts = 0;

 private:
  TraceSink* sink_;
};

// capture --last 1h as `id`: what the core replies.
nrtprof::CaptureFiles LookBackAnHour(CollectorCore* core, const std::string& id) {
  nrtprof::StartCaptureRequest start;
  start.set_capture_id(id);
  start.set_last_ms(3'600'000);
  EXPECT_TRUE(core->StartCapture(start).ok());
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id(id);
  absl::StatusOr<nrtprof::CaptureFiles> written = core->StopCapture(stop);
  EXPECT_TRUE(written.ok()) << written.status();
  return written.value_or(nrtprof::CaptureFiles());
}

// capture --last of a big process: its recorded batches are read in parts, each correlated and
// written before the next is read, and the capture says what the same capture read whole says.
TEST(CaptureStreamTest, ACaptureOfThePastReadsABigProcessInParts) {
  const std::unique_ptr<TraceSink> files = EveryFile();
  auto capture_last = [&](uint64_t part_events, const std::string& id, CountingSink* sink) {
    CollectorOptions options;
    options.output_root = TempDir("capture_stream_parts");
    options.flight_recorder = true;
    options.past_part_events = part_events;
    options.past_part_device_settle_ns = 10'000'000;  // the synthetic device events come at once
    CollectorCore core(options, sink, SystemClock());
    // Two processes of two threads on two NeuronCores, one of one thread, each about 5,000
    // events; and one whose device events all come in its last batch, as from a program that
    // fetches the runtime's system trace itself only at its end.
    const uint32_t pids[] = {300, 100, 200, 400};
    for (uint32_t i = 0; i < 4; ++i) {
      bench::SyntheticProcessOptions p;
      p.pid = pids[i];
      p.threads = i == 2 ? 1 : 2;
      p.start_ns = 7'000'000'000 + i * 1'000'000;
      bench::SyntheticProcess process(p);
      EXPECT_TRUE(
          core.OnHello(i + 1, process.MakeHello(), [](const nrtprof::CaptureControl&) {}).ok());
      nrtprof::EventBatch batch, held;
      for (int b = 0; b < 25; ++b) {
        process.NextBatch(200, /*final=*/false, &batch);
        if (pids[i] == 400) {
          nrtprof::EventBatch rest = batch;
          rest.clear_events();
          for (const nrtprof::Event& e : batch.events()) {
            const bool device = e.kind() == nrtprof::EVENT_DEVICE_EXEC ||
                                e.kind() == nrtprof::EVENT_DEVICE_OP ||
                                e.kind() == nrtprof::EVENT_DEVICE_DMA;
            *(device ? held.add_events() : rest.add_events()) = e;
          }
          batch = rest;
        }
        EXPECT_TRUE(core.OnBatch(i + 1, batch).ok());
      }
      if (pids[i] == 400) {
        held.set_sequence(batch.sequence() + 1);
        EXPECT_TRUE(core.OnBatch(i + 1, held).ok());
      }
    }
    return LookBackAnHour(&core, id);
  };
  CountingSink whole_sink(files.get()), parts_sink(files.get());
  const nrtprof::CaptureFiles whole = capture_last(0, "whole-a", &whole_sink);
  const nrtprof::CaptureFiles parts = capture_last(1000, "parts-a", &parts_sink);
  EXPECT_EQ(whole_sink.processes, 4);
  EXPECT_EQ(whole_sink.later_parts, 0);
  EXPECT_EQ(parts_sink.processes, 4);
  EXPECT_GE(parts_sink.later_parts, 6) << "each process in several parts";

  EXPECT_EQ(parts.processes(), 4u);
  EXPECT_GT(parts.events(), 19000u);
  EXPECT_EQ(parts.events(), whole.events());
  EXPECT_EQ(parts.events_dropped(), whole.events_dropped());
  EXPECT_EQ(parts.summary_text(),
            absl::StrReplaceAll(whole.summary_text(), {{"whole-a", "parts-a"}}));
  EXPECT_EQ(std::vector<std::string>(parts.files().begin(), parts.files().end()),
            std::vector<std::string>(whole.files().begin(), whole.files().end()));
  // Every device event found its call and its execution, as in the whole.
  EXPECT_FALSE(absl::StrContains(parts.summary_text(), "Uncorrelated")) << parts.summary_text();
  EXPECT_FALSE(absl::StrContains(whole.summary_text(), "Uncorrelated")) << whole.summary_text();
  absl::StatusOr<ReadTrace> whole_trace =
      ReadPerfettoTrace(ReadFile(whole.output_dir() + "/trace.pftrace"));
  absl::StatusOr<ReadTrace> parts_trace =
      ReadPerfettoTrace(ReadFile(parts.output_dir() + "/trace.pftrace"));
  ASSERT_TRUE(whole_trace.ok() && parts_trace.ok());
  absl::StatusOr<Trace> whole_read = TraceFromPerfetto(*whole_trace);
  absl::StatusOr<Trace> parts_read = TraceFromPerfetto(*parts_trace);
  ASSERT_TRUE(whole_read.ok()) << whole_read.status();
  ASSERT_TRUE(parts_read.ok()) << parts_read.status();
  ASSERT_EQ(parts_read->processes.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const ProcessTrace& a = parts_read->processes[i];
    const ProcessTrace& b = whole_read->processes[i];
    EXPECT_EQ(a.calls.size(), b.calls.size());
    EXPECT_EQ(a.device.size(), b.device.size());
    EXPECT_EQ(a.device_uncorrelated, 0u);
    EXPECT_EQ(b.device_uncorrelated, 0u);
  }
  EXPECT_EQ(
      FormatSummary(ComputeSummary(*parts_read)),
      absl::StrReplaceAll(FormatSummary(ComputeSummary(*whole_read)), {{"whole-a", "parts-a"}}));
  // trace.json: as many entries (their correlation ids and flow ids are numbered part by part).
  EXPECT_EQ(JsonLinesWithout(parts.output_dir() + "/trace.json", "parts-a").size(),
            JsonLinesWithout(whole.output_dir() + "/trace.json", "whole-a").size());
}

// Sends `core` the Hello and 25 batches of about 200 events of a synthetic process of two
// threads (`pid`), each batch first passed to `adjust`; returns the events sent.
uint64_t SendSyntheticProcess(CollectorCore* core, uint32_t pid,
                              const std::function<void(nrtprof::EventBatch*)>& adjust) {
  bench::SyntheticProcessOptions p;
  p.pid = pid;
  p.threads = 2;
  p.start_ns = 7'000'000'000;
  bench::SyntheticProcess process(p);
  EXPECT_TRUE(core->OnHello(1, process.MakeHello(), [](const nrtprof::CaptureControl&) {}).ok());
  nrtprof::EventBatch batch;
  uint64_t sent = 0;
  for (int b = 0; b < 25; ++b) {
    process.NextBatch(200, /*final=*/false, &batch);
    adjust(&batch);
    sent += static_cast<uint64_t>(batch.events_size());
    EXPECT_TRUE(core->OnBatch(1, batch).ok());
  }
  return sent;
}

// A process's device clock maps to the host's with some error (its sync points are two clocks
// read one after the other; a thread preempted between the readings moves them apart). The
// correlator allows for it (kCauseSlackNs); a look back read in parts must too. Here every
// device event maps `skew_ns` earlier than it ran, so each iteration's first execution (3.4 us
// after its range began) maps before the range: a part cut at that range's start must still
// keep the execution with its call.
TEST(CaptureStreamTest, ALookBackInPartsKeepsEachExecutionWithItsCallThoughTheClocksDisagree) {
  const std::unique_ptr<TraceSink> files = EveryFile();
  auto capture_last = [&](uint64_t part_events, int64_t skew_ns, const std::string& id,
                          CountingSink* sink) {
    CollectorOptions options;
    options.output_root = TempDir("capture_stream_skew");
    options.flight_recorder = true;
    options.past_part_events = part_events;
    options.past_part_device_settle_ns = 10'000'000;  // the synthetic device events come at once
    CollectorCore core(options, sink, SystemClock());
    SendSyntheticProcess(&core, 600, [skew_ns](nrtprof::EventBatch* batch) {
      for (nrtprof::DeviceClockSync& sync : *batch->mutable_clock_syncs()) {
        sync.set_host_monotonic_ns(sync.host_monotonic_ns() - skew_ns);
      }
    });
    return LookBackAnHour(&core, id);
  };
  for (int64_t skew_ns : {int64_t{5'000}, int64_t{50'000}}) {
    SCOPED_TRACE(skew_ns);
    CountingSink whole_sink(files.get()), parts_sink(files.get());
    const std::string whole_id = absl::StrCat("whole-", skew_ns);
    const std::string parts_id = absl::StrCat("parts-", skew_ns);
    const nrtprof::CaptureFiles whole = capture_last(0, skew_ns, whole_id, &whole_sink);
    const nrtprof::CaptureFiles parts = capture_last(1000, skew_ns, parts_id, &parts_sink);
    EXPECT_GE(parts_sink.later_parts, 3) << "read in several parts";
    EXPECT_EQ(parts.events(), whole.events());
    EXPECT_FALSE(absl::StrContains(whole.summary_text(), "Uncorrelated")) << whole.summary_text();
    EXPECT_FALSE(absl::StrContains(parts.summary_text(), "Uncorrelated")) << parts.summary_text();
    EXPECT_EQ(parts.summary_text(),
              absl::StrReplaceAll(whole.summary_text(), {{whole_id, parts_id}}));
  }
}

// A look back over one process of two threads (25 batches of about 200 events) with the
// daemon's per-process bound at 2000 events, read in parts of `part_events` (0: whole).
// Without `ranges`, the process's range events are left out of what it sends. *sent: the
// events it sent.
nrtprof::CaptureFiles BoundedLookBack(TraceSink* files, uint64_t part_events, const std::string& id,
                                      bool ranges, uint64_t* sent) {
  CollectorOptions options;
  options.output_root = TempDir("capture_stream_bound");
  options.flight_recorder = true;
  options.limits.max_events_per_process = 2000;
  options.past_part_events = part_events;
  options.past_part_device_settle_ns = 10'000'000;
  CollectorCore core(options, files, SystemClock());
  *sent = SendSyntheticProcess(&core, 500, [ranges](nrtprof::EventBatch* batch) {
    if (ranges) return;
    nrtprof::EventBatch kept = *batch;
    kept.clear_events();
    for (const nrtprof::Event& e : batch->events()) {
      if (e.kind() != nrtprof::EVENT_RANGE) *kept.add_events() = e;
    }
    *batch = kept;
  });
  return LookBackAnHour(&core, id);
}

// Read in parts, a look back keeps the whole window of a process past the daemon's per-process
// bound (it holds a part at a time); read whole, it keeps the newest and says what it left out.
TEST(CaptureStreamTest, InPartsALookBackKeepsMoreThanTheBound) {
  const std::unique_ptr<TraceSink> files = EveryFile();
  uint64_t sent = 0;
  const nrtprof::CaptureFiles parts = BoundedLookBack(files.get(), 500, "parts", true, &sent);
  const nrtprof::CaptureFiles whole = BoundedLookBack(files.get(), 0, "whole", true, &sent);
  EXPECT_GT(parts.events(), 4000u);
  EXPECT_EQ(parts.events_dropped(), 0u);
  EXPECT_EQ(parts.notes_size(), 0) << parts.notes(0);
  EXPECT_FALSE(absl::StrContains(parts.summary_text(), "Uncorrelated")) << parts.summary_text();
  EXPECT_EQ(whole.events(), 2000u);
  EXPECT_EQ(whole.events_dropped(), parts.events() - 2000);
  ASSERT_EQ(whole.notes_size(), 1);
  EXPECT_TRUE(absl::StrContains(whole.notes(0),
                                "were left out: the daemon keeps at most 2000 "
                                "events of a process"))
      << whole.notes(0);
}

// A process read in parts that cannot be cut (here: device work of threads never seen between
// outermost ranges, for it sends none) is read as one part from there on, bounded as a process
// read whole: what the bound leaves out is counted and said, naming the flag.
TEST(CaptureStreamTest, APartThatCannotBeCutIsBoundedAndSaysSo) {
  const std::unique_ptr<TraceSink> files = EveryFile();
  uint64_t sent = 0;
  const nrtprof::CaptureFiles capture =
      BoundedLookBack(files.get(), 500, "uncut", /*ranges=*/false, &sent);
  ASSERT_GT(sent, 4000u);
  EXPECT_EQ(capture.events(), 2000u);
  EXPECT_EQ(capture.events_dropped(), sent - 2000);
  ASSERT_EQ(capture.notes_size(), 1);
  EXPECT_TRUE(absl::StrContains(capture.notes(0), "pid 500: ")) << capture.notes(0);
  EXPECT_TRUE(absl::StrContains(capture.notes(0), absl::StrCat(sent - 2000,
                                                               " of its events in the window were "
                                                               "left out")))
      << capture.notes(0);
  EXPECT_TRUE(absl::StrContains(capture.notes(0), "nrtprofd --max_events_per_process"))
      << capture.notes(0);
}

// A sink that needs the whole Trace has no stream, and neither has a group holding one.
TEST(CaptureStreamTest, ASinkWithoutAStreamKeepsTheWholeTrace) {
  class WholeOnly : public TraceSink {
   public:
    absl::Status Write(const Trace&, const Summary&, const std::string&,
                       std::vector<std::string>*) override {
      return absl::OkStatus();
    }
  };
  std::vector<std::unique_ptr<TraceSink>> sinks;
  sinks.push_back(std::make_unique<SummarySink>());
  sinks.push_back(std::make_unique<WholeOnly>());
  CompositeSink composite(std::move(sinks));
  EXPECT_EQ(composite.OpenStream(TempDir("capture_stream_none")), nullptr);
  EXPECT_NE(SummarySink().OpenStream(TempDir("capture_stream_summary")), nullptr);
}

}  // namespace
}  // namespace nrtprof::daemon
