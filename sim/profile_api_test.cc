// The runtime's own profiling as a program calls it (nrt/nrt_profile.h beyond
// nrt_profile_start/stop, and nrt_get_status_as_str): every function links and answers with the
// documented status; an inspect session writes its system trace where the options or the
// NEURON_RT_INSPECT_* variables say; a nrt_sys_trace_* capture beside it keeps all its events;
// what the simulator cannot capture fails or is said once. The public facts (signatures,
// defaults, the variables, "NULL: default options", the status names) are from the SDK's
// nrt/nrt_profile.h, nrt/nrt_status.h and their API reference pages.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_status.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/testing/runtime_testing.h"

namespace {

using nrtsim::testing::DeviceFloats;
using nrtsim::testing::Fetch;
using nrtsim::testing::FetchedTrace;
using nrtsim::testing::Load;
using nrtsim::testing::Num;
using nrtsim::testing::RealShapeError;
using nrtsim::testing::Set;
using nrtsim::testing::Str;

const char kTwoOps[] =
    "model scale_add\ninput a fp32 [64]\ninput b fp32 [64]\noutput out fp32 [64]\n"
    "t = mul_scalar(a, 2)\nout = add(t, b)\n";

// A fresh folder under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
  return dir;
}

// Where a session of this process writes its system trace.
std::string SessionFile(const std::string& dir, int session_id) {
  return dir + "/sim_pid_" + std::to_string(getpid()) + "/system_trace_session_" +
         std::to_string(session_id) + ".json";
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The file parsed as a system-trace document; fails the test if it is not one.
FetchedTrace ReadTrace(const std::string& path) {
  FetchedTrace trace;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no file " << path;
  std::stringstream text;
  text << in.rdbuf();
  trace.json = text.str();
  google::protobuf::Struct doc;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(trace.json, &doc).ok()) << trace.json;
  if (doc.fields().count("events") == 0) {
    ADD_FAILURE() << "no events array in " << path;
    return trace;
  }
  for (const auto& v : doc.fields().at("events").list_value().values()) {
    trace.events.push_back(v.struct_value());
  }
  return trace;
}

std::set<double> Ids(const std::vector<google::protobuf::Struct>& events) {
  std::set<double> ids;
  for (const auto& e : events) ids.insert(Num(e, "id"));
  return ids;
}

// Options that capture the system trace only (so nothing is said about what cannot be).
nrt_inspect_config_t* SystemOnly(const std::string& dir, int session_id = 1) {
  nrt_inspect_config_t* config = nullptr;
  EXPECT_EQ(nrt_inspect_config_allocate(&config), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_output_dir(config, dir.c_str()), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_session_id(config, session_id), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_activity(config, "all", false), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_activity(config, "system_profile", true), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_enable_inspect(config, true), NRT_SUCCESS);
  return config;
}

