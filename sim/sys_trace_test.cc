// The system trace as a profiler reads it through nrt_sys_trace_*: the real runtime's document
// shape, which events an execution, a load and a transfer produce and their fields, each event
// handed out once, clock sync points, filters, fetch options and what a full ring buffer does.
// Facts about the real runtime are from public sources: the SDK's nrt/nrt_sys_trace.h (the
// functions, fetch options, "once fetched, cannot be fetched again") and public notes on the
// runtime's JSON serializer (document shape, key order, data fields per phase).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_profile.h"
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

class SysTraceTest : public ::testing::Test {
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

  void Start(uint64_t max_events = 0, int disabled_core = -1, const char* disabled_type = nullptr) {
    nrt_sys_trace_config_t* config = nullptr;
    ASSERT_EQ(nrt_sys_trace_config_allocate(&config), NRT_SUCCESS);
    if (max_events != 0) nrt_sys_trace_config_set_max_events_per_nc(config, max_events);
    if (disabled_core >= 0) nrt_sys_trace_config_set_capture_enabled_for_nc(config, disabled_core, false);
    if (disabled_type != nullptr) {
      ASSERT_EQ(nrt_sys_trace_config_set_capture_enabled_for_event_type(config, disabled_type,
                                                                         false),
                NRT_SUCCESS);
    }
    ASSERT_EQ(nrt_sys_trace_start(config), NRT_SUCCESS);
    nrt_sys_trace_config_free(config);
  }

  nrt_model_t* model_;
  nrt_tensor_t *a_, *b_, *out_;
  nrt_tensor_set_t *in_, *outs_;
};

TEST_F(SysTraceTest, EventTypesAreListedAndFilterable) {
  const char** types = nullptr;
  size_t count = 0;
  ASSERT_EQ(nrt_sys_trace_get_event_types(&types, &count), NRT_SUCCESS);
  std::set<std::string> names(types, types + count);
  nrt_sys_trace_free_event_types(types, count);
  EXPECT_EQ(names, (std::set<std::string>{"nrt_load", "nrt_execute", "device_exec", "tensor_read",
                                          "tensor_write", "dmem_buf_copyin", "dmem_buf_copyout",
                                          "model_switch", "timestamp_sync",
                                          "nrta_execute_schedule", "cc_exec_barrier",
                                          "cc_running"}));
  nrt_sys_trace_config_t* config = nullptr;
  ASSERT_EQ(nrt_sys_trace_config_allocate(&config), NRT_SUCCESS);
  EXPECT_EQ(nrt_sys_trace_config_set_capture_enabled_for_event_type(config, "bogus", false),
            NRT_INVALID);
  ASSERT_EQ(nrt_sys_trace_config_set_capture_enabled_for_event_type(config, "tensor_write", false),
            NRT_SUCCESS);
  ASSERT_EQ(nrt_sys_trace_config_get_enabled_event_types(config, &types, &count), NRT_SUCCESS);
  names = std::set<std::string>(types, types + count);
  EXPECT_EQ(count, 11u);
  EXPECT_EQ(names.count("tensor_write"), 0u);
  nrt_sys_trace_free_event_types(types, count);
  nrt_sys_trace_config_free(config);
}

TEST_F(SysTraceTest, StartStopAndFetchLifecycle) {
  char* json = nullptr;
  size_t size = 0;
  EXPECT_EQ(nrt_sys_trace_fetch_events(&json, &size, nullptr), NRT_INVALID);  // never started
  EXPECT_EQ(nrt_sys_trace_stop(), NRT_INVALID);
  Start();
  EXPECT_EQ(nrt_sys_trace_start(nullptr), NRT_INVALID);  // already started
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  EXPECT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);  // not recorded
  // What was captured stays fetchable after the stop.
  EXPECT_EQ(Fetch().OfType("device_exec", "start").size(), 1u);
  nrt_sys_trace_fetch_options_t* options = nullptr;
  ASSERT_EQ(nrt_sys_trace_fetch_options_allocate(&options), NRT_SUCCESS);
  nrt_sys_trace_fetch_options_set_nc_idx(options, 5);
  EXPECT_EQ(nrt_sys_trace_fetch_events(&json, &size, options), NRT_INVALID);
  nrt_sys_trace_fetch_options_free(options);
}

