// The runtime's device profile end to end: the simulator, `nrtprof run --device-profile`, the
// shim and a real daemon. Checked as a user sees it: each execution in the model's
// .ntff.json lists the ops its model file defines (decoded from the capture's own .neff), inside
// the execution's time; trace.pftrace draws them inside nc_exec_running on the executions
// track; the table's device times are those of a run without device profiles; and a program
// that profiles its own model gets the file it would get without the profiler.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/testing/struct_fields.h"
#include "trace/perfetto_trace_reader.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/perfetto_trace.pb.h"
#include "sim/model.h"
#include "sim/model_format.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using google::protobuf::Struct;
using testing::Num;
using testing::ReadFile;
using testing::Result;
using testing::Runfile;
using testing::Str;
using testing::TempDir;

Struct ParseJson(const std::string& text) {
  Struct doc;
  // A top-level array is wrapped so that Struct can hold it.
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &doc).ok()) << text.substr(0, 200);
  return doc;
}

std::vector<std::string> FilesEndingIn(const std::string& dir, const std::string& suffix) {
  const Result ls = testing::RunProcess({"/bin/ls", dir});
  std::vector<std::string> out;
  for (absl::string_view name : absl::StrSplit(ls.out, '\n', absl::SkipEmpty())) {
    if (absl::EndsWith(name, suffix)) out.push_back(dir + "/" + std::string(name));
  }
  return out;
}

// What the model file says each execution does: its ops as "name@engine", in order, and its
// tensors' names.
struct ModelOps {
  std::vector<std::string> ops;
  std::set<std::string> tensors;
};

ModelOps OpsOfModelFile(const std::string& neff_path) {
  const std::string bytes = ReadFile(neff_path);
  absl::StatusOr<nrtsim::Model> model = nrtsim::DecodeModel(bytes.data(), bytes.size());
  EXPECT_TRUE(model.ok()) << neff_path << ": " << model.status();
  ModelOps out;
  if (!model.ok()) return out;
  for (const nrtsim::OpDef& op : model->ops) {
    out.ops.push_back(std::string(nrtsim::OpKindName(op.kind)) + "@" +
                      nrtsim::EngineName(nrtsim::OpEngine(op.kind)));
  }
  for (const nrtsim::TensorDef& t : model->tensors) out.tensors.insert(t.name);
  return out;
}

// One execution of a .ntff.json file.
struct Execution {
  std::string model;
  double start = 0, end = 0;
  std::vector<std::string> ops;  // "name@engine"
  std::vector<std::pair<double, double>> op_spans, dma_spans;
  std::vector<std::string> dma;  // "name:tensor"
};

// Every execution of the capture's device traces, with the model file each pairs with.
std::vector<std::pair<Execution, ModelOps>> DeviceTraces(const std::string& dir) {
  std::vector<std::pair<Execution, ModelOps>> out;
  for (const std::string& path : FilesEndingIn(dir, ".ntff.json")) {
    // model_HASH_ncN.ntff.json pairs with model_HASH.neff.
    const std::string neff = path.substr(0, path.rfind("_nc")) + ".neff";
    const ModelOps model = OpsOfModelFile(neff);
    const Struct doc = ParseJson("{\"x\":" + ReadFile(path) + "}");
    for (const auto& v : doc.fields().at("x").list_value().values()) {
      const Struct& x = v.struct_value();
      Execution e;
      e.model = Str(x, "model");
      e.start = Num(x, "start_ns");
      e.end = e.start + Num(x, "duration_ns");
      for (const auto& o : x.fields().at("ops").list_value().values()) {
        const Struct& op = o.struct_value();
        e.ops.push_back(Str(op, "name") + "@" + Str(op, "engine"));
        e.op_spans.emplace_back(Num(op, "start_ns"), Num(op, "start_ns") + Num(op, "duration_ns"));
      }
      for (const auto& d : x.fields().at("dma").list_value().values()) {
        const Struct& dma = d.struct_value();
        e.dma.push_back(Str(dma, "name") + ":" + Str(dma, "tensor"));
        e.dma_spans.emplace_back(Num(dma, "start_ns"),
                                 Num(dma, "start_ns") + Num(dma, "duration_ns"));
      }
      out.emplace_back(std::move(e), model);
    }
  }
  return out;
}

