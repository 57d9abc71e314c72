#include "client/trace_merge.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "gtest/gtest.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::cli {
namespace {

// One process (pid 100, "app") that made one nrt_execute at `call_ns` on its host's clock,
// written by the daemon's own Perfetto writer; with the host's REALTIME - MONOTONIC if not 0.
std::string HostTraceBytes(uint64_t call_ns, int64_t realtime_minus_monotonic_ns = 0) {
  daemon::Trace trace;
  trace.realtime_offset_ns = realtime_minus_monotonic_ns;
  trace.capture_id = "cap";
  daemon::ProcessTrace& p = trace.processes.emplace_back();
  p.pid = 100;
  p.executable = "/usr/bin/app";
  daemon::ApiCall& call = p.calls.emplace_back();
  call.correlation_id = 1;
  call.name = "nrt_execute";
  call.tid = 100;
  call.start_ns = call_ns;
  call.duration_ns = 1000;
  trace.start_ns = call_ns;
  trace.end_ns = call_ns + 1000;
  // Under TEST_TMPDIR; the folder is removed all the same, for a run outside Bazel.
  const char* root = getenv("TEST_TMPDIR");
  if (root == nullptr) root = getenv("TMPDIR");
  std::string dir = std::string(root != nullptr ? root : "/tmp") + "/trace-merge-test-XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  std::vector<std::string> files;
  EXPECT_TRUE(
      daemon::PerfettoWriter().Write(trace, daemon::ComputeSummary(trace), dir, &files).ok());
  std::ifstream in(dir + "/trace.pftrace", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  for (const std::string& file : files) unlink((dir + "/" + file).c_str());
  rmdir(dir.c_str());
  return bytes.str();
}

// The merged file as a reader sees it: each slice's process name and time, the track names.
struct Seen {
  std::map<std::string, uint64_t> call_time_by_process;
  std::vector<std::string> track_names;
  std::map<std::string, int32_t> pid_by_process;
};

Seen ReadMerged(const std::string& bytes) {
  Seen seen;
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(bytes);
  EXPECT_TRUE(read.ok()) << read.status();
  if (!read.ok()) return seen;
  std::map<uint64_t, uint64_t> parent;
  std::map<uint64_t, std::string> process_of_track;
  std::map<std::pair<uint32_t, uint64_t>, std::string> names;  // (sequence, iid)
  for (int i = 0; i < read->trace.packet_size(); ++i) {
    const auto& p = read->trace.packet(i);
    for (const auto& n : p.interned_data().event_names()) {
      names[{p.trusted_packet_sequence_id(), n.iid()}] = n.name();
    }
    if (p.has_track_descriptor()) {
      const auto& t = p.track_descriptor();
      parent[t.uuid()] = t.parent_uuid();
      if (t.has_name()) seen.track_names.push_back(t.name());
      if (t.has_process()) {
        process_of_track[t.uuid()] = t.process().process_name();
        seen.pid_by_process[t.process().process_name()] = t.process().pid();
      }
    }
    if (p.track_event().type() != perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) continue;
    if (names[{p.trusted_packet_sequence_id(), p.track_event().name_iid()}] != "nrt_execute") {
      continue;
    }
    uint64_t track = p.track_event().track_uuid();
    while (process_of_track.count(track) == 0 && parent.count(track) != 0) track = parent[track];
    seen.call_time_by_process[process_of_track[track]] = read->times[i];
  }
  return seen;
}

// Host b's clocks are 7 s (monotonic) and 250 ms (wall) ahead: its call, made at the same
// instant as a's, lands at the same time in the merged trace; its process (the same pid as
// a's) stays apart; each host's track states its clock.
TEST(TraceMergeTest, HostsLineUpOnOurClockAndStayApart) {
  const uint64_t ours = 5'000'000'000;
  std::vector<HostTrace> hosts = {
      {"a:1", "alpha", HostTraceBytes(ours + 1'000), 1'000, 0, 10'000},
      {"b:2", "beta", HostTraceBytes(ours + 7'000'000'000), 7'000'000'000, 250'000'000, 20'000}};
  absl::StatusOr<std::string> merged = MergeHostTraces(hosts, 1'000'000'000'000);
  ASSERT_TRUE(merged.ok()) << merged.status();
  const Seen seen = ReadMerged(*merged);
  ASSERT_EQ(seen.call_time_by_process.size(), 2u);
  EXPECT_EQ(seen.call_time_by_process.at("app @ a:1"), ours);
  EXPECT_EQ(seen.call_time_by_process.at("app @ b:2 (pid 100)"), ours);
  EXPECT_EQ(seen.pid_by_process.at("app @ a:1"), 100);
  EXPECT_NE(seen.pid_by_process.at("app @ b:2 (pid 100)"), 100);
  EXPECT_EQ(seen.track_names.at(0), "host a:1 (alpha): clock +0.000ms ± 0.010ms");
  EXPECT_EQ(seen.track_names.at(1), "host b:2 (beta): clock +250.000ms ± 0.020ms");
}

// Traces that state their wall clock are placed by it: b's monotonic clock is 7 s ahead of
// ours and its wall clock 250 ms; the monotonic offsets given are left unused.
TEST(TraceMergeTest, TracesThatStateTheirWallClockArePlacedByIt) {
  const uint64_t ours = 5'000'000'000;
  const int64_t our_wall = 1'000'000'000'000;  // our REALTIME - MONOTONIC
  const int64_t b_wall = our_wall + 250'000'000 - 7'000'000'000;
  std::vector<HostTrace> hosts = {
      {"a:1", "", HostTraceBytes(ours, our_wall), 123, 0, 10'000},
      {"b:2", "", HostTraceBytes(ours + 7'000'000'000, b_wall), 456, 250'000'000, 10'000}};
  absl::StatusOr<std::string> merged = MergeHostTraces(hosts, our_wall);
  ASSERT_TRUE(merged.ok()) << merged.status();
  const Seen seen = ReadMerged(*merged);
  EXPECT_EQ(seen.call_time_by_process.at("app @ a:1"), ours);
  EXPECT_EQ(seen.call_time_by_process.at("app @ b:2 (pid 100)"), ours);
}

// The merged trace split back into its hosts (what `nrtprof summary --from-trace` summarizes):
// each host's own pid and process name, its call at our time, and its own wall clock; a
// trace of one host is not split.
TEST(TraceMergeTest, SplittingGivesEachHostsPartAsItsFileHadIt) {
  const uint64_t ours = 5'000'000'000;
  const int64_t our_wall = 1'000'000'000'000;
  const int64_t b_wall = our_wall + 250'000'000 - 7'000'000'000;
  std::vector<HostTrace> hosts = {
      {"a:1", "", HostTraceBytes(ours, our_wall), 0, 0, 10'000},
      {"b:2", "", HostTraceBytes(ours + 7'000'000'000, b_wall), 0, 250'000'000, 10'000}};
  absl::StatusOr<std::string> merged = MergeHostTraces(hosts, our_wall);
  ASSERT_TRUE(merged.ok()) << merged.status();
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(*merged);
  ASSERT_TRUE(read.ok()) << read.status();

  const std::vector<MergedHost> parts = SplitMergedTrace(*read);
  ASSERT_EQ(parts.size(), 2u);
  for (size_t i = 0; i < parts.size(); ++i) {
    SCOPED_TRACE(hosts[i].host);
    EXPECT_EQ(parts[i].host, hosts[i].host);
    const daemon::ReadTrace& part = parts[i].read;
    ASSERT_EQ(part.times.size(), static_cast<size_t>(part.trace.packet_size()));
    std::vector<int32_t> pids;
    std::vector<std::string> names;
    std::vector<uint64_t> slices;
    int64_t wall = 0;
    for (int k = 0; k < part.trace.packet_size(); ++k) {
      const perfetto::protos::TracePacket& p = part.trace.packet(k);
      if (p.track_descriptor().has_process()) {
        pids.push_back(p.track_descriptor().process().pid());
        names.push_back(p.track_descriptor().process().process_name());
      }
      if (p.track_event().type() == perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) {
        slices.push_back(part.times[k]);
      }
      uint64_t monotonic = 0, realtime = 0;
      for (const auto& c : p.clock_snapshot().clocks()) {
        if (c.clock_id() == perfetto::protos::BUILTIN_CLOCK_MONOTONIC) monotonic = c.timestamp();
        if (c.clock_id() == perfetto::protos::BUILTIN_CLOCK_REALTIME) realtime = c.timestamp();
      }
      if (monotonic != 0 && realtime != 0) wall = static_cast<int64_t>(realtime - monotonic);
    }
    EXPECT_EQ(pids, std::vector<int32_t>{100});
    EXPECT_EQ(names, std::vector<std::string>{"app"});
    EXPECT_EQ(slices, std::vector<uint64_t>{ours});
    // Our time plus this is the host's wall clock, as its own file said: b's is 250 ms ahead.
    EXPECT_EQ(wall, our_wall + hosts[i].realtime_offset_ns);
  }

  absl::StatusOr<daemon::ReadTrace> one = daemon::ReadPerfettoTrace(HostTraceBytes(ours));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(SplitMergedTrace(*one).empty());
}

// A merged trace read as packets' bytes (ReadPerfettoPackets: nrtprof export, summary
// --from-trace) is split into the same parts as one read as messages; one host's is not split.
TEST(TraceMergeTest, ATraceReadAsPacketsIsSplitTheSame) {
  const uint64_t ours = 5'000'000'000;
  std::vector<HostTrace> hosts = {{"a:1", "", HostTraceBytes(ours, 1'000), 0, 0, 10},
                                  {"b:2", "", HostTraceBytes(ours + 7'000, 2'000), 0, 5, 10}};
  absl::StatusOr<std::string> merged = MergeHostTraces(hosts, 1'000);
  ASSERT_TRUE(merged.ok()) << merged.status();
  absl::StatusOr<daemon::ReadTrace> messages = daemon::ReadPerfettoTrace(*merged);
  absl::StatusOr<daemon::ReadTrace> packets = daemon::ReadPerfettoPackets(*merged);
  ASSERT_TRUE(messages.ok()) << messages.status();
  ASSERT_TRUE(packets.ok()) << packets.status();
  const std::vector<MergedHost> want = SplitMergedTrace(*messages);
  const std::vector<MergedHost> got = SplitMergedTrace(*packets);
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].host, want[i].host);
    EXPECT_EQ(got[i].read.times, want[i].read.times);
    EXPECT_EQ(got[i].read.trace.SerializeAsString(), want[i].read.trace.SerializeAsString());
  }
  absl::StatusOr<daemon::ReadTrace> one = daemon::ReadPerfettoPackets(HostTraceBytes(ours));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(SplitMergedTrace(*one).empty());
}

TEST(TraceMergeTest, AHostWhoseTraceDoesNotReadBackIsNamed) {
  absl::StatusOr<std::string> merged =
      MergeHostTraces({{"a:1", "", HostTraceBytes(1'000), 0, 0, 0}, {"b:2", "", "\xff\xff", 0, 0, 0}}, 0);
  ASSERT_FALSE(merged.ok());
  EXPECT_TRUE(absl::StartsWith(merged.status().message(), "the trace of b:2 does not read back"))
      << merged.status();
}

}  // namespace
}  // namespace nrtprof::cli