// The document is the real runtime's, byte for byte in its structure: what a parser written
// for the real runtime sees.
TEST_F(SysTraceTest, DocumentHasTheRealShape) {
  Start();
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  std::vector<float> values(64, 3.0f);
  ASSERT_EQ(nrt_tensor_write(a_, values.data(), 0, 256), NRT_SUCCESS);
  ASSERT_EQ(nrt_tensor_read(a_, values.data(), 0, 128), NRT_SUCCESS);
  Load(kTwoOps, 1);
  const FetchedTrace trace = Fetch();
  EXPECT_EQ(RealShapeError(trace.json), "") << trace.json;
  // Every type this runtime records, in one document.
  for (const char* type : {"nrt_load", "nrt_execute", "device_exec", "tensor_read", "tensor_write",
                           "dmem_buf_copyin", "dmem_buf_copyout", "model_switch",
                           "timestamp_sync"}) {
    EXPECT_FALSE(trace.OfType(type).empty()) << type;
  }
  EXPECT_EQ(trace.json.find("nrta_seq_id"), std::string::npos);  // no asynchronous executions
  // The shape check itself refuses what is not the real shape.
  EXPECT_NE(RealShapeError(R"({"trace_events":[],"data_version":2})"), "");
  EXPECT_NE(RealShapeError(R"({"events":[{"phase":"start","event_type":"device_exec","id":1,)"
                           R"("nc_idx":0,"nc_local_id":1,"tracking_id":1,"thread_id":1,)"
                           R"("worker_gid":0,"data":{},"timestamp_ns":1}],"data_version":2})"),
            "");
}

TEST_F(SysTraceTest, ExecutionIsADeviceExecSpanOnTheDeviceClock) {
  Start();
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  const FetchedTrace trace = Fetch();
  const auto starts = trace.OfType("device_exec", "start");
  const auto stops = trace.OfType("device_exec", "stop");
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(stops.size(), 1u);
  const auto& start = starts[0];
  EXPECT_EQ(Num(start, "nc_idx"), 0);
  EXPECT_EQ(Num(start, "worker_gid"), 0);
  EXPECT_EQ(Num(start, "thread_id"), gettid());  // the thread that called nrt_execute
  const auto& data = start.fields().at("data").struct_value();
  EXPECT_EQ(Num(data, "device_core_idx"), 0);
  EXPECT_GT(Num(data, "exec_id"), 0);
  EXPECT_GT(Num(data, "model_id"), 0);
  // timestamp_ns is the device timestamp; the device clock reads ~1000 s at its first use.
  EXPECT_EQ(Num(start, "timestamp_ns"), Num(data, "nc_timestamp_ns"));
  EXPECT_LT(Num(start, "timestamp_ns"), 1e15);
  // The stop carries only its own device timestamp.
  const auto& stop_data = stops[0].fields().at("data").struct_value();
  EXPECT_EQ(stop_data.fields().size(), 1u);
  EXPECT_EQ(Num(stops[0], "timestamp_ns"), Num(stop_data, "nc_timestamp_ns"));
  // Launch (360 us) + 2 I/O DMAs in + 1 out + 2 ops: about 375 us of device time.
  EXPECT_NEAR(Num(stops[0], "timestamp_ns") - Num(start, "timestamp_ns"), 375000, 20000);
  // Inside the execution there is nothing else: engine ops are device-profile material.
  EXPECT_EQ(trace.json.find("engine"), std::string::npos);
  // The call itself: nrt_execute start (with its model) and stop, on the host clock.
  const auto calls = trace.OfType("nrt_execute");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(Str(calls[0], "phase"), "start");
  EXPECT_EQ(Num(calls[0].fields().at("data").struct_value(), "model_id"), Num(data, "model_id"));
  EXPECT_GT(Num(calls[0], "timestamp_ns"), 1.6e18);  // wall clock, after 2020
  // The first execution on a core is a model switch.
  EXPECT_EQ(trace.OfType("model_switch", "instant").size(), 1u);
  // Each event is handed out once.
  const FetchedTrace again = Fetch();
  EXPECT_TRUE(again.OfType("device_exec").empty());
  EXPECT_TRUE(again.OfType("nrt_execute").empty());
}