// trace.pftrace's slices of one track name, with the name of the slice each is nested in
// (empty at the top), as trace processor nests begin/end events on a track.
struct DrawnSlice {
  std::string name, parent;
};
std::vector<DrawnSlice> SlicesOnTrack(const std::string& path, const std::string& track_name) {
  std::vector<DrawnSlice> out;
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(ReadFile(path));
  EXPECT_TRUE(read.ok()) << read.status();
  if (!read.ok()) return out;
  std::map<uint64_t, std::string> names, tracks;
  std::map<uint64_t, std::vector<std::string>> open;  // per track uuid
  for (const auto& packet : read->trace.packet()) {
    for (const auto& n : packet.interned_data().event_names()) names[n.iid()] = n.name();
    if (packet.has_track_descriptor()) {
      tracks[packet.track_descriptor().uuid()] = packet.track_descriptor().name();
    }
    if (!packet.has_track_event()) continue;
    const auto& e = packet.track_event();
    if (tracks[e.track_uuid()] != track_name) continue;
    std::vector<std::string>& stack = open[e.track_uuid()];
    if (e.type() == perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) {
      const std::string name = e.has_name_iid() ? names[e.name_iid()] : e.name();
      out.push_back({name, stack.empty() ? "" : stack.back()});
      stack.push_back(name);
    } else if (e.type() == perfetto::protos::TrackEvent::TYPE_SLICE_END && !stack.empty()) {
      stack.pop_back();
    }
  }
  return out;
}

// The table as summary.json has it: each row's device times and calls, and the totals.
std::string DeviceTable(const std::string& dir) {
  const Struct s = ParseJson(ReadFile(dir + "/summary.json"));
  std::string table;
  for (const auto& r : s.fields().at("rows").list_value().values()) {
    const Struct& row = r.struct_value();
    table += Str(row, "name") + " " + std::to_string(Num(row, "self_device_ns")) + " " +
             std::to_string(Num(row, "device_total_ns")) + " " +
             std::to_string(Num(row, "calls")) + "\n";
  }
  table += "total " + std::to_string(Num(s, "self_device_total_ns")) + ", uncorrelated " +
           std::to_string(Num(s, "uncorrelated_device_events"));
  return table;
}

// How a run asks for device profiles: not at all, `nrtprof run --device-profile`, or the
// shim's variable set by the user.
enum class Ask { kNo, kFlag, kVariable };

// `nrtprof run`, with TMPDIR (where the profiler keeps the runtime's profiles while it reads
// them) `tmp` when given. The profiles are read only at unload, close and exit unless
// `period_ms` says otherwise: an execution that ends in the instant the profiler switches
// profiles (NRTPROF_DEVICE_PROFILE_PERIOD_MS, 1 s by default) has no ops, and what a test
// checks must not depend on when that happens.
Result Profile(const std::string& out, const std::vector<std::string>& command, Ask ask,
               const std::string& tmp = "", const std::string& period_ms = "0") {
  std::vector<std::string> flags;
  if (ask == Ask::kFlag) flags.push_back("--device-profile");
  std::map<std::string, std::string> env = testing::kIsolatedEnv;
  if (ask == Ask::kVariable) env["NRTPROF_DEVICE_PROFILE"] = "1";
  env["NRTPROF_DEVICE_PROFILE_PERIOD_MS"] = period_ms;
  if (!tmp.empty()) env["TMPDIR"] = tmp;
  return testing::RunProfiled(out, command, flags, env);
}