TEST(StatusAsStrTest, EveryStatusHasItsName) {
  // Every value of this nrt/nrt_status.h, before nrt_init as after.
  const std::vector<std::pair<NRT_STATUS, std::string>> statuses = {
      {NRT_SUCCESS, "NRT_SUCCESS"},
      {NRT_FAILURE, "NRT_FAILURE"},
      {NRT_INVALID, "NRT_INVALID"},
      {NRT_INVALID_HANDLE, "NRT_INVALID_HANDLE"},
      {NRT_RESOURCE, "NRT_RESOURCE"},
      {NRT_TIMEOUT, "NRT_TIMEOUT"},
      {NRT_HW_ERROR, "NRT_HW_ERROR"},
      {NRT_QUEUE_FULL, "NRT_QUEUE_FULL"},
      {NRT_LOAD_NOT_ENOUGH_NC, "NRT_LOAD_NOT_ENOUGH_NC"},
      {NRT_UNSUPPORTED_NEFF_VERSION, "NRT_UNSUPPORTED_NEFF_VERSION"},
      {NRT_UNINITIALIZED, "NRT_UNINITIALIZED"},
      {NRT_CLOSED, "NRT_CLOSED"},
      {NRT_EXEC_BAD_INPUT, "NRT_EXEC_BAD_INPUT"},
      {NRT_EXEC_COMPLETED_WITH_NUM_ERR, "NRT_EXEC_COMPLETED_WITH_NUM_ERR"},
      {NRT_EXEC_COMPLETED_WITH_ERR, "NRT_EXEC_COMPLETED_WITH_ERR"},
      {NRT_EXEC_NC_BUSY, "NRT_EXEC_NC_BUSY"},
      {NRT_COLL_PENDING, "NRT_COLL_PENDING"},
  };
  for (const auto& [status, name] : statuses) {
    ASSERT_NE(nrt_get_status_as_str(status), nullptr);
    EXPECT_EQ(nrt_get_status_as_str(status), name);
  }
  // The real runtime's codes this header does not list, by value.
  const std::vector<std::pair<int, std::string>> others = {
      {11, "NRT_FAIL_HOST_MEM_ALLOC"},        {15, "NRT_QUEUE_EMPTY"},
      {101, "NRT_EXEC_UNIT_UNRECOVERABLE"},   {1006, "NRT_EXEC_OOB"},
      {1200, "NRT_EXEC_HW_ERR_COLLECTIVES"},  {1201, "NRT_EXEC_HW_ERR_HBM_UE"},
      {1202, "NRT_EXEC_HW_ERR_NC_UE"},        {1203, "NRT_EXEC_HW_ERR_DMA_ABORT"},
      {1204, "NRT_EXEC_SW_NQ_OVERFLOW"},      {1205, "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE"},
      {1206, "NRT_NETWORK_PROXY_FAILURE"},
  };
  for (const auto& [value, name] : others) {
    EXPECT_EQ(nrt_get_status_as_str(static_cast<NRT_STATUS>(value)), name);
  }
  for (int unknown : {8, 12, 16, 100, 1001, 1007, 1099, 1101, 1207, 2047}) {
    EXPECT_STREQ(nrt_get_status_as_str(static_cast<NRT_STATUS>(unknown)), "UNKNOWN") << unknown;
  }
}