// The runtime keeps each thread's id rather than asking the kernel per call; a forked child's
// thread (a new id, the parent's memory) must still be named by its own.
TEST_F(SysTraceTest, AForkedChildsEventsCarryItsOwnThreadId) {
  Start();
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  const FetchedTrace parent = Fetch();
  ASSERT_EQ(parent.OfType("device_exec", "start").size(), 1u);
  EXPECT_EQ(Num(parent.OfType("device_exec", "start")[0], "thread_id"), gettid());
  const pid_t parent_tid = gettid();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: no gtest here; its exit status is the verdict.
    if (nrt_execute(model_, in_, outs_) != NRT_SUCCESS) _exit(2);
    char* buffer = nullptr;
    size_t size = 0;
    if (nrt_sys_trace_fetch_events(&buffer, &size, nullptr) != NRT_SUCCESS) _exit(3);
    const std::string json(buffer, size);
    nrt_sys_trace_buffer_free(buffer);
    const std::string mine = "\"thread_id\":" + std::to_string(gettid()) + ",";
    const std::string parents = "\"thread_id\":" + std::to_string(parent_tid) + ",";
    if (json.find("\"device_exec\"") == std::string::npos) _exit(4);
    if (json.find(parents) != std::string::npos) _exit(5);
    _exit(json.find(mine) != std::string::npos ? 0 : 6);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: execute failed, 3: fetch failed, 4: no device_exec, 5: the parent's thread id, "
         "6: not the child's own";
}

TEST_F(SysTraceTest, HostTransfersAreTensorCallsAroundDeviceMemoryCopies) {
  Start();
  std::vector<float> values(64, 3.0f);
  ASSERT_EQ(nrt_tensor_write(a_, values.data(), 0, 256), NRT_SUCCESS);
  ASSERT_EQ(nrt_tensor_read(a_, values.data(), 0, 128), NRT_SUCCESS);
  ASSERT_EQ(nrt_tensor_copy(a_, 0, b_, 0, 64), NRT_SUCCESS);  // device to device: not an event
  const FetchedTrace trace = Fetch();
  const auto writes = trace.OfType("tensor_write");
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(Str(writes[0], "phase"), "start");
  const auto& data = writes[0].fields().at("data").struct_value();
  EXPECT_EQ(Num(data, "size"), 256);
  EXPECT_GT(Num(data, "tensor_id"), 0);
  EXPECT_TRUE(writes[1].fields().at("data").struct_value().fields().empty());
  // A host-initiated transfer pays the DMA job's set-up: 154 us by default.
  EXPECT_GE(Num(writes[1], "timestamp_ns") - Num(writes[0], "timestamp_ns"), 150000);
  EXPECT_EQ(trace.OfType("dmem_buf_copyin").size(), 2u);
  const auto reads = trace.OfType("tensor_read", "start");
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(Num(reads[0].fields().at("data").struct_value(), "size"), 128);
  EXPECT_EQ(trace.OfType("dmem_buf_copyout").size(), 2u);
  // Recorded in call order: tensor_write start, its copy's start and stop, its stop.
  std::vector<std::string> order;
  for (const auto& e : trace.events) {
    if (Str(e, "event_type") != "timestamp_sync") order.push_back(Str(e, "event_type") + " " + Str(e, "phase"));
  }
  ASSERT_GE(order.size(), 4u);
  EXPECT_EQ(order[0], "tensor_write start");
  EXPECT_EQ(order[1], "dmem_buf_copyin start");
  EXPECT_EQ(order[2], "dmem_buf_copyin stop");
  EXPECT_EQ(order[3], "tensor_write stop");
}

