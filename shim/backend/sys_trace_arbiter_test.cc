#include "shim/backend/sys_trace_arbiter.h"

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

// A runtime with the real one's rules: one capture at a time, each event handed out once,
// events of a stopped capture fetchable until the next start.
struct FakeRuntime {
  bool recording = false;
  bool ever_started = false;
  uint64_t max_events = 0;
  std::vector<std::string> pending;
  int starts = 0;
  bool fail_next_start = false;
  std::vector<std::string> errors;
  std::set<std::string> off;  // the running capture's types turned off

  // An event of the type `name`.
  void Event(const std::string& name) {
    if (recording && off.count(name) == 0) pending.push_back(name);
  }
};
FakeRuntime* g_rt = nullptr;

struct nrt_sys_trace_config_fake {
  uint64_t max_events = 0;
  std::set<std::string> off;
};

NRT_STATUS ConfigAllocate(nrt_sys_trace_config_t** c) {
  *c = reinterpret_cast<nrt_sys_trace_config_t*>(new nrt_sys_trace_config_fake());
  return NRT_SUCCESS;
}
void ConfigFree(nrt_sys_trace_config_t* c) {
  delete reinterpret_cast<nrt_sys_trace_config_fake*>(c);
}
void ConfigSetMax(nrt_sys_trace_config_t* c, uint64_t n) {
  reinterpret_cast<nrt_sys_trace_config_fake*>(c)->max_events = n;
}
NRT_STATUS Start(nrt_sys_trace_config_t* c) {
  if (g_rt->fail_next_start) {
    g_rt->fail_next_start = false;
    g_rt->errors.push_back("bad config");
    return NRT_INVALID;
  }
  if (g_rt->recording) {
    g_rt->errors.push_back("already started");
    return NRT_INVALID;
  }
  g_rt->recording = true;
  g_rt->ever_started = true;
  g_rt->pending.clear();
  g_rt->max_events = c != nullptr ? reinterpret_cast<nrt_sys_trace_config_fake*>(c)->max_events : 0;
  g_rt->off =
      c != nullptr ? reinterpret_cast<nrt_sys_trace_config_fake*>(c)->off : std::set<std::string>{};
  ++g_rt->starts;
  return NRT_SUCCESS;
}
NRT_STATUS Stop() {
  if (!g_rt->recording) {
    g_rt->errors.push_back("not started");
    return NRT_INVALID;
  }
  g_rt->recording = false;
  return NRT_SUCCESS;
}
NRT_STATUS Fetch(char** buffer, size_t* size, const nrt_sys_trace_fetch_options_t*) {
  if (!g_rt->ever_started) {
    g_rt->errors.push_back("never started");
    return NRT_INVALID;
  }
  std::string doc;
  for (const auto& e : g_rt->pending) doc += e + ";";
  g_rt->pending.clear();
  *buffer = strdup(doc.c_str());
  *size = doc.size();
  return NRT_SUCCESS;
}
void BufferFree(char* b) { free(b); }

SysTraceFunctions Fakes() {
  SysTraceFunctions f;
  f.config_allocate = &ConfigAllocate;
  f.config_free = &ConfigFree;
  f.config_set_max_events_per_nc = &ConfigSetMax;
  f.start = &Start;
  f.stop = &Stop;
  f.fetch_events = &Fetch;
  f.buffer_free = &BufferFree;
  return f;
}