TEST(InspectConfigTest, SettersCheckTheirArguments) {
  EXPECT_EQ(nrt_inspect_config_allocate(nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_free(nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_defaults(nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_session_id(nullptr, 2), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_output_dir(nullptr, "x"), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_sys_trace_max_events_per_nc(nullptr, 10), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_nc(nullptr, 0, true), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_event_type_string(nullptr, "nrt_load",
                                                                          true),
            NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_enable_inspect(nullptr, true), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_enable_inspect_on_fail(nullptr, true), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_activity(nullptr, "all", true), NRT_INVALID);

  nrt_inspect_config_t* config = nullptr;
  ASSERT_EQ(nrt_inspect_config_allocate(&config), NRT_SUCCESS);
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(nrt_inspect_config_set_defaults(config), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_session_id(config, 7), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_output_dir(config, nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_output_dir(config, ""), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_output_dir(config, "./somewhere"), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_sys_trace_max_events_per_nc(config, 0), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_sys_trace_max_events_per_nc(config, (1u << 24) + 1),
            NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_sys_trace_max_events_per_nc(config, 1u << 24), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_nc(config, 1, false), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_nc(config, 200, false), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_event_type_string(config, nullptr, true),
            NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_event_type_string(config, "bogus", true),
            NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_capture_enabled_for_event_type_string(config, "device_exec",
                                                                          false),
            NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_enable_inspect(config, true), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_enable_inspect_on_fail(config, false), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_config_set_activity(config, nullptr, true), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_set_activity(config, "gpu_util", true), NRT_INVALID);

  // Activity types: all four by default, by name or all at once.
  const char** types = nullptr;
  size_t count = 0;
  EXPECT_EQ(nrt_inspect_config_get_all_activity_types(nullptr, &count), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_config_get_all_activity_types(&types, nullptr), NRT_INVALID);
  ASSERT_EQ(nrt_inspect_config_get_all_activity_types(&types, &count), NRT_SUCCESS);
  const std::set<std::string> all = {"system_profile", "device_profile", "host_memory",
                                     "cpu_util"};
  EXPECT_EQ(std::set<std::string>(types, types + count), all);
  EXPECT_EQ(count, 4u);
  nrt_inspect_config_free_activity_types(types, count);
  ASSERT_EQ(nrt_inspect_config_get_enabled_activity_types(config, &types, &count), NRT_SUCCESS);
  EXPECT_EQ(std::set<std::string>(types, types + count), all);
  nrt_inspect_config_free_activity_types(types, count);
  EXPECT_EQ(nrt_inspect_config_get_enabled_activity_types(nullptr, &types, &count), NRT_INVALID);
  ASSERT_EQ(nrt_inspect_config_set_activity(config, "all", false), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_set_activity(config, "cpu_util", true), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_get_enabled_activity_types(config, &types, &count), NRT_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_STREQ(types[0], "cpu_util");
  nrt_inspect_config_free_activity_types(types, count);
  // set_defaults brings every activity back.
  ASSERT_EQ(nrt_inspect_config_set_defaults(config), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_get_enabled_activity_types(config, &types, &count), NRT_SUCCESS);
  EXPECT_EQ(count, 4u);
  nrt_inspect_config_free_activity_types(types, count);
  nrt_inspect_config_free_activity_types(nullptr, 0);  // harmless
  EXPECT_EQ(nrt_inspect_config_free(config), NRT_SUCCESS);
}

TEST(ContinuousProfileTest, OptionsWorkAndProfilingIsNotSupported) {
  EXPECT_EQ(nrt_profile_continuous_options_allocate(nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_profile_continuous_options_free(nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_profile_continuous_options_set_output_dir(nullptr, "x"), NRT_INVALID);
  nrt_profile_continuous_options_t* options = nullptr;
  ASSERT_EQ(nrt_profile_continuous_options_allocate(&options), NRT_SUCCESS);
  EXPECT_EQ(nrt_profile_continuous_options_set_output_dir(options, ""), NRT_INVALID);
  EXPECT_EQ(nrt_profile_continuous_options_set_output_dir(options, nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_profile_continuous_options_set_output_dir(options, "./continuous"), NRT_SUCCESS);
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrt_profile_continuous_start(options), NRT_FAILURE);
  EXPECT_EQ(nrt_profile_continuous_save(0, options), NRT_FAILURE);
  EXPECT_EQ(nrt_profile_continuous_stop(), NRT_FAILURE);
  EXPECT_EQ(nrt_profile_continuous_start(options), NRT_FAILURE);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said,
            "nrt: continuous device profiling (nrt_profile_continuous_start, _save, _stop) is "
            "not supported by the simulated runtime\n");
  nrt_close();
  EXPECT_EQ(nrt_profile_continuous_options_free(options), NRT_SUCCESS);
}

TEST(InspectLifecycleTest, FollowsTheRuntimesState) {
  const std::string dir = FreshDir("lifecycle");
  nrt_inspect_config_t* config = SystemOnly(dir);
  // Before nrt_init (or, when another test ran first, after its nrt_close).
  const NRT_STATUS before = nrt_inspect_begin_with_options(config);
  EXPECT_TRUE(before == NRT_UNINITIALIZED || before == NRT_CLOSED) << before;
  EXPECT_EQ(nrt_inspect_stop(), NRT_INVALID);  // nothing begun
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_begin_with_options(config), NRT_INVALID);  // in progress
  EXPECT_EQ(nrt_inspect_begin(), NRT_INVALID);
  EXPECT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_stop(), NRT_INVALID);  // over
  EXPECT_TRUE(Exists(SessionFile(dir, 1)));
  // nrt_close drops a session's capture: the stop says the runtime is closed, writes nothing,
  // and ends the session.
  const std::string dropped = FreshDir("dropped");
  nrt_inspect_config_t* other = SystemOnly(dropped);
  ASSERT_EQ(nrt_inspect_begin_with_options(other), NRT_SUCCESS);
  nrt_close();
  EXPECT_EQ(nrt_inspect_stop(), NRT_CLOSED);
  EXPECT_FALSE(Exists(SessionFile(dropped, 1)));
  EXPECT_EQ(nrt_inspect_begin_with_options(other), NRT_CLOSED);
  // A new runtime takes a new session.
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_begin_with_options(other), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_TRUE(Exists(SessionFile(dropped, 1)));
  // A session begun before nrt_close and stopped in the next runtime: over, nothing written.
  const std::string across = FreshDir("across");
  nrt_inspect_config_t* third = SystemOnly(across);
  ASSERT_EQ(nrt_inspect_begin_with_options(third), NRT_SUCCESS);
  nrt_close();
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_stop(), NRT_INVALID);
  EXPECT_FALSE(Exists(SessionFile(across, 1)));
  EXPECT_EQ(nrt_inspect_begin_with_options(third), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  nrt_inspect_config_free(third);
  nrt_close();
  nrt_inspect_config_free(other);
  nrt_inspect_config_free(config);
}

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
    model_ = Load(kTwoOps, 0);
    a_ = DeviceFloats(0, std::vector<float>(64, 1.0f), "a");
    b_ = DeviceFloats(0, std::vector<float>(64, 2.0f), "b");
    out_ = DeviceFloats(0, std::vector<float>(64, 0.0f), "out");
    in_ = Set({{"a", a_}, {"b", b_}});
    outs_ = Set({{"out", out_}});
  }
  void TearDown() override { nrt_close(); }

  void Execute(int n) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  }

  nrt_model_t* model_;
  nrt_tensor_t *a_, *b_, *out_;
  nrt_tensor_set_t *in_, *outs_;
};

TEST_F(InspectTest, SessionWritesItsExecutionsToTheOutputDirectory) {
  Execute(2);  // before the session: not in it
  const std::string dir = FreshDir("session");
  nrt_inspect_config_t* config = SystemOnly(dir, 4);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(3);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // system_profile is all it asked
  Execute(1);  // after: not in it
  nrt_inspect_config_free(config);

  const FetchedTrace trace = ReadTrace(SessionFile(dir, 4));
  EXPECT_EQ(RealShapeError(trace.json), "") << trace.json;
  const auto calls = trace.OfType("nrt_execute", "start");
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(Str(calls[0].fields().at("data").struct_value(), "model_name"), "scale_add");
  EXPECT_EQ(trace.OfType("nrt_execute", "stop").size(), 3u);
  const auto execs = trace.OfType("device_exec", "start");
  ASSERT_EQ(execs.size(), 3u);
  std::set<double> exec_ids;
  for (const auto& e : execs) exec_ids.insert(Num(e.fields().at("data").struct_value(), "exec_id"));
  EXPECT_EQ(exec_ids.size(), 3u);
  EXPECT_EQ(trace.OfType("device_exec", "stop").size(), 3u);
  // Clock sync points at the begin and at the stop.
  EXPECT_GE(trace.OfType("timestamp_sync").size(), 2u);
  EXPECT_TRUE(trace.OfType("nrt_load").empty());  // loaded before the session
  // Only the document: no temporary file left beside it.
  EXPECT_FALSE(Exists(SessionFile(dir, 4) + ".tmp"));
}

TEST_F(InspectTest, ACaptureBesideTheSessionKeepsItsEvents) {
  const std::string dir = FreshDir("beside");
  ASSERT_EQ(nrt_sys_trace_start(nullptr), NRT_SUCCESS);  // as nrtprof's shim does
  nrt_inspect_config_t* config = SystemOnly(dir);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(2);
  const FetchedTrace first = Fetch();  // the API reader's fetch, mid-session
  EXPECT_EQ(first.OfType("device_exec", "start").size(), 2u);
  Execute(1);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  Execute(1);  // the API capture goes on after the session
  const FetchedTrace second = Fetch();
  ASSERT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);
  EXPECT_EQ(second.OfType("device_exec", "start").size(), 2u);
  nrt_inspect_config_free(config);

  // The session saw its three executions, though the API reader fetched two of them first;
  // each is the same event (same id) in both documents.
  const FetchedTrace session = ReadTrace(SessionFile(dir, 1));
  const auto in_session = session.OfType("device_exec", "start");
  ASSERT_EQ(in_session.size(), 3u);
  std::set<double> api_ids = Ids(first.OfType("device_exec"));
  for (double id : Ids(second.OfType("device_exec"))) api_ids.insert(id);
  for (double id : Ids(session.OfType("device_exec"))) EXPECT_EQ(api_ids.count(id), 1u) << id;
  // Each reader numbers a core's events from 1 on its own.
  EXPECT_EQ(Num(session.events[0], "nc_local_id"), 1);
}

