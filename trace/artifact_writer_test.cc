#include "trace/artifact_writer.h"

#include <dirent.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "trace/summary.h"
#include "trace/writer_test_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  closedir(d);
  return names;
}

std::vector<Struct> ParseArray(const std::string& json) {
  Value v;
  auto status = google::protobuf::util::JsonStringToMessage(json, &v);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  std::vector<Struct> out;
  for (const Value& e : v.list_value().values()) out.push_back(e.struct_value());
  return out;
}

DeviceEvent Execution(uint64_t id, int32_t nc, const std::string& model, uint64_t start) {
  DeviceEvent e;
  e.id = id;
  e.kind = DeviceEventKind::kExecution;
  e.name = "nc_exec_running";
  e.nc_idx = nc;
  e.model_name = Name::Lasting(model);
  e.start_ns = start;
  e.duration_ns = 100;
  e.exec_id = id;
  e.correlation_id = id + 1000;
  return e;
}

DeviceEvent Child(uint64_t id, DeviceEventKind kind, const std::string& name,
                  const DeviceEvent& parent, uint64_t offset) {
  DeviceEvent e = parent;
  e.id = id;
  e.kind = kind;
  e.name = Name::Lasting(name);
  e.parent = parent.id;
  e.start_ns = parent.start_ns + offset;
  e.duration_ns = 10;
  if (kind == DeviceEventKind::kEngineOp) e.engine = "tensor";
  if (kind == DeviceEventKind::kDma) {
    e.bytes = 2048;
    e.tensor_name = "x";
  }
  return e;
}

constexpr char kMlpFile[] = "NEFF\0\x01\x02 mlp weights";  // binary: a NUL inside
const std::string kMlpBytes(kMlpFile, sizeof(kMlpFile) - 1);

// Two processes run the same model file (loaded under different names) on NeuronCore 0, the
// second also on core 1; the first runs a model whose bytes were not shipped.
Trace TwoProcesses() {
  Trace t;
  ProcessTrace a;
  a.pid = 10;
  a.models.push_back({"mlp", kMlpBytes, kMlpBytes.size()});
  a.models.push_back({"remote_model", "", 123456});
  DeviceEvent a_run = Execution(1, 0, "mlp", 5000);
  a.device.push_back(a_run);
  a.device.push_back(Child(3, DeviceEventKind::kDma, "dma_sbuf_to_hbm", a_run, 50));
  a.device.push_back(Child(2, DeviceEventKind::kEngineOp, "matmul", a_run, 20));
  a.device.push_back(Execution(4, 1, "remote_model", 6000));
  DeviceEvent host_dma;
  host_dma.id = 5;
  host_dma.kind = DeviceEventKind::kDma;
  host_dma.name = "dma_h2d";
  a.device.push_back(host_dma);
  t.processes.push_back(a);

  ProcessTrace b;
  b.pid = 20;
  b.models.push_back({"mlp_copy", kMlpBytes, 0});
  b.device.push_back(Execution(1, 0, "mlp_copy", 1000));
  b.device.push_back(Execution(2, 1, "mlp_copy", 2000));
  t.processes.push_back(b);
  return t;
}