// The fake runtime's event types, for a capture of some of them.
const char* const kTypes[] = {"nrt_execute", "device_exec", "model_switch"};
NRT_STATUS GetTypes(const char*** types, size_t* count) {
  *count = sizeof(kTypes) / sizeof(kTypes[0]);
  *types = static_cast<const char**>(malloc(*count * sizeof(char*)));
  for (size_t i = 0; i < *count; ++i) (*types)[i] = strdup(kTypes[i]);
  return NRT_SUCCESS;
}
void FreeTypes(const char** types, size_t count) {
  for (size_t i = 0; i < count; ++i) free(const_cast<char*>(types[i]));
  free(types);
}
NRT_STATUS SetType(nrt_sys_trace_config_t* c, const char* type, bool enabled) {
  auto& off = reinterpret_cast<nrt_sys_trace_config_fake*>(c)->off;
  if (enabled) {
    off.erase(type);
  } else {
    off.insert(type);
  }
  return NRT_SUCCESS;
}
SysTraceFunctions FakesWithTypes() {
  SysTraceFunctions f = Fakes();
  f.get_event_types = &GetTypes;
  f.free_event_types = &FreeTypes;
  f.config_set_event_type = &SetType;
  return f;
}

class ArbiterTest : public ::testing::Test {
 protected:
  ArbiterTest()
      : arbiter_(1 << 16, [] { return Fakes(); },
                 [this](uint64_t generation, std::string json) {
                   if (!json.empty()) profiler_.push_back(std::to_string(generation) + ":" + json);
                 }) {
    g_rt = &rt_;
  }

  // What the program's fetch returns.
  std::string AppFetch(NRT_STATUS* status = nullptr) {
    char* buffer = nullptr;
    size_t size = 0;
    const NRT_STATUS s = arbiter_.AppFetch(&buffer, &size, nullptr);
    if (status != nullptr) *status = s;
    if (s != NRT_SUCCESS) return "<error>";
    std::string doc(buffer, size);
    if (!arbiter_.AppBufferFree(buffer)) BufferFree(buffer);
    return doc;
  }

  FakeRuntime rt_;
  std::vector<std::string> profiler_;
  SysTraceArbiter arbiter_;
};

TEST_F(ArbiterTest, TheProfilerCapturesBetweenInitAndClose) {
  arbiter_.OnRuntimeInit();
  EXPECT_TRUE(arbiter_.own_capture_running());
  EXPECT_EQ(rt_.max_events, 1u << 16);
  rt_.Event("a");
  arbiter_.Poll(false);
  rt_.Event("b");
  // Close: what is left is fetched before the runtime discards it.
  arbiter_.BeforeRuntimeClose();
  rt_.recording = false;
  arbiter_.AfterRuntimeClose();
  EXPECT_FALSE(arbiter_.own_capture_running());
  EXPECT_EQ(profiler_, (std::vector<std::string>{"1:a;", "1:b;"}));
  EXPECT_TRUE(rt_.errors.empty());
}

TEST_F(ArbiterTest, PolledDocumentsAreLentOthersCopied) {
  // The flusher parses what it polls in the runtime's buffer; what is fetched on the program's
  // threads (here: the program's start suspends the profiler's capture) is still copied. Both
  // in the order fetched, each once.
  std::vector<std::string> lent;
  arbiter_.LendPolledDocuments([&](uint64_t generation, std::string_view json) {
    lent.push_back(std::to_string(generation) + ":" + std::string(json));
  });
  arbiter_.OnRuntimeInit();
  rt_.Event("a");
  arbiter_.Poll(false);
  rt_.Event("b");
  ASSERT_EQ(arbiter_.AppStart(nullptr), NRT_SUCCESS);
  rt_.Event("mine");
  ASSERT_EQ(arbiter_.AppStop(), NRT_SUCCESS);
  rt_.Event("c");
  arbiter_.Poll(false);
  EXPECT_EQ(lent, (std::vector<std::string>{"1:a;", "3:c;"}));
  EXPECT_EQ(profiler_, (std::vector<std::string>{"1:b;", "2:mine;"}));
  EXPECT_TRUE(rt_.errors.empty());
}