// Executions on two cores from two threads while the API reader fetches over and over: each
// reader ends with every execution, none twice.
TEST_F(InspectTest, BothReadersGetEveryEventUnderConcurrentUse) {
  nrt_model_t* model1 = Load(kTwoOps, 1);
  nrt_tensor_t* a1 = DeviceFloats(1, std::vector<float>(64, 1.0f), "a");
  nrt_tensor_t* b1 = DeviceFloats(1, std::vector<float>(64, 2.0f), "b");
  nrt_tensor_t* out1 = DeviceFloats(1, std::vector<float>(64, 0.0f), "out");
  nrt_tensor_set_t* in1 = Set({{"a", a1}, {"b", b1}});
  nrt_tensor_set_t* outs1 = Set({{"out", out1}});
  const std::string dir = FreshDir("concurrent");
  nrt_inspect_config_t* config = SystemOnly(dir);
  ASSERT_EQ(nrt_sys_trace_start(nullptr), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  constexpr int kPerThread = 200;
  std::atomic<int> running{2};
  std::thread t0([&] {
    for (int i = 0; i < kPerThread; ++i) EXPECT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
    --running;
  });
  std::thread t1([&] {
    for (int i = 0; i < kPerThread; ++i) EXPECT_EQ(nrt_execute(model1, in1, outs1), NRT_SUCCESS);
    --running;
  });
  std::set<double> api_execs;
  size_t api_starts = 0;
  while (running.load() > 0) {
    const auto starts = Fetch().OfType("device_exec", "start");
    api_starts += starts.size();
    for (const auto& e : starts) api_execs.insert(Num(e.fields().at("data").struct_value(), "exec_id"));
  }
  t0.join();
  t1.join();
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  const auto rest = Fetch().OfType("device_exec", "start");
  api_starts += rest.size();
  for (const auto& e : rest) api_execs.insert(Num(e.fields().at("data").struct_value(), "exec_id"));
  ASSERT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);
  EXPECT_EQ(api_starts, 2u * kPerThread);
  EXPECT_EQ(api_execs.size(), 2u * kPerThread);
  const auto session = ReadTrace(SessionFile(dir, 1)).OfType("device_exec", "start");
  EXPECT_EQ(session.size(), 2u * kPerThread);
  std::set<double> session_execs;
  for (const auto& e : session) {
    session_execs.insert(Num(e.fields().at("data").struct_value(), "exec_id"));
  }
  EXPECT_EQ(session_execs, api_execs);
  nrt_inspect_config_free(config);
}

