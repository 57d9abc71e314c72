// The system trace as a profiler reads it through nrt_sys_trace_*: which events an execution
// and a transfer produce, their fields, each event handed out once, clock sync points, and
// what a full ring buffer does.
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/testing/runtime_testing.h"

namespace {

using nrtsim::testing::DeviceFloats;
using nrtsim::testing::Fetch;
using nrtsim::testing::FetchedTrace;
using nrtsim::testing::Load;
using nrtsim::testing::Num;
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

TEST_F(SysTraceTest, EventTypesAreListed) {
  const char** types = nullptr;
  size_t count = 0;
  ASSERT_EQ(nrt_sys_trace_get_event_types(&types, &count), NRT_SUCCESS);
  std::set<std::string> names(types, types + count);
  nrt_sys_trace_free_event_types(types, count);
  EXPECT_EQ(names, (std::set<std::string>{"nc_exec_running", "nc_engine_op", "dma_transfer",
                                          "timestamp_sync_point"}));
  nrt_sys_trace_config_t* config = nullptr;
  ASSERT_EQ(nrt_sys_trace_config_allocate(&config), NRT_SUCCESS);
  EXPECT_EQ(nrt_sys_trace_config_set_capture_enabled_for_event_type(config, "bogus", false),
            NRT_INVALID);
  ASSERT_EQ(nrt_sys_trace_config_set_capture_enabled_for_event_type(config, "dma_transfer", false),
            NRT_SUCCESS);
  ASSERT_EQ(nrt_sys_trace_config_get_enabled_event_types(config, &types, &count), NRT_SUCCESS);
  EXPECT_EQ(count, 3u);
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
  EXPECT_EQ(Fetch().OfType("nc_exec_running").size(), 1u);
  nrt_sys_trace_fetch_options_t* options = nullptr;
  ASSERT_EQ(nrt_sys_trace_fetch_options_allocate(&options), NRT_SUCCESS);
  nrt_sys_trace_fetch_options_set_nc_idx(options, 5);
  EXPECT_EQ(nrt_sys_trace_fetch_events(&json, &size, options), NRT_INVALID);
  nrt_sys_trace_fetch_options_free(options);
}

TEST_F(SysTraceTest, ExecutionHasItsOpsAndDmaInside) {
  Start();
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  const FetchedTrace trace = Fetch();
  const auto execs = trace.OfType("nc_exec_running");
  ASSERT_EQ(execs.size(), 1u);
  const auto& exec = execs[0];
  EXPECT_EQ(Str(exec, "name"), "nc_exec_running");
  EXPECT_EQ(Str(exec, "group"), "nrt-nc-000");
  EXPECT_EQ(Str(exec, "model_name"), "scale_add");
  EXPECT_EQ(Str(exec, "lnc_idx"), "0");
  EXPECT_EQ(Str(exec, "process_id"), std::to_string(getpid()));
  EXPECT_EQ(Num(exec, "thread_id"), gettid());
  EXPECT_GT(Num(exec, "exec_id"), 0);
  // Launch overhead dominates a model this small: 360 us by default.
  EXPECT_GT(Num(exec, "duration"), 360000);
  const double start = Num(exec, "timestamp"), end = start + Num(exec, "duration");

  const auto ops = trace.OfType("nc_engine_op");
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(Str(ops[0], "name"), "mul_scalar");
  EXPECT_EQ(Str(ops[0], "engine"), "scalar");
  EXPECT_EQ(Str(ops[1], "name"), "add");
  EXPECT_EQ(Str(ops[1], "engine"), "vector");
  EXPECT_LE(Num(ops[0], "timestamp") + Num(ops[0], "duration"), Num(ops[1], "timestamp"));
  std::vector<google::protobuf::Struct> inside = ops;
  for (const auto& dma : trace.OfType("dma_transfer")) inside.push_back(dma);
  EXPECT_EQ(inside.size(), 5u);  // 2 ops, 2 input DMAs, 1 output DMA
  for (const auto& e : inside) {
    EXPECT_EQ(Num(e, "parent_id"), Num(exec, "id"));
    EXPECT_EQ(Num(e, "exec_id"), Num(exec, "exec_id"));
    EXPECT_GE(Num(e, "timestamp"), start);
    EXPECT_LE(Num(e, "timestamp") + Num(e, "duration"), end);
  }
  // Each event is handed out once.
  const FetchedTrace again = Fetch();
  EXPECT_TRUE(again.OfType("nc_exec_running").empty());
  EXPECT_TRUE(again.OfType("nc_engine_op").empty());
}

TEST_F(SysTraceTest, HostTransfersAreDmaEventsWithSizeAndTensor) {
  Start();
  std::vector<float> values(64, 3.0f);
  ASSERT_EQ(nrt_tensor_write(a_, values.data(), 0, 256), NRT_SUCCESS);
  ASSERT_EQ(nrt_tensor_read(a_, values.data(), 0, 128), NRT_SUCCESS);
  ASSERT_EQ(nrt_tensor_copy(a_, 0, b_, 0, 64), NRT_SUCCESS);
  const auto dmas = Fetch().OfType("dma_transfer");
  ASSERT_EQ(dmas.size(), 3u);
  EXPECT_EQ(Str(dmas[0], "name"), "dma_h2d");
  EXPECT_EQ(Num(dmas[0], "size"), 256);
  EXPECT_EQ(Str(dmas[0], "tensor_name"), "a");
  EXPECT_EQ(Num(dmas[0], "parent_id"), 0);
  EXPECT_EQ(Str(dmas[1], "name"), "dma_d2h");
  EXPECT_EQ(Num(dmas[1], "size"), 128);
  EXPECT_EQ(Str(dmas[2], "name"), "dma_d2d");
  EXPECT_EQ(Str(dmas[2], "tensor_name"), "b");
  // A host-initiated transfer pays the DMA job's set-up: 154 us by default.
  EXPECT_GE(Num(dmas[0], "duration"), 154000);
}

TEST_F(SysTraceTest, SyncPointsPairDeviceAndHostClocks) {
  Start();
  const auto syncs = Fetch().OfType("timestamp_sync_point");
  ASSERT_EQ(syncs.size(), 4u);  // at start and at the fetch, on each of the 2 cores
  std::set<std::string> groups;
  for (const auto& s : syncs) {
    groups.insert(Str(s, "group"));
    EXPECT_GT(Num(s, "host_monotonic_ns"), 0);
    EXPECT_GT(Num(s, "host_realtime_ns"), 1.6e18);  // after 2020
    // The device clock is not the host's but converts by a fixed offset.
    EXPECT_NE(Num(s, "timestamp"), Num(s, "host_monotonic_ns"));
  }
  EXPECT_EQ(groups, (std::set<std::string>{"nrt-nc-000", "nrt-nc-001"}));
  const double offset0 = Num(syncs[0], "timestamp") - Num(syncs[0], "host_monotonic_ns");
  const double offset1 = Num(syncs[1], "timestamp") - Num(syncs[1], "host_monotonic_ns");
  EXPECT_NEAR(offset0, offset1, 1000);  // doubles hold ns at this scale to ~256 ns
}

TEST_F(SysTraceTest, FullRingOverwritesOldestAndCounts) {
  Start(/*max_events=*/8);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  const FetchedTrace trace = Fetch();
  // 1 sync point at start + 10 x (1 exec + 2 ops + 3 DMA) + 1 sync point at fetch = 62 on core
  // 0, of which the ring keeps the newest 8.
  std::vector<google::protobuf::Struct> core0;
  for (const auto& e : trace.events) {
    if (Str(e, "group") == "nrt-nc-000") core0.push_back(e);
  }
  ASSERT_EQ(core0.size(), 8u);
  EXPECT_EQ(Str(core0.back(), "type"), "timestamp_sync_point");
  ASSERT_EQ(trace.cores.size(), 2u);
  EXPECT_EQ(Num(trace.cores[0], "events_overwritten"), 54);
  EXPECT_EQ(Num(trace.cores[0], "capacity"), 8);
  EXPECT_EQ(Num(trace.cores[1], "events_overwritten"), 0);
  for (size_t i = 1; i < core0.size(); ++i) EXPECT_GT(Num(core0[i], "id"), Num(core0[i - 1], "id"));
}

// A fetch takes the whole ring by swapping it for an empty one of the same size (so that
// executions never wait for the fetch's copying); the swapped-out ring, emptied, is the next
// fetch's. Fetch after fetch, over a ring that wrapped, each event comes out once, in order.
TEST_F(SysTraceTest, FetchesOneAfterAnotherHandEachEventOutOnce) {
  Start(/*max_events=*/8);
  std::set<double> ids;
  double last_id = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < round + 1; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
    const FetchedTrace trace = Fetch();
    size_t core0 = 0;
    for (const auto& e : trace.events) {
      if (Str(e, "group") != "nrt-nc-000") continue;
      ++core0;
      EXPECT_TRUE(ids.insert(Num(e, "id")).second) << "event " << Num(e, "id") << " twice";
      EXPECT_GT(Num(e, "id"), last_id);
      last_id = Num(e, "id");
    }
    // Each execution records 6 events, plus a sync point at each fetch (and at the start):
    // round 0 has 1 + 6 + 1 = 8; later rounds more than the ring's 8, so it keeps the newest.
    EXPECT_EQ(core0, 8u) << "round " << round;
  }
  EXPECT_EQ(Fetch().OfType("nc_exec_running").size(), 0u) << "nothing left after the last";
}

