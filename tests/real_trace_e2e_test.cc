// The real runtime's system-trace shape end to end: `nrtprof run` on a program whose runtime
// (tests/programs/canned_nrt.cc) hands out documents written by hand from the public facts
// about the real runtime's JSON (the facts and their sources are listed there), so the shim's
// reader and the daemon see that shape and not the simulator's writer. Checked as a user sees
// it: the lanes and flow arrows of trace.pftrace, the table, the drop counts and the files.
#include <dirent.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/testing/struct_fields.h"
#include "trace/perfetto_trace_reader.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/perfetto_trace.pb.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Num;
using testing::ReadFile;
using testing::Result;
using testing::Runfile;
using testing::TempDir;

struct Slice {
  std::string name;
  std::string track;
  std::vector<uint64_t> flows, terminating;
};

// The slices trace.pftrace draws, as trace processor reads them.
std::vector<Slice> ReadSlices(const std::string& path) {
  std::vector<Slice> slices;
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(ReadFile(path));
  EXPECT_TRUE(read.ok()) << path << ": " << read.status();
  if (!read.ok()) return slices;
  std::map<uint64_t, std::string> names, tracks;
  for (const auto& packet : read->trace.packet()) {
    for (const auto& n : packet.interned_data().event_names()) names[n.iid()] = n.name();
    if (packet.has_track_descriptor()) {
      const auto& t = packet.track_descriptor();
      tracks[t.uuid()] = t.has_thread() ? t.thread().thread_name() : t.name();
    }
    if (!packet.has_track_event()) continue;
    const auto& e = packet.track_event();
    if (e.type() != perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) continue;
    Slice s;
    s.name = e.has_name_iid() ? names[e.name_iid()] : e.name();
    s.track = tracks[e.track_uuid()];
    s.flows.assign(e.flow_ids().begin(), e.flow_ids().end());
    s.terminating.assign(e.terminating_flow_ids().begin(), e.terminating_flow_ids().end());
    slices.push_back(s);
  }
  return slices;
}

size_t Count(const std::vector<Slice>& slices, const std::string& name, const std::string& track) {
  size_t n = 0;
  for (const Slice& s : slices) n += s.name == name && s.track == track;
  return n;
}

google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct doc;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &doc).ok()) << text;
  return doc;
}

Result Profile(const std::string& out, const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> env = testing::kIsolatedEnv;
  for (const auto& [k, v] : extra) env[k] = v;
  return testing::RunProfiled(out, {Runfile("tests/canned_client")}, {}, env);
}