TEST_F(InspectTest, ASessionBesideACaptureStartedLater) {
  const std::string dir = FreshDir("later");
  nrt_inspect_config_t* config = SystemOnly(dir);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(1);
  ASSERT_EQ(nrt_sys_trace_start(nullptr), NRT_SUCCESS);
  Execute(1);
  ASSERT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);  // the API capture ends first
  Execute(1);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_EQ(Fetch().OfType("device_exec", "start").size(), 1u);
  EXPECT_EQ(ReadTrace(SessionFile(dir, 1)).OfType("device_exec", "start").size(), 3u);
  nrt_inspect_config_free(config);
}

TEST_F(InspectTest, FiltersAndRingSizeApply) {
  const std::string dir = FreshDir("filters");
  nrt_inspect_config_t* config = SystemOnly(dir);
  ASSERT_EQ(nrt_inspect_config_set_capture_enabled_for_event_type_string(config, "nrt_execute",
                                                                          false),
            NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(2);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  FetchedTrace trace = ReadTrace(SessionFile(dir, 1));
  EXPECT_TRUE(trace.OfType("nrt_execute").empty());
  EXPECT_EQ(trace.OfType("device_exec", "start").size(), 2u);

  // Core 0 off: its executions are not captured.
  ASSERT_EQ(nrt_inspect_config_set_defaults(config), NRT_SUCCESS);
  nrt_inspect_config_free(config);
  config = SystemOnly(dir, 2);
  ASSERT_EQ(nrt_inspect_config_set_capture_enabled_for_nc(config, 0, false), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(1);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_TRUE(ReadTrace(SessionFile(dir, 2)).OfType("device_exec").empty());

  // A ring of 4 events keeps the last 4.
  nrt_inspect_config_free(config);
  config = SystemOnly(dir, 3);
  ASSERT_EQ(nrt_inspect_config_set_sys_trace_max_events_per_nc(config, 4), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(5);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  trace = ReadTrace(SessionFile(dir, 3));
  size_t on_core0 = 0;
  for (const auto& e : trace.events) on_core0 += Num(e, "nc_idx") == 0 ? 1 : 0;
  EXPECT_EQ(on_core0, 4u);
  nrt_inspect_config_free(config);
}

// The documented defaults have enable_inspect off: a session with them captures nothing.
TEST_F(InspectTest, DefaultOptionsCaptureNothing) {
  const std::string cwd_output = "./output/sim_pid_" + std::to_string(getpid());
  ASSERT_EQ(nrt_inspect_begin_with_options(nullptr), NRT_SUCCESS);
  Execute(1);
  EXPECT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_FALSE(Exists(cwd_output));
}

TEST_F(InspectTest, WhatCannotBeCapturedIsSaidOnceOrFails) {
  const std::string dir = FreshDir("unsupported");
  nrt_inspect_config_t* config = nullptr;
  ASSERT_EQ(nrt_inspect_config_allocate(&config), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_set_output_dir(config, dir.c_str()), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_set_enable_inspect(config, true), NRT_SUCCESS);
  // Every activity (the default): the system trace is captured, the rest said once.
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
    Execute(1);
    ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "nrt: nrt_inspect_begin_with_options: device_profile, host_memory, cpu_util are not "
            "supported by the simulated runtime; the session captures system_profile only\n");
  EXPECT_EQ(ReadTrace(SessionFile(dir, 1)).OfType("device_exec", "start").size(), 1u);
  // Nothing the simulator can capture: the session does not begin.
  ASSERT_EQ(nrt_inspect_config_set_activity(config, "all", false), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_set_activity(config, "device_profile", true), NRT_SUCCESS);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrt_inspect_begin_with_options(config), NRT_FAILURE);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "nrt: nrt_inspect_begin_with_options: device_profile is not supported by the "
            "simulated runtime\n");
  EXPECT_EQ(nrt_inspect_stop(), NRT_INVALID);  // it never began
  ASSERT_EQ(nrt_inspect_config_set_defaults(config), NRT_SUCCESS);
  ASSERT_EQ(nrt_inspect_config_set_enable_inspect_on_fail(config, true), NRT_SUCCESS);
  EXPECT_EQ(nrt_inspect_begin_with_options(config), NRT_FAILURE);
  nrt_inspect_config_free(config);
}