TEST_F(SysTraceTest, LoadIsACallWithItsModelCopyInside) {
  Start();
  Load(kTwoOps, 1);
  const FetchedTrace trace = Fetch();
  const auto loads = trace.OfType("nrt_load");
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(Num(loads[0], "nc_idx"), 1);
  EXPECT_GT(Num(loads[1].fields().at("data").struct_value(), "model_id"), 0);  // on the stop
  const auto copies = trace.OfType("dmem_buf_copyin");
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_GE(Num(copies[0], "timestamp_ns"), Num(loads[0], "timestamp_ns"));
  EXPECT_LE(Num(copies[1], "timestamp_ns"), Num(loads[1], "timestamp_ns"));
  EXPECT_TRUE(trace.OfType("tensor_write").empty());
}

TEST_F(SysTraceTest, SyncPointsPairDeviceAndHostClocks) {
  Start();
  const auto syncs = Fetch().OfType("timestamp_sync", "instant");
  ASSERT_EQ(syncs.size(), 4u);  // at start and at the fetch, on each of the 2 cores
  std::set<double> cores;
  for (const auto& s : syncs) {
    cores.insert(Num(s, "nc_idx"));
    const auto& data = s.fields().at("data").struct_value();
    EXPECT_EQ(Num(s, "timestamp_ns"), Num(data, "nc_timestamp_ns"));
    EXPECT_GT(Num(data, "cpu_timestamp_ns"), 1.6e18);  // wall clock, after 2020
    EXPECT_EQ(data.fields().count("exec_id"), 1u);
  }
  EXPECT_EQ(cores, (std::set<double>{0, 1}));
}

TEST_F(SysTraceTest, FullRingOverwritesOldest) {
  Start(/*max_events=*/8);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  const FetchedTrace trace = Fetch();
  // 1 sync point at start + 1 model switch + 10 x (2 call + 2 device_exec) + 1 sync point at
  // fetch = 43 on core 0, of which the ring keeps the newest 8.
  std::vector<google::protobuf::Struct> core0;
  for (const auto& e : trace.events) {
    if (Num(e, "nc_idx") == 0) core0.push_back(e);
  }
  ASSERT_EQ(core0.size(), 8u);
  EXPECT_EQ(Str(core0.back(), "event_type"), "timestamp_sync");
  for (size_t i = 1; i < core0.size(); ++i) {
    EXPECT_GT(Num(core0[i], "id"), Num(core0[i - 1], "id"));
    EXPECT_EQ(Num(core0[i], "nc_local_id"), Num(core0[i - 1], "nc_local_id") + 1);
  }
  EXPECT_EQ(Num(core0.back(), "nc_local_id"), 43);
}

// A fetch takes the whole ring by swapping it for an empty one of the same size (so that
// executions never wait for the fetch's copying); the swapped-out ring, emptied, is the next
// fetch's. Fetch after fetch, over a ring that wrapped, each event comes out once, in order.
TEST_F(SysTraceTest, FetchesOneAfterAnotherHandEachEventOutOnce) {
  Start(/*max_events=*/8);
  std::set<double> ids;
  double last_id = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < round + 2; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
    const FetchedTrace trace = Fetch();
    size_t core0 = 0;
    for (const auto& e : trace.events) {
      if (Num(e, "nc_idx") != 0) continue;
      ++core0;
      EXPECT_TRUE(ids.insert(Num(e, "id")).second) << "event " << Num(e, "id") << " twice";
      EXPECT_GT(Num(e, "id"), last_id);
      last_id = Num(e, "id");
    }
    // Each execution records 4 events, plus a sync point at each fetch (and at the start):
    // more than the ring's 8, so it keeps the newest.
    EXPECT_EQ(core0, 8u) << "round " << round;
  }
  EXPECT_EQ(Fetch().OfType("device_exec").size(), 0u) << "nothing left after the last";
}

TEST_F(SysTraceTest, DisabledCoresAndTypesRecordNothing) {
  Start(0, /*disabled_core=*/0, /*disabled_type=*/"nrt_execute");
  nrt_model_t* on1 = Load(kTwoOps, 1);
  nrt_tensor_t* a = DeviceFloats(1, std::vector<float>(64, 1.0f), "a1");
  nrt_tensor_t* out = DeviceFloats(1, std::vector<float>(64, 0.0f), "out1");
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  ASSERT_EQ(nrt_execute(on1, Set({{"a", a}, {"b", a}}), Set({{"out", out}})), NRT_SUCCESS);
  const FetchedTrace trace = Fetch();
  for (const auto& e : trace.events) EXPECT_EQ(Num(e, "nc_idx"), 1);
  EXPECT_EQ(trace.OfType("device_exec", "start").size(), 1u);
  EXPECT_TRUE(trace.OfType("nrt_execute").empty());
}