TEST(ModelHashTest, IsFnv1a64InHex) {
  EXPECT_EQ(ModelHash(""), "cbf29ce484222325");
  EXPECT_EQ(ModelHash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(ModelHash("foobar"), "85944171f73967e8");
}

TEST(ArtifactWriterTest, SameModelInTwoProcessesSharesOnePair) {
  std::string dir = TempDir("pairs");
  std::vector<std::string> files;
  const Trace t = TwoProcesses();
  ASSERT_TRUE(ArtifactWriter().Write(t, ComputeSummary(t), dir, &files).ok());
  const std::string mlp = ModelHash(kMlpBytes);
  const std::string remote = ModelHash("remote_model");
  std::set<std::string> expected = {
      "model_" + mlp + ".neff",
      "model_" + mlp + "_nc0.ntff.json",
      "model_" + mlp + "_nc1.ntff.json",
      "model_" + remote + "_nc1.ntff.json",
  };
  EXPECT_EQ(std::set<std::string>(files.begin(), files.end()), expected);
  EXPECT_EQ(files.size(), expected.size()) << "each file listed once";
  EXPECT_EQ(ListDir(dir), expected) << "no .neff for a model whose bytes were not shipped";
  EXPECT_EQ(ReadFile(dir + "/model_" + mlp + ".neff"), kMlpBytes);

  std::vector<Struct> nc0 = ParseArray(ReadFile(dir + "/model_" + mlp + "_nc0.ntff.json"));
  ASSERT_EQ(nc0.size(), 2u) << "one execution from each process";
  EXPECT_EQ(nc0[0].fields().at("pid").number_value(), 10);
  EXPECT_EQ(nc0[1].fields().at("pid").number_value(), 20);
  EXPECT_EQ(nc0[1].fields().at("model").string_value(), "mlp_copy");
  const Struct& first = nc0[0];
  EXPECT_EQ(first.fields().at("nc_idx").number_value(), 0);
  EXPECT_EQ(first.fields().at("start_ns").number_value(), 5000);
  EXPECT_EQ(first.fields().at("correlation_id").number_value(), 1001);
  const auto& ops = first.fields().at("ops").list_value().values();
  ASSERT_EQ(ops.size(), 1);
  EXPECT_EQ(ops[0].struct_value().fields().at("name").string_value(), "matmul");
  EXPECT_EQ(ops[0].struct_value().fields().at("engine").string_value(), "tensor");
  const auto& dma = first.fields().at("dma").list_value().values();
  ASSERT_EQ(dma.size(), 1);
  EXPECT_EQ(dma[0].struct_value().fields().at("bytes").number_value(), 2048);
  EXPECT_EQ(dma[0].struct_value().fields().at("start_ns").number_value(), 5050);

  std::vector<Struct> nc1 = ParseArray(ReadFile(dir + "/model_" + mlp + "_nc1.ntff.json"));
  ASSERT_EQ(nc1.size(), 1u);
  EXPECT_EQ(nc1[0].fields().at("pid").number_value(), 20);
  std::vector<Struct> remote_nc1 =
      ParseArray(ReadFile(dir + "/model_" + remote + "_nc1.ntff.json"));
  ASSERT_EQ(remote_nc1.size(), 1u);
  EXPECT_EQ(remote_nc1[0].fields().at("model").string_value(), "remote_model");
}

// A process written in parts (ProcessTrace::continues): a model first run in the second part is
// named there, and its device trace pairs with its .neff, not with a hash of its name.
TEST(ArtifactWriterTest, AModelFirstRunInALaterPartPairsWithItsFile) {
  const std::string dir = TempDir("parts");
  ProcessTrace first;
  first.pid = 10;
  first.models.push_back({"early", "NEFF early", 0});
  first.models.push_back({"", "NEFF late", 0});  // not run in this part: not named yet
  first.device.push_back(Execution(1, 0, "early", 100));
  ProcessTrace second;
  second.pid = 10;
  second.continues = true;
  second.models.push_back({"early", "NEFF early", 0});
  second.models.push_back({"late", "NEFF late", 0});
  second.device.push_back(Execution(2, 0, "late", 200));
  std::unique_ptr<TraceStream> stream = ArtifactWriter().OpenStream(dir);
  Trace part;
  part.processes.push_back(first);
  ASSERT_TRUE(stream->Add(part).ok());
  part.processes[0] = second;
  ASSERT_TRUE(stream->Add(part).ok());
  std::vector<std::string> files;
  ASSERT_TRUE(stream->Finish(Trace(), Summary(), &files).ok());
  const std::string early = ModelHash("NEFF early"), late = ModelHash("NEFF late");
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{
                              "model_" + early + ".neff",
                              "model_" + early + "_nc0.ntff.json",
                              "model_" + late + ".neff",
                              "model_" + late + "_nc0.ntff.json",
                          }));
}

// A device trace far bigger than what the writer holds before writing it out (its text is
// written in pieces): every execution once, in order, each with its work, in a file that parses.
TEST(ArtifactWriterTest, ABigDeviceTraceIsWholeAndInOrder) {
  Trace t;
  ProcessTrace p;
  p.pid = 7;
  p.models.push_back({"mlp", kMlpBytes, kMlpBytes.size()});
  constexpr uint64_t kRuns = 6000;  // about 1.5 MB of text
  uint64_t id = 1;
  for (uint64_t i = 0; i < kRuns; ++i) {
    const DeviceEvent run = Execution(id++, 0, "mlp", 1000 + i * 1000);
    p.device.push_back(run);
    p.device.push_back(Child(id++, DeviceEventKind::kEngineOp, "matmul", run, 20));
  }
  t.processes.push_back(p);
  const std::string dir = TempDir("big");
  std::vector<std::string> files;
  ASSERT_TRUE(ArtifactWriter().Write(t, Summary(), dir, &files).ok());
  const std::string ntff = "model_" + ModelHash(kMlpBytes) + "_nc0.ntff.json";
  const std::string text = ReadFile(dir + "/" + ntff);
  ASSERT_GT(text.size(), 4u * (256 << 10)) << "big enough to be written in pieces";
  const std::vector<Struct> runs = ParseArray(text);
  ASSERT_EQ(runs.size(), kRuns);
  for (uint64_t i = 0; i < kRuns; ++i) {
    const auto& fields = runs[i].fields();
    ASSERT_EQ(fields.at("start_ns").number_value(), 1000.0 + i * 1000) << i;
    ASSERT_EQ(fields.at("ops").list_value().values_size(), 1) << i;
  }
}