TEST_F(InspectTest, AnOutputDirectoryThatCannotBeMadeFailsTheStop) {
  const std::string dir = FreshDir("blocked");
  ASSERT_EQ(system(("mkdir -p '" + dir + "' && touch '" + dir + "/file'").c_str()), 0);
  nrt_inspect_config_t* config = SystemOnly(dir + "/file/below");
  ASSERT_EQ(nrt_inspect_begin_with_options(config), NRT_SUCCESS);
  Execute(1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrt_inspect_stop(), NRT_FAILURE);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said.rfind("nrt: nrt_inspect_stop: cannot make ", 0), 0u) << said;
  EXPECT_EQ(nrt_inspect_stop(), NRT_INVALID);  // the session is over all the same
  nrt_inspect_config_free(config);
}

// nrt_inspect_begin reads NEURON_RT_INSPECT_* at the call.
TEST_F(InspectTest, BeginReadsTheEnvironment) {
  const std::string dir = FreshDir("environment");
  setenv("NEURON_RT_INSPECT_ENABLE", "1", 1);
  setenv("NEURON_RT_INSPECT_OUTPUT_DIR", dir.c_str(), 1);
  setenv("NEURON_RT_INSPECT_DEVICE_PROFILE", "0", 1);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(nrt_inspect_begin(), NRT_SUCCESS);
  Execute(2);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(ReadTrace(SessionFile(dir, 1)).OfType("device_exec", "start").size(), 2u);

  // A malformed value names its variable.
  setenv("NEURON_RT_INSPECT_SYSTEM_PROFILE", "yes", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrt_inspect_begin(), NRT_INVALID);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "nrt: nrt_inspect_begin: NEURON_RT_INSPECT_SYSTEM_PROFILE=\"yes\" is not 0 or 1\n");
  // System profile off and device profile (the default, on) not capturable: no session.
  setenv("NEURON_RT_INSPECT_SYSTEM_PROFILE", "0", 1);
  unsetenv("NEURON_RT_INSPECT_DEVICE_PROFILE");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrt_inspect_begin(), NRT_FAILURE);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "nrt: nrt_inspect_begin: device_profile is not supported by the simulated runtime\n");
  // Not enabled: a session that captures nothing.
  unsetenv("NEURON_RT_INSPECT_SYSTEM_PROFILE");
  setenv("NEURON_RT_INSPECT_ENABLE", "0", 1);
  const std::string quiet = FreshDir("quiet");
  setenv("NEURON_RT_INSPECT_OUTPUT_DIR", quiet.c_str(), 1);
  ASSERT_EQ(nrt_inspect_begin(), NRT_SUCCESS);
  Execute(1);
  ASSERT_EQ(nrt_inspect_stop(), NRT_SUCCESS);
  EXPECT_FALSE(Exists(quiet));
  unsetenv("NEURON_RT_INSPECT_ENABLE");
  unsetenv("NEURON_RT_INSPECT_OUTPUT_DIR");
}

}  // namespace