TEST(DeviceProfileEndToEnd, EachExecutionHoldsItsModelsOpsAndTheTableIsUnchanged) {
  for (const auto& [variant, ask] : {std::pair{"compiled", Ask::kFlag},
                                     std::pair{"naive", Ask::kVariable}}) {
    SCOPED_TRACE(variant);
    const std::vector<std::string> rmsnorm = {Runfile("examples/rmsnorm"), "--variant", variant,
                                              "--iters", "10"};
    const std::string dir = TempDir(std::string("device-profile-") + variant);
    const Result with = Profile(dir + "/with", rmsnorm, ask);
    ASSERT_EQ(with.exit_code, 0) << with.err;
    const Result without = Profile(dir + "/without", rmsnorm, Ask::kNo);
    ASSERT_EQ(without.exit_code, 0) << without.err;
    EXPECT_EQ(with.out, without.out);

    // The .ntff.json files: every execution has its model file's ops, in order, inside its
    // time, and its inputs in and outputs out.
    const auto executions = DeviceTraces(dir + "/with");
    ASSERT_FALSE(executions.empty());
    size_t dma = 0;
    for (const auto& [x, model] : executions) {
      EXPECT_EQ(x.ops, model.ops) << x.model;
      for (const auto& [start, end] : x.op_spans) {
        EXPECT_GE(start, x.start) << x.model;
        EXPECT_LE(end, x.end) << x.model;
      }
      ASSERT_FALSE(x.dma.empty()) << x.model;
      EXPECT_TRUE(absl::StartsWith(x.dma.front(), "dma_hbm_to_sbuf:")) << x.dma.front();
      EXPECT_TRUE(absl::StartsWith(x.dma.back(), "dma_sbuf_to_hbm:")) << x.dma.back();
      for (const std::string& d : x.dma) {
        EXPECT_EQ(model.tensors.count(d.substr(d.find(':') + 1)), 1u) << d;
      }
      dma += x.dma.size();
    }
    // Without device profiles, executions have nothing inside.
    for (const auto& [x, model] : DeviceTraces(dir + "/without")) {
      EXPECT_TRUE(x.ops.empty());
      EXPECT_TRUE(x.dma.empty());
    }

    // trace.pftrace: the ops inside their executions on the executions track, the I/O DMA on
    // the DMA track beside the host's transfers.
    size_t ops = 0, executions_drawn = 0;
    for (const DrawnSlice& s : SlicesOnTrack(dir + "/with/trace.pftrace", "executions")) {
      if (s.name == "nc_exec_running") {
        ++executions_drawn;
        EXPECT_EQ(s.parent, "");
      } else {
        ++ops;
        EXPECT_EQ(s.parent, "nc_exec_running") << s.name;
      }
    }
    EXPECT_EQ(executions_drawn, executions.size());
    size_t expected_ops = 0;
    for (const auto& [x, model] : executions) expected_ops += model.ops.size();
    EXPECT_EQ(ops, expected_ops);
    size_t io_dma = 0;
    for (const DrawnSlice& s : SlicesOnTrack(dir + "/with/trace.pftrace", "DMA")) {
      io_dma += s.name == "dma_hbm_to_sbuf" || s.name == "dma_sbuf_to_hbm";
    }
    EXPECT_EQ(io_dma, dma);

    // The table: ops are inside executions, not added to them.
    EXPECT_EQ(DeviceTable(dir + "/with"), DeviceTable(dir + "/without"));
    EXPECT_TRUE(absl::StrContains(with.err, "Events dropped: 0")) << with.err;
    // Recomputed from the trace alone (nrtprof summary --from-trace): the same rows and calls.
    // (Times may differ by nanoseconds: a host transfer that overlaps an execution's I/O DMA on
    // the DMA lane by the clocks' noise is drawn clamped; docs/trace_format.md.)
    auto rows_and_calls = [&](const std::vector<std::string>& extra) {
      std::vector<std::string> argv = {Runfile("client/nrtprof"), "summary", dir + "/with",
                                       "--format", "csv"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      const Result r = testing::RunProcess(argv);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      std::vector<std::string> rows;
      for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
        const std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
        rows.push_back(std::string(cells.front()) + " " + std::string(cells.back()));
      }
      return rows;
    };
    const std::vector<std::string> saved = rows_and_calls({});
    EXPECT_GT(saved.size(), 1u);
    EXPECT_EQ(rows_and_calls({"--from-trace"}), saved);
  }
}