// Every count of digits a time or a size may have, as printf writes it, and beyond 2^53 as a
// string (where a JavaScript reader would round a number); names with what JSON escapes.
TEST(ArtifactWriterTest, NumbersHaveEveryDigitAndNamesAreEscaped) {
  std::vector<uint64_t> values = {0};
  for (uint64_t ten = 1; ten <= 10'000'000'000'000'000'000u; ten *= 10) {
    values.push_back(ten - 1);
    values.push_back(ten);
    values.push_back(ten + ten / 2 + 7 * (ten / 10));
    if (ten > ~uint64_t{0} / 10) break;
  }
  values.push_back(uint64_t{1} << 53);
  values.push_back((uint64_t{1} << 53) + 1);
  values.push_back(~uint64_t{0});
  Trace t;
  ProcessTrace p;
  p.pid = 123456789;
  uint64_t id = 1;
  for (uint64_t v : values) {
    DeviceEvent run = Execution(id++, 0, "mlp \"quoted\"\n", 0);
    run.start_ns = v;
    run.duration_ns = v / 3;
    p.device.push_back(run);
    DeviceEvent dma = Child(id++, DeviceEventKind::kDma, "dma\\h2d\x01", run, 0);
    dma.start_ns = v;
    dma.bytes = v;
    p.device.push_back(dma);
  }
  t.processes.push_back(p);
  const std::string dir = TempDir("numbers");
  std::vector<std::string> files;
  ASSERT_TRUE(ArtifactWriter().Write(t, Summary(), dir, &files).ok());
  ASSERT_EQ(files.size(), 1u);
  const std::string text = ReadFile(dir + "/" + files[0]);
  auto json = [](uint64_t v) {
    const std::string digits = std::to_string(v);
    return v > (uint64_t{1} << 53) ? "\"" + digits + "\"" : digits;
  };
  for (uint64_t v : values) {
    EXPECT_NE(text.find("{\"pid\":123456789,\"model\":\"mlp \\\"quoted\\\"\\n\",\"nc_idx\":0,"
                        "\"exec_id\":"),
              std::string::npos);
    EXPECT_NE(text.find(",\"start_ns\":" + json(v) + ",\"duration_ns\":" + json(v / 3) + ","),
              std::string::npos)
        << v;
    EXPECT_NE(text.find("{\"name\":\"dma\\\\h2d\\u0001\",\"bytes\":" + json(v) +
                        ",\"tensor\":\"x\",\"start_ns\":" + json(v) + ",\"duration_ns\":10}"),
              std::string::npos)
        << v;
  }
  EXPECT_EQ(ParseArray(text).size(), values.size());
}

TEST(ArtifactWriterTest, FileNamesNeverComeFromClientText) {
  Trace t;
  ProcessTrace p;
  p.pid = 1;
  const std::string evil = "../../etc/passwd\n\"x";
  p.models.push_back({evil, "bytes", 5});
  p.models.push_back({"/abs/path", "", 0});
  p.device.push_back(Execution(1, 0, evil, 10));
  p.device.push_back(Execution(2, 0, "/abs/path", 20));
  p.device.push_back(Execution(3, 0, "", 30));  // no model name: in no device trace
  t.processes.push_back(p);
  std::string dir = TempDir("names");
  std::vector<std::string> files;
  ASSERT_TRUE(ArtifactWriter().Write(t, ComputeSummary(t), dir, &files).ok());
  ASSERT_EQ(files.size(), 3u);
  for (const std::string& f : files) {
    EXPECT_EQ(f.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_."), std::string::npos)
        << f;
    EXPECT_EQ(f.find(".."), std::string::npos) << f;
  }
  EXPECT_EQ(ListDir(dir), std::set<std::string>(files.begin(), files.end()));
  std::vector<Struct> evil_trace =
      ParseArray(ReadFile(dir + "/model_" + ModelHash("bytes") + "_nc0.ntff.json"));
  ASSERT_EQ(evil_trace.size(), 1u);
  EXPECT_EQ(evil_trace[0].fields().at("model").string_value(), evil);
}

TEST(ArtifactWriterTest, TruncatedModelBytesAreNotANeff) {
  Trace t;
  ProcessTrace p;
  p.pid = 1;
  p.models.push_back({"big", "partial", 1 << 20});
  p.device.push_back(Execution(1, 2, "big", 10));
  t.processes.push_back(p);
  std::string dir = TempDir("truncated");
  std::vector<std::string> files;
  ASSERT_TRUE(ArtifactWriter().Write(t, ComputeSummary(t), dir, &files).ok());
  EXPECT_EQ(files, std::vector<std::string>{"model_" + ModelHash("big") + "_nc2.ntff.json"});
}

TEST(ArtifactWriterTest, WriteErrorsAreReported) {
  std::vector<std::string> files;
  const Trace t = TwoProcesses();
  absl::Status s = ArtifactWriter().Write(t, ComputeSummary(t), TempDir("e") + "/missing", &files);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model_"), std::string::npos) << s;
  EXPECT_TRUE(files.empty());
}

TEST(ArtifactWriterTest, NoModelsNoFiles) {
  std::vector<std::string> files;
  ASSERT_TRUE(ArtifactWriter().Write(Trace(), Summary(), TempDir("none"), &files).ok());
  EXPECT_TRUE(files.empty());
}

}  // namespace
}  // namespace nrtprof::daemon