TEST_F(SysTraceTest, FetchLimitsPerCore) {
  Start();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  nrt_sys_trace_fetch_options_t* options = nullptr;
  ASSERT_EQ(nrt_sys_trace_fetch_options_allocate(&options), NRT_SUCCESS);
  nrt_sys_trace_fetch_options_set_nc_idx(options, 0);
  nrt_sys_trace_fetch_options_set_max_events_per_nc(options, 4);
  const FetchedTrace limited = Fetch(options);
  nrt_sys_trace_fetch_options_free(options);
  EXPECT_EQ(RealShapeError(limited.json), "");
  ASSERT_EQ(limited.events.size(), 4u);
  for (const auto& e : limited.events) EXPECT_EQ(Num(e, "nc_idx"), 0);
  // Oldest first: the start sync point, the model switch, the first call's start and its
  // execution's start; the rest is still there.
  EXPECT_EQ(Str(limited.events[0], "event_type"), "timestamp_sync");
  EXPECT_EQ(limited.OfType("device_exec", "start").size(), 1u);
  EXPECT_EQ(Fetch().OfType("device_exec", "start").size(), 2u);
}

// What the system trace leaves out, an execution's inside, is in the device profile
// (nrt/nrt_profile.h), as with the real runtime; the same exec_id ties the two.
TEST_F(SysTraceTest, EngineOpsAndIoDmaAreInTheDeviceProfile) {
  Start();
  const std::string path = ::testing::TempDir() + "/scale_add.profile.json";
  ASSERT_EQ(nrt_profile_start(model_, path.c_str()), NRT_SUCCESS);
  EXPECT_EQ(nrt_profile_start(model_, path.c_str()), NRT_INVALID);  // already profiled
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  ASSERT_EQ(nrt_profile_stop(path.c_str()), NRT_SUCCESS);
  EXPECT_EQ(nrt_profile_stop(path.c_str()), NRT_INVALID);  // stopped already
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);  // not profiled

  FILE* f = fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  fclose(f);
  google::protobuf::Struct profile;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &profile).ok()) << text;
  EXPECT_EQ(Str(profile, "model"), "scale_add");
  const auto& executions = profile.fields().at("executions").list_value().values();
  ASSERT_EQ(executions.size(), 2u);
  const auto starts = Fetch().OfType("device_exec", "start");
  ASSERT_EQ(starts.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    const auto& x = executions[i].struct_value();
    EXPECT_EQ(Num(x, "exec_id"), Num(starts[i].fields().at("data").struct_value(), "exec_id"));
    EXPECT_EQ(Num(x, "start_ns"), Num(starts[i], "timestamp_ns"));
    const auto& ops = x.fields().at("ops").list_value().values();
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(Str(ops[0].struct_value(), "name"), "mul_scalar");
    EXPECT_EQ(Str(ops[0].struct_value(), "engine"), "scalar");
    EXPECT_EQ(Str(ops[1].struct_value(), "name"), "add");
    EXPECT_EQ(Str(ops[1].struct_value(), "engine"), "vector");
    for (const auto& op : ops) {
      EXPECT_GE(Num(op.struct_value(), "start_ns"), Num(x, "start_ns"));
      EXPECT_LE(Num(op.struct_value(), "start_ns") + Num(op.struct_value(), "duration_ns"),
                Num(x, "start_ns") + Num(x, "duration_ns"));
    }
    const auto& dma = x.fields().at("dma").list_value().values();
    ASSERT_EQ(dma.size(), 3u);  // two inputs in, one output out
    EXPECT_EQ(Str(dma[0].struct_value(), "name"), "dma_hbm_to_sbuf");
    EXPECT_EQ(Str(dma[2].struct_value(), "name"), "dma_sbuf_to_hbm");
    EXPECT_EQ(Num(dma[2].struct_value(), "bytes"), 256);
  }
}

}  // namespace