// The profiles switched at every flusher tick (1 ms asked, 25 ms the tick) while the program
// runs: read many times over, each execution has its model's ops or (the rare one that ended
// in a switch) none, never a part, and the table is unchanged.
TEST(DeviceProfileEndToEnd, ProfilesReadWhileTheProgramRuns) {
  const std::vector<std::string> rmsnorm = {Runfile("examples/rmsnorm"), "--variant", "naive",
                                            "--iters", "40"};
  const std::string dir = TempDir("device-profile-periodic");
  const Result with = Profile(dir + "/with", rmsnorm, Ask::kFlag, "", "1");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  const Result without = Profile(dir + "/without", rmsnorm, Ask::kNo);
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const auto executions = DeviceTraces(dir + "/with");
  ASSERT_FALSE(executions.empty());
  size_t with_ops = 0;
  for (const auto& [x, model] : executions) {
    if (x.ops.empty()) continue;
    ++with_ops;
    EXPECT_EQ(x.ops, model.ops) << x.model;
  }
  EXPECT_GE(with_ops * 10, executions.size() * 9) << with_ops << " of " << executions.size();
  EXPECT_EQ(DeviceTable(dir + "/with"), DeviceTable(dir + "/without"));
}

// The program's own nrt_profile_start/stop: the same statuses, messages and file as without
// the profiler, and the profiler's own profile before and after it.
TEST(DeviceProfileEndToEnd, AProgramsOwnProfileIsItsOwn) {
  const std::string dir = TempDir("own-profile");
  const std::string file = dir + "/own.json";
  const std::vector<std::string> client = {Runfile("tests/profile_client"), file, "2", "3", "4"};
  const Result plain = testing::RunProcess(client, testing::kIsolatedEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string plain_file = ReadFile(file);
  ASSERT_EQ(unlink(file.c_str()), 0);

  ASSERT_EQ(testing::RunProcess({"/bin/mkdir", dir + "/tmp"}).exit_code, 0);
  const Result profiled = Profile(dir + "/cap", client, Ask::kFlag, dir + "/tmp");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  EXPECT_EQ(profiled.out, plain.out);
  // The runtime's own lines ("nrt: ...") are the same, in the same order.
  auto runtime_lines = [](const std::string& err) {
    std::vector<std::string> lines;
    for (absl::string_view l : absl::StrSplit(err, '\n')) {
      if (absl::StartsWith(l, "nrt: ")) lines.emplace_back(l);
    }
    return lines;
  };
  EXPECT_EQ(runtime_lines(profiled.err), runtime_lines(plain.err));
  EXPECT_FALSE(runtime_lines(plain.err).empty());

  // Its file: the same executions, ops and transfers (times aside).
  auto content = [](const std::string& text) {
    const Struct doc = ParseJson(text);
    std::string out = Str(doc, "model");
    for (const auto& v : doc.fields().at("executions").list_value().values()) {
      const Struct& x = v.struct_value();
      out += " exec " + std::to_string(Num(x, "exec_id")) + ":";
      for (const char* list : {"ops", "dma"}) {
        for (const auto& e : x.fields().at(list).list_value().values()) {
          out += " " + Str(e.struct_value(), "name") + Str(e.struct_value(), "engine") +
                 Str(e.struct_value(), "tensor");
        }
      }
    }
    return out;
  };
  const std::string profiled_file = ReadFile(file);
  EXPECT_EQ(content(profiled_file), content(plain_file));
  EXPECT_EQ(ParseJson(profiled_file).fields().at("executions").list_value().values_size(), 3);

  // The profiler's: the executions before and after the program's profile have their ops;
  // those the program profiled are in its file only.
  const auto executions = DeviceTraces(dir + "/cap");
  ASSERT_EQ(executions.size(), 9u);
  for (size_t i = 0; i < executions.size(); ++i) {
    const auto& [x, model] = executions[i];
    const bool the_programs = i >= 2 && i < 5;
    EXPECT_EQ(x.ops, the_programs ? std::vector<std::string>{} : model.ops) << "execution " << i;
  }
  // And nothing of the profiler's is left in the temporary folder.
  const Result left = testing::RunProcess({"/bin/ls", dir + "/tmp"});
  EXPECT_EQ(left.exit_code, 0);
  EXPECT_FALSE(absl::StrContains(left.out, "nrtprof-profile-")) << left.out;
}

}  // namespace
}  // namespace nrtprof