TEST_F(SysTraceTest, DisabledCoresAndTypesRecordNothing) {
  Start(0, /*disabled_core=*/0, /*disabled_type=*/"nc_engine_op");
  nrt_model_t* on1 = Load(kTwoOps, 1);
  nrt_tensor_t* a = DeviceFloats(1, std::vector<float>(64, 1.0f), "a1");
  nrt_tensor_t* out = DeviceFloats(1, std::vector<float>(64, 0.0f), "out1");
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  ASSERT_EQ(nrt_execute(on1, Set({{"a", a}, {"b", a}}), Set({{"out", out}})), NRT_SUCCESS);
  const FetchedTrace trace = Fetch();
  for (const auto& e : trace.events) EXPECT_EQ(Str(e, "group"), "nrt-nc-001");
  EXPECT_EQ(trace.OfType("nc_exec_running").size(), 1u);
  EXPECT_TRUE(trace.OfType("nc_engine_op").empty());
}

TEST_F(SysTraceTest, FetchLimitsPerCore) {
  Start();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  nrt_sys_trace_fetch_options_t* options = nullptr;
  ASSERT_EQ(nrt_sys_trace_fetch_options_allocate(&options), NRT_SUCCESS);
  nrt_sys_trace_fetch_options_set_nc_idx(options, 0);
  nrt_sys_trace_fetch_options_set_max_events_per_nc(options, 4);
  char* json = nullptr;
  size_t size = 0;
  ASSERT_EQ(nrt_sys_trace_fetch_events(&json, &size, options), NRT_SUCCESS);
  const std::string doc(json, size);
  nrt_sys_trace_buffer_free(json);
  nrt_sys_trace_fetch_options_free(options);
  size_t events = 0;
  for (size_t at = doc.find("\"group\":\"nrt-nc-000\",\"id\""); at != std::string::npos;
       at = doc.find("\"group\":\"nrt-nc-000\",\"id\"", at + 1)) {
    ++events;
  }
  EXPECT_EQ(events, 4u);
  EXPECT_EQ(doc.find("nrt-nc-001"), std::string::npos);
  // Oldest first: those 4 were the start sync point, the first execution and its two input
  // DMAs; the rest is still there.
  EXPECT_NE(doc.find("\"type\":\"nc_exec_running\""), std::string::npos);
  EXPECT_EQ(Fetch().OfType("nc_exec_running").size(), 2u);
}

}  // namespace
