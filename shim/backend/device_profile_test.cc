// The device profile's reader on hand-written documents in the simulator's shape
// (sim/runtime.cc, Runtime::ProfileStop), and the profiler's handling of the runtime's one
// profile per model against a runtime of a few lines that keeps the simulator's rules: one
// profile per model and per file name, the file written at the stop.
#include "shim/backend/device_profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "shim/backend/device_profile_reader.h"

namespace nrtprof::shim {
namespace {

// As the simulator writes it: two executions of a model with two ops and an input and output
// transfer each, and members a later runtime may add.
constexpr char kProfile[] =
    R"({"model":"scale_add","model_id":2,"nc_idx":1,"executions":[)"
    R"({"exec_id":5,"start_ns":1000,"duration_ns":300,)"
    R"("ops":[{"name":"mul_scalar","engine":"scalar","start_ns":1010,"duration_ns":40},)"
    R"({"name":"add","engine":"vector","start_ns":1060,"duration_ns":50,"unit":"ns"}],)"
    R"("dma":[{"name":"dma_hbm_to_sbuf","tensor":"x","bytes":256,"start_ns":1001,"duration_ns":3},)"
    R"({"name":"dma_sbuf_to_hbm","tensor":"out\u00e9","bytes":256,"start_ns":1200,"duration_ns":3}]},)"
    R"({"exec_id":6,"start_ns":2000,"duration_ns":300,"ops":[],"dma":[],"queue":{"depth":1}}],)"
    R"("version":"2.0"})"
    "\n";

std::vector<DeviceProfileEntry> ReadAll(const std::string& json, DeviceProfileReadStats* stats,
                                        std::string* error, std::vector<std::string>* texts) {
  std::vector<DeviceProfileEntry> entries;
  const bool ok = ReadDeviceProfile(
      json,
      [&](const DeviceProfileEntry& e) {
        entries.push_back(e);
        // The views live during the call only: keep what they say.
        texts->push_back(std::string(e.model) + "|" + std::string(e.name) + "|" +
                         std::string(e.engine) + "|" + std::string(e.tensor));
      },
      stats, error);
  if (!ok) entries.clear();
  return entries;
}

TEST(DeviceProfileReaderTest, ReadsOpsAndTransfersOfEachExecution) {
  DeviceProfileReadStats stats;
  std::string error;
  std::vector<std::string> texts;
  const std::vector<DeviceProfileEntry> e = ReadAll(kProfile, &stats, &error, &texts);
  ASSERT_EQ(e.size(), 4u) << error;
  EXPECT_EQ(stats.executions, 2u);
  EXPECT_EQ(stats.entries, 4u);
  EXPECT_EQ(stats.unknown_members, 3u);  // "unit", "queue", "version"
  EXPECT_EQ(texts[0], "scale_add|mul_scalar|scalar|");
  EXPECT_EQ(texts[1], "scale_add|add|vector|");
  EXPECT_EQ(texts[2], "scale_add|dma_hbm_to_sbuf||x");
  EXPECT_EQ(texts[3], "scale_add|dma_sbuf_to_hbm||out\xc3\xa9");
  EXPECT_EQ(e[0].kind, DeviceProfileEntry::Kind::kOp);
  EXPECT_EQ(e[2].kind, DeviceProfileEntry::Kind::kDma);
  for (const DeviceProfileEntry& x : e) {
    EXPECT_EQ(x.nc_idx, 1u);
    EXPECT_EQ(x.exec_id, 5u);
  }
  EXPECT_EQ(e[1].start_ns, 1060u);
  EXPECT_EQ(e[1].duration_ns, 50u);
  EXPECT_EQ(e[3].bytes, 256u);
}

TEST(DeviceProfileReaderTest, RefusesWhatIsNotAProfileWithOneLine) {
  const std::map<std::string, std::string> bad = {
      {"[]", "the profile is not a JSON object"},
      {R"({"model":"m","nc_idx":0})", "no executions array"},
      {R"({"executions":[],"model":"m","nc_idx":0})", "executions before model and nc_idx"},
      {R"({"model":"m","nc_idx":4096,"executions":[]})", "nc_idx out of range"},
      {R"({"model":"m","nc_idx":0,"executions":[{"exec_id":1,"ops":[]}]})",
       "an execution lacks exec_id, ops or dma"},
      {R"({"model":"m","nc_idx":0,"executions":[{"ops":[],"exec_id":1,"dma":[]}]})",
       "an execution's ops before its exec_id"},
      {R"({"model":"m","nc_idx":0,"executions":[{"exec_id":1,"dma":[],"ops":[{"name":"mul",)"
       R"("start_ns":1,"duration_ns":1}]}]})",
       "an op lacks name, engine, start_ns or duration_ns"},
      {R"({"model":"m","nc_idx":0,"executions":[{"exec_id":1,"ops":[],"dma":[{"name":"d",)"
       R"("tensor":"x","bytes":-1,"start_ns":1,"duration_ns":1}]}]})",
       "bytes is not an unsigned integer"},
      {R"({"model":"m","nc_idx":0,"executions":[{"exec_id":1,"ops":[{"name":"","engine":"v",)"
       R"("start_ns":1,"duration_ns":1}],"dma":[]}]})",
       "an op without a name"},
      {R"({"model":"m","nc_idx":0,"executions":[]} x)", "characters after the document"},
      {R"({"model":"m","nc_idx":0,"executions":[)", "an execution is not an object"},
  };
  for (const auto& [doc, reason] : bad) {
    DeviceProfileReadStats stats;
    std::string error;
    std::vector<std::string> texts;
    ReadAll(doc, &stats, &error, &texts);
    EXPECT_EQ(error.substr(0, error.find(" (at byte")), reason) << doc;
  }
}

TEST(DeviceProfileReaderTest, TellsJsonFromTheRealRuntimesBinaryProfile) {
  EXPECT_TRUE(LooksLikeJson(" \n{\"model\":\"m\"}"));
  EXPECT_FALSE(LooksLikeJson(std::string("NTFF\0\x01\x02", 7)));
  EXPECT_FALSE(LooksLikeJson(""));
}

// ---- The profiler against a runtime with the simulator's rules ----

struct FakeRuntime {
  std::map<nrt_model_t*, std::string> profiles;  // model -> file, in progress
  std::string next_text;  // what the next stop writes; empty: kProfile
  std::vector<std::string> calls;
};
FakeRuntime* g_runtime = nullptr;

NRT_STATUS FakeStart(nrt_model_t* model, const char* filename) {
  g_runtime->calls.push_back(std::string("start ") + (filename != nullptr ? filename : "null"));
  if (filename == nullptr) return NRT_INVALID;
  for (const auto& [m, f] : g_runtime->profiles) {
    if (m == model || f == filename) return NRT_INVALID;
  }
  g_runtime->profiles[model] = filename;
  return NRT_SUCCESS;
}

NRT_STATUS FakeStop(const char* filename) {
  g_runtime->calls.push_back(std::string("stop ") + filename);
  for (auto it = g_runtime->profiles.begin(); it != g_runtime->profiles.end(); ++it) {
    if (it->second != filename) continue;
    g_runtime->profiles.erase(it);
    FILE* f = fopen(filename, "w");
    if (f == nullptr) return NRT_FAILURE;
    const std::string text = g_runtime->next_text.empty() ? kProfile : g_runtime->next_text;
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    return NRT_SUCCESS;
  }
  return NRT_INVALID;
}

class DeviceProfilerTest : public ::testing::Test {
 protected:
  DeviceProfilerTest()
      : root_(::testing::TempDir() + "/profiler-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()),
        profiler_([] { return DeviceProfileFunctions{&FakeStart, &FakeStop}; },
                  [this](const std::string& line) { notices_.push_back(line); }, &strings_,
                  root_) {
    mkdir(root_.c_str(), 0700);
    g_runtime = &runtime_;
  }
  ~DeviceProfilerTest() override { g_runtime = nullptr; }

  // Events of what was read, collecting now (`now` past the period) or only parsing.
  std::vector<nrtprof::Event> Collect(uint64_t now, bool final = false) {
    std::vector<nrtprof::Event> events;
    profiler_.Collect(now, final, /*capturing=*/true,
                      [&](nrtprof::Event& e) { events.push_back(e); });
    return events;
  }
  std::string OwnFile(nrt_model_t* model) {
    auto it = runtime_.profiles.find(model);
    return it == runtime_.profiles.end() ? "" : it->second;
  }

  nrt_model_t* const model_a_ = reinterpret_cast<nrt_model_t*>(0x1000);
  nrt_model_t* const model_b_ = reinterpret_cast<nrt_model_t*>(0x2000);
  const std::string root_;
  FakeRuntime runtime_;
  StringTable strings_;
  std::vector<std::string> notices_;
  DeviceProfiler profiler_;
};

TEST_F(DeviceProfilerTest, EachLoadedModelIsProfiledIntoAPrivateFolderAndReadOnAPeriod) {
  const uint64_t t0 = 1'000'000'000'000;
  EXPECT_TRUE(Collect(t0).empty());  // the period starts
  profiler_.OnModelLoaded(model_a_);
  const std::string first = OwnFile(model_a_);
  ASSERT_FALSE(first.empty());
  struct stat st;
  ASSERT_EQ(stat(profiler_.folder().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(profiler_.folder().rfind(root_ + "/nrtprof-profile-", 0), 0u) << profiler_.folder();

  EXPECT_TRUE(Collect(t0 + DeviceProfiler::kDefaultPeriodNs / 2).empty());  // not yet
  const std::vector<nrtprof::Event> events = Collect(t0 + DeviceProfiler::kDefaultPeriodNs);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind(), nrtprof::EVENT_DEVICE_OP);
  EXPECT_EQ(strings_.Get(events[0].name_iid()), "mul_scalar");
  EXPECT_EQ(strings_.Get(events[0].engine_iid()), "scalar");
  EXPECT_EQ(strings_.Get(events[0].model_name_iid()), "scale_add");
  EXPECT_EQ(events[0].exec_id(), 5u);
  EXPECT_EQ(events[0].nc_idx(), 1);
  EXPECT_EQ(events[0].start_ns(), 1010u);
  EXPECT_EQ(events[0].device_parent_id(), 0u) << "the daemon finds the execution by exec_id";
  EXPECT_EQ(events[3].kind(), nrtprof::EVENT_DEVICE_DMA);
  EXPECT_EQ(strings_.Get(events[3].tensor_name_iid()), "out\xc3\xa9");
  EXPECT_EQ(events[3].bytes(), 256u);
  EXPECT_FALSE(events[3].host_clock());
  // Read, deleted, and profiling again under a new name.
  EXPECT_NE(access(first.c_str(), F_OK), 0);
  EXPECT_FALSE(OwnFile(model_a_).empty());
  EXPECT_NE(OwnFile(model_a_), first);

  // Unload collects it; the final collection at exit leaves no folder behind.
  profiler_.BeforeModelUnload(model_a_);
  EXPECT_TRUE(runtime_.profiles.empty());
  EXPECT_EQ(Collect(t0 + DeviceProfiler::kDefaultPeriodNs + 1, /*final=*/true).size(), 4u);
  EXPECT_NE(access(profiler_.folder().c_str(), F_OK), 0);
  EXPECT_TRUE(notices_.empty());
}

// NRTPROF_DEVICE_PROFILE_PERIOD_MS=0: one profile per model from its load to its unload (or
// the exit), never switched while the program runs.
TEST_F(DeviceProfilerTest, WithoutAPeriodProfilesAreReadOnlyAtTheEnd) {
  profiler_.set_period_ns(0);
  profiler_.OnModelLoaded(model_a_);
  const std::string file = OwnFile(model_a_);
  for (uint64_t now : {1ull, 1ull << 40, 1ull << 60}) EXPECT_TRUE(Collect(now).empty());
  EXPECT_EQ(OwnFile(model_a_), file);
  EXPECT_EQ(Collect(1ull << 61, /*final=*/true).size(), 4u);
  EXPECT_TRUE(runtime_.profiles.empty());
}

TEST_F(DeviceProfilerTest, TheProgramsProfileTakesPrecedenceAndIsLeftAlone) {
  profiler_.OnModelLoaded(model_a_);
  const std::string app = root_ + "/app.json";
  // Ours is stopped and collected first, then the program's call reaches the runtime as is.
  ASSERT_EQ(profiler_.AppStart(model_a_, app.c_str()), NRT_SUCCESS);
  EXPECT_EQ(OwnFile(model_a_), app);
  EXPECT_EQ(Collect(1).size(), 4u);  // ours, read at once
  // What the runtime says to a second start is what the program gets.
  runtime_.calls.clear();
  EXPECT_EQ(profiler_.AppStart(model_a_, (root_ + "/again.json").c_str()), NRT_INVALID);
  EXPECT_EQ(runtime_.calls, std::vector<std::string>{"start " + root_ + "/again.json"});
  EXPECT_EQ(profiler_.AppStop("no-such-profile"), NRT_INVALID);
  // The program's stop writes its file, which the profiler never touches; ours restarts.
  runtime_.next_text = "the program's own";
  ASSERT_EQ(profiler_.AppStop(app.c_str()), NRT_SUCCESS);
  EXPECT_EQ(access(app.c_str(), F_OK), 0);
  const std::string ours = OwnFile(model_a_);
  EXPECT_EQ(ours.rfind(profiler_.folder(), 0), 0u) << ours;
  EXPECT_TRUE(Collect(2).empty());
  // A program profiling a model the profiler does not know (or an unloaded one) is forwarded.
  EXPECT_EQ(profiler_.AppStart(model_b_, app.c_str()), NRT_SUCCESS);
  EXPECT_EQ(profiler_.AppStop(app.c_str()), NRT_SUCCESS);
  EXPECT_EQ(OwnFile(model_b_), "");
}

TEST_F(DeviceProfilerTest, MalformedProfilesAreCountedAsDropped) {
  profiler_.OnModelLoaded(model_a_);
  runtime_.next_text = R"({"model":"m","nc_idx":0,"executions":[{"exec_id":1,"start_ns":1,)"
                       R"("ops":[{"name":"mul","engine":"vector","start_ns":1,"duration_ns":1},)"
                       R"({"name":"add","engine":"vector","start_ns":1})";
  profiler_.BeforeModelUnload(model_a_);
  EXPECT_TRUE(Collect(1).empty());
  EXPECT_EQ(profiler_.malformed_total(), 2u);  // the two ops it held
  EXPECT_TRUE(notices_.empty());
}

TEST_F(DeviceProfilerTest, AProfileThatIsNotJsonIsLeftAndSaidOnce) {
  profiler_.OnModelLoaded(model_a_);
  profiler_.OnModelLoaded(model_b_);
  const std::string a = OwnFile(model_a_), b = OwnFile(model_b_);
  runtime_.next_text = std::string("NTFF\x01\x02\x03", 7);
  profiler_.BeforeRuntimeClose();
  EXPECT_TRUE(Collect(1).empty());
  EXPECT_EQ(profiler_.unread_files(), 2u);
  EXPECT_EQ(profiler_.malformed_total(), 0u);
  EXPECT_EQ(access(a.c_str(), F_OK), 0);
  EXPECT_EQ(access(b.c_str(), F_OK), 0);
  ASSERT_EQ(notices_.size(), 1u);
  EXPECT_NE(notices_[0].find("not JSON"), std::string::npos) << notices_[0];
  EXPECT_NE(notices_[0].find(profiler_.folder()), std::string::npos) << notices_[0];
  // And no more profiles pile up.
  profiler_.OnModelLoaded(model_a_);
  EXPECT_TRUE(runtime_.profiles.empty());
  Collect(2, /*final=*/true);
  EXPECT_EQ(access(profiler_.folder().c_str(), F_OK), 0) << "kept: it holds the files";
}

// The program's threads load, profile and unload while the flusher collects: every profile of
// the profiler's that was stopped is read once, whole, and nothing is left running. (Also run
// under ThreadSanitizer.)
TEST_F(DeviceProfilerTest, ProgramThreadsAndTheFlusherShareTheRuntimesProfiles) {
  constexpr int kRounds = 200;
  std::atomic<bool> done{false};
  std::thread program([&] {
    const std::string app = root_ + "/app.json";
    for (int i = 0; i < kRounds; ++i) {
      profiler_.OnModelLoaded(model_a_);
      profiler_.OnModelLoaded(model_b_);
      EXPECT_EQ(profiler_.AppStart(model_a_, app.c_str()), NRT_SUCCESS);
      EXPECT_EQ(profiler_.AppStop(app.c_str()), NRT_SUCCESS);
      profiler_.BeforeModelUnload(model_a_);
      if (i % 2 == 0) profiler_.BeforeRuntimeClose();
    }
    done = true;
  });
  size_t events = 0;
  for (uint64_t now = 1; !done; now += DeviceProfiler::kDefaultPeriodNs) events += Collect(now).size();
  program.join();
  events += Collect(UINT64_MAX / 2, /*final=*/true).size();
  EXPECT_TRUE(runtime_.profiles.empty());
  size_t own_stops = 0;
  const std::string folder = profiler_.folder();
  for (const std::string& call : runtime_.calls) {
    own_stops += call.rfind("stop " + folder + "/", 0) == 0;
  }
  EXPECT_EQ(events, 4 * own_stops);  // kProfile holds 2 ops and 2 transfers
  EXPECT_GE(own_stops, static_cast<size_t>(2 * kRounds));
  EXPECT_EQ(profiler_.malformed_total(), 0u);
}

}  // namespace
}  // namespace nrtprof::shim