TEST_F(ArbiterTest, TheProgramsCaptureSeesExactlyItsOwnEventsAndTheProfilerACopy) {
  arbiter_.OnRuntimeInit();
  rt_.Event("before");
  EXPECT_FALSE(arbiter_.app_capture_running());
  ASSERT_EQ(arbiter_.AppStart(nullptr), NRT_SUCCESS);
  EXPECT_FALSE(arbiter_.own_capture_running());
  EXPECT_TRUE(arbiter_.app_capture_running()) << "its events come only as it fetches";
  rt_.Event("mine1");
  arbiter_.Poll(false);  // the flusher must not steal the program's events
  rt_.Event("mine2");
  EXPECT_EQ(AppFetch(), "mine1;mine2;");
  rt_.Event("mine3");
  ASSERT_EQ(arbiter_.AppStop(), NRT_SUCCESS);
  EXPECT_TRUE(arbiter_.own_capture_running()) << "the profiler's capture resumes";
  EXPECT_FALSE(arbiter_.app_capture_running());
  // The stopped capture's leftovers are still the program's to fetch, once.
  EXPECT_EQ(AppFetch(), "mine3;");
  rt_.Event("after");
  arbiter_.Poll(false);
  EXPECT_EQ(profiler_, (std::vector<std::string>{"1:before;", "2:mine1;mine2;", "2:mine3;",
                                                 "3:after;"}));
  EXPECT_TRUE(rt_.errors.empty());
}

TEST_F(ArbiterTest, TheProgramGetsTheRuntimesOwnAnswerWhenItHasNoCapture) {
  arbiter_.OnRuntimeInit();
  rt_.Event("profiled");
  // Stopping a capture it never started fails, as without the profiler.
  EXPECT_EQ(arbiter_.AppStop(), NRT_INVALID);
  EXPECT_EQ(rt_.errors, (std::vector<std::string>{"not started"}));
  EXPECT_TRUE(arbiter_.own_capture_running());
  // A fetch without a capture sees none of the profiler's events.
  EXPECT_EQ(AppFetch(), "");
  EXPECT_EQ(profiler_, (std::vector<std::string>{"1:profiled;"}));
  // Starting twice fails the second time, as without the profiler.
  ASSERT_EQ(arbiter_.AppStart(nullptr), NRT_SUCCESS);
  EXPECT_EQ(arbiter_.AppStart(nullptr), NRT_INVALID);
}

TEST_F(ArbiterTest, AFailedProgramStartLeavesTheProfilersCaptureRunning) {
  arbiter_.OnRuntimeInit();
  rt_.fail_next_start = true;
  EXPECT_EQ(arbiter_.AppStart(nullptr), NRT_INVALID);
  EXPECT_TRUE(arbiter_.own_capture_running());
  rt_.Event("still profiled");
  arbiter_.Poll(false);
  EXPECT_EQ(profiler_.back(), "2:still profiled;");
}

TEST_F(ArbiterTest, AtExitTheProgramsCaptureIsFetchedToo) {
  arbiter_.OnRuntimeInit();
  ASSERT_EQ(arbiter_.AppStart(nullptr), NRT_SUCCESS);
  rt_.Event("unfetched");
  arbiter_.Poll(/*final=*/true);
  EXPECT_EQ(profiler_, (std::vector<std::string>{"2:unfetched;"}));
}