TEST(RealTraceEndToEnd, LanesAndFlowsFromTheRealShape) {
  const std::string out = TempDir("real-shape");
  const Result r = Profile(out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("canned client: ok"), std::string::npos) << r.out;

  const std::vector<Slice> slices = ReadSlices(out + "/trace.pftrace");
  // Hardware lane: each device_exec start/stop pair is one execution on NeuronCore 0.
  EXPECT_EQ(Count(slices, "nc_exec_running", "executions"), 3u);
  // DMA lane: each tensor_write once (its device-memory copy is not drawn twice), and the
  // copy inside nrt_load as the model's load.
  EXPECT_EQ(Count(slices, "dma_h2d", "DMA"), 3u);
  EXPECT_EQ(Count(slices, "dma_model_load", "DMA"), 1u);
  // Nothing else reaches the hardware lanes (cc_exec is not drawn; model_switch never sent).
  for (const Slice& s : slices) {
    if (s.track == "executions") {
      EXPECT_EQ(s.name, "nc_exec_running");
    }
  }

  // Flows: framework op -> runtime call -> hardware, for every execution and every write.
  std::map<uint64_t, std::set<std::string>> flow_steps;  // flow id -> "name@track"
  for (const Slice& s : slices) {
    for (uint64_t f : s.flows) flow_steps[f].insert(s.name + "@" + s.track);
    for (uint64_t f : s.terminating) flow_steps[f].insert(s.name + "@" + s.track);
  }
  size_t exec_chains = 0, write_chains = 0;
  for (const auto& [id, steps] : flow_steps) {
    const bool framework_mul = std::any_of(steps.begin(), steps.end(), [](const std::string& s) {
      return absl::StartsWith(s, "aten::mul@") && absl::EndsWith(s, "framework");
    });
    const bool framework_copy = std::any_of(steps.begin(), steps.end(), [](const std::string& s) {
      return absl::StartsWith(s, "aten::copy_@") && absl::EndsWith(s, "framework");
    });
    const bool call_execute = std::any_of(steps.begin(), steps.end(), [](const std::string& s) {
      return absl::StartsWith(s, "nrt_execute@") && absl::EndsWith(s, "runtime");
    });
    const bool call_write = std::any_of(steps.begin(), steps.end(), [](const std::string& s) {
      return absl::StartsWith(s, "nrt_tensor_write@") && absl::EndsWith(s, "runtime");
    });
    exec_chains += framework_mul && call_execute && steps.count("nc_exec_running@executions");
    write_chains += framework_copy && call_write && steps.count("dma_h2d@DMA");
  }
  EXPECT_EQ(exec_chains, 3u);
  EXPECT_EQ(write_chains, 3u);

  // The table charges the device time to the framework ops, and nothing is lost or unplaced.
  const google::protobuf::Struct summary = ParseJson(ReadFile(out + "/summary.json"));
  std::map<std::string, google::protobuf::Struct> rows;
  for (const auto& v : summary.fields().at("rows").list_value().values()) {
    rows[v.struct_value().fields().at("name").string_value()] = v.struct_value();
  }
  ASSERT_TRUE(rows.count("aten::mul"));
  ASSERT_TRUE(rows.count("aten::copy_"));
  EXPECT_GT(Num(rows["aten::mul"], "self_device_ns"), 0);
  EXPECT_GT(Num(rows["aten::copy_"], "self_device_ns"), 0);
  EXPECT_EQ(Num(summary, "uncorrelated_device_events"), 0);
  const auto& drops = summary.fields().at("events_dropped").struct_value();
  EXPECT_EQ(Num(drops, "total"), 0);

  // The model file and its device trace pair up although the runtime named no model.
  std::vector<std::string> neffs, ntffs;
  DIR* d = opendir(out.c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (absl::EndsWith(n, ".neff")) neffs.push_back(n.substr(0, n.size() - 5));
    if (absl::EndsWith(n, ".ntff.json")) ntffs.push_back(n);
  }
  closedir(d);
  ASSERT_EQ(neffs.size(), 1u);
  ASSERT_EQ(ntffs.size(), 1u);
  EXPECT_EQ(ntffs[0], neffs[0] + "_nc0.ntff.json");
}

TEST(RealTraceEndToEnd, MalformedDocumentsAreDroppedWithTheirReason) {
  const std::string out = TempDir("malformed");
  const Result r = Profile(out, {{"CANNED_NRT_MALFORMED", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("canned client: ok"), std::string::npos) << r.out;
  // The program's calls are all there; the refused documents' device events are counted by
  // their reason, in the table's footer and in summary.json.
  const std::vector<Slice> slices = ReadSlices(out + "/trace.pftrace");
  EXPECT_EQ(Count(slices, "nrt_execute", "runtime"), 3u);
  EXPECT_EQ(Count(slices, "nc_exec_running", "executions"), 0u);
  const google::protobuf::Struct summary = ParseJson(ReadFile(out + "/summary.json"));
  const auto& drops = summary.fields().at("events_dropped").struct_value();
  EXPECT_GT(Num(drops, "device_malformed"), 0);
  EXPECT_EQ(Num(drops, "total"), Num(drops, "device_malformed"));
  const std::string table = ReadFile(out + "/summary.txt");
  EXPECT_NE(table.find("device_malformed"), std::string::npos) << table;
}

}  // namespace
}  // namespace nrtprof