// A process nothing records (a standing daemon without its flight recorder, no capture) runs
// no system trace for the profiler: the runtime records nothing and nothing is fetched. When
// recording begins the capture starts again; the program's own capture is left alone.
TEST_F(ArbiterTest, TheProfilersCaptureRunsOnlyWhileTheProcessRecords) {
  arbiter_.OnRuntimeInit();
  rt_.Event("recorded");
  arbiter_.SetWanted(false);
  EXPECT_FALSE(arbiter_.own_capture_running());
  EXPECT_FALSE(rt_.recording) << "the runtime records no trace nobody wants";
  rt_.Event("unwanted");
  arbiter_.Poll(false);
  arbiter_.SetWanted(true);
  EXPECT_TRUE(arbiter_.own_capture_running());
  rt_.Event("wanted again");
  arbiter_.Poll(false);
  // What was recorded before the stop is fetched at the stop.
  EXPECT_EQ(profiler_, (std::vector<std::string>{"1:recorded;", "2:wanted again;"}));
  // Not wanted at the next nrt_init: not started.
  arbiter_.BeforeRuntimeClose();
  rt_.recording = false;
  arbiter_.AfterRuntimeClose();
  arbiter_.SetWanted(false);
  arbiter_.OnRuntimeInit();
  EXPECT_FALSE(rt_.recording);
  EXPECT_EQ(rt_.starts, 2);
  // The program's own capture, started and stopped meanwhile, is the program's; the profiler's
  // does not come back after it while nothing records.
  ASSERT_EQ(arbiter_.AppStart(nullptr), NRT_SUCCESS);
  arbiter_.SetWanted(true);
  EXPECT_TRUE(arbiter_.app_capture_running());
  arbiter_.SetWanted(false);
  EXPECT_TRUE(arbiter_.app_capture_running()) << "not the profiler's to stop";
  ASSERT_EQ(arbiter_.AppStop(), NRT_SUCCESS);
  EXPECT_FALSE(rt_.recording);
  EXPECT_FALSE(arbiter_.own_capture_running());
  EXPECT_TRUE(rt_.errors.empty());
}

TEST_F(ArbiterTest, BeforeInitTheProgramsCallsGoStraightToTheRuntime) {
  EXPECT_EQ(AppFetch(), "<error>");
  EXPECT_EQ(rt_.errors, (std::vector<std::string>{"never started"}));
  EXPECT_FALSE(arbiter_.own_capture_running());
}

// The profiler's capture asks the runtime for the types it draws only; the program's own
// capture gets what the program asked for; a runtime that cannot choose records every type.
TEST(ArbiterTypesTest, TheProfilersCaptureLeavesOutTheTypesItDoesNotDraw) {
  for (bool can_choose : {true, false}) {
    SCOPED_TRACE(can_choose ? "a runtime with per-type capture" : "a runtime without");
    FakeRuntime rt;
    g_rt = &rt;
    std::vector<std::string> profiler;
    SysTraceArbiter arbiter(
        1 << 16, [can_choose] { return can_choose ? FakesWithTypes() : Fakes(); },
        [&profiler](uint64_t, std::string json) {
          if (!json.empty()) profiler.push_back(json);
        },
        [](const char* type) { return strcmp(type, "device_exec") == 0; });
    auto each_type = [&rt] {
      for (const char* type : kTypes) rt.Event(type);
    };
    const std::string profilers =
        can_choose ? "device_exec;" : "nrt_execute;device_exec;model_switch;";
    arbiter.OnRuntimeInit();
    each_type();
    arbiter.Poll(false);
    EXPECT_EQ(profiler, std::vector<std::string>{profilers});

    // The program's capture, as it configured it: every type.
    nrt_sys_trace_config_t* mine = nullptr;
    ASSERT_EQ(ConfigAllocate(&mine), NRT_SUCCESS);
    ASSERT_EQ(arbiter.AppStart(mine), NRT_SUCCESS);
    ConfigFree(mine);
    each_type();
    char* buffer = nullptr;
    size_t size = 0;
    ASSERT_EQ(arbiter.AppFetch(&buffer, &size, nullptr), NRT_SUCCESS);
    EXPECT_EQ(std::string(buffer, size), "nrt_execute;device_exec;model_switch;");
    if (!arbiter.AppBufferFree(buffer)) BufferFree(buffer);

    // The profiler's capture, once the program's stops: its types again.
    ASSERT_EQ(arbiter.AppStop(), NRT_SUCCESS);
    profiler.clear();
    each_type();
    arbiter.Poll(false);
    EXPECT_EQ(profiler, std::vector<std::string>{profilers});
    EXPECT_TRUE(rt.errors.empty());
  }
}

}  // namespace
}  // namespace nrtprof::shim
