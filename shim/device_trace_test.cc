#include "shim/device_trace.h"

#include <string>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

// A document as the runtime's nrt_sys_trace_fetch_events writes it (sim/README.md).
constexpr char kDocument[] = R"({"trace_events":[
{"name":"timestamp_sync_point","type":"timestamp_sync_point","group":"nrt-nc-000","id":1,"parent_id":0,"timestamp":1000000000500,"duration":0,"process_id":"4242","thread_id":4242,"lnc_idx":"0","nc_idx":0,"host_monotonic_ns":500,"host_realtime_ns":1700000000000000500},
{"name":"nc_exec_running","type":"nc_exec_running","group":"nrt-nc-001","id":7,"parent_id":0,"timestamp":1000000001000,"duration":375000,"process_id":"4242","thread_id":4243,"lnc_idx":"1","nc_idx":1,"model_name":"rmsnorm_compiled","model_id":3,"exec_id":11},
{"name":"mul","type":"nc_engine_op","group":"nrt-nc-001","id":8,"parent_id":7,"timestamp":1000000362000,"duration":1500,"process_id":"4242","thread_id":4243,"lnc_idx":"1","nc_idx":1,"model_name":"rmsnorm_compiled","model_id":3,"exec_id":11,"engine":"vector"},
{"name":"dma_hbm_to_sbuf","type":"dma_transfer","group":"nrt-nc-001","id":9,"parent_id":7,"timestamp":1000000360000,"duration":2000,"process_id":"4242","thread_id":4243,"lnc_idx":"1","nc_idx":1,"size":4096,"tensor_name":"x","exec_id":11},
{"name":"dma_h2d","type":"dma_transfer","group":"nrt-nc-000","id":10,"parent_id":0,"timestamp":18446744073709551000,"duration":154000,"process_id":"4242","thread_id":4242,"lnc_idx":"0","nc_idx":0,"size":2,"tensor_name":"caf\u00c3\u00a9 \u00ff"},
{"name":"future","type":"some_new_type","group":"nrt-nc-000","id":12,"parent_id":0,"timestamp":5,"duration":1,"process_id":"4242","thread_id":1,"lnc_idx":"0","nc_idx":0}
],
"cores":[{"nc_idx":0,"group":"nrt-nc-000","capacity":65536,"events_pending":0,"events_overwritten":0},
         {"nc_idx":1,"group":"nrt-nc-001","capacity":65536,"events_pending":0,"events_overwritten":5}],
"clock":{"device_minus_host_monotonic_ns":1000000000000}})";

TEST(DeviceTraceTest, EventsOfEachTypeBecomeHardwareLaneEvents) {
  StringTable strings;
  DeviceTraceParser parser(&strings);
  DeviceTraceOutput out;
  std::string error;
  ASSERT_TRUE(parser.Parse(1, kDocument, &out, &error)) << error;
  ASSERT_EQ(out.events.size(), 4u);
  EXPECT_EQ(out.skipped, 1u);

  const nrtprof::Event& exec = out.events[0];
  EXPECT_EQ(exec.kind(), nrtprof::EVENT_DEVICE_EXEC);
  EXPECT_EQ(strings.Get(exec.name_iid()), "nc_exec_running");
  EXPECT_EQ(exec.start_ns(), 1000000001000u);
  EXPECT_EQ(exec.duration_ns(), 375000u);
  EXPECT_EQ(exec.tid(), 4243u);
  EXPECT_EQ(exec.nc_idx(), 1);
  EXPECT_EQ(exec.device_id(), 7u);
  EXPECT_EQ(exec.device_parent_id(), 0u);
  EXPECT_EQ(exec.exec_id(), 11u);
  EXPECT_EQ(strings.Get(exec.model_name_iid()), "rmsnorm_compiled");
  EXPECT_EQ(exec.model_handle(), 0u);
  EXPECT_EQ(exec.correlation_id(), 0u) << "correlation is the daemon's job";

  const nrtprof::Event& op = out.events[1];
  EXPECT_EQ(op.kind(), nrtprof::EVENT_DEVICE_OP);
  EXPECT_EQ(strings.Get(op.name_iid()), "mul");
  EXPECT_EQ(strings.Get(op.engine_iid()), "vector");
  EXPECT_EQ(op.device_parent_id(), 7u);
  EXPECT_EQ(op.exec_id(), 11u);

  const nrtprof::Event& io = out.events[2];
  EXPECT_EQ(io.kind(), nrtprof::EVENT_DEVICE_DMA);
  EXPECT_EQ(io.bytes(), 4096u);
  EXPECT_EQ(strings.Get(io.tensor_name_iid()), "x");
  EXPECT_EQ(io.exec_id(), 11u);
  EXPECT_EQ(io.model_name_iid(), 0u);

  const nrtprof::Event& h2d = out.events[3];
  EXPECT_EQ(strings.Get(h2d.name_iid()), "dma_h2d");
  EXPECT_EQ(h2d.start_ns(), 18446744073709551000ull) << "device clocks keep all 64 bits";
  // Byte escapes: "café" then a lone byte 0xff, which is not UTF-8: taken as code points.
  EXPECT_EQ(strings.Get(h2d.tensor_name_iid()), "caf\xC3\x83\xC2\xA9 \xC3\xBF");

  ASSERT_EQ(out.clock_syncs.size(), 1u);
  EXPECT_EQ(out.clock_syncs[0].nc_idx(), 0);
  EXPECT_EQ(out.clock_syncs[0].device_ns(), 1000000000500u);
  EXPECT_EQ(out.clock_syncs[0].host_monotonic_ns(), 500u);
  EXPECT_EQ(out.overwritten, 5u);
}

std::string Cores(int overwritten0, int overwritten1) {
  return R"({"trace_events":[],"cores":[{"nc_idx":0,"events_overwritten":)" +
         std::to_string(overwritten0) + R"(},{"nc_idx":1,"events_overwritten":)" +
         std::to_string(overwritten1) + "}]}";
}

TEST(DeviceTraceTest, OverwrittenCountsAreCumulativePerCaptureAndAddUpAcrossCaptures) {
  StringTable strings;
  DeviceTraceParser parser(&strings);
  std::string error;
  DeviceTraceOutput out;
  ASSERT_TRUE(parser.Parse(1, Cores(3, 0), &out, &error));
  ASSERT_TRUE(parser.Parse(1, Cores(3, 2), &out, &error));
  ASSERT_TRUE(parser.Parse(1, Cores(10, 2), &out, &error));
  EXPECT_EQ(parser.overwritten_total(), 12u);
  // A new capture counts from zero again.
  ASSERT_TRUE(parser.Parse(2, Cores(1, 0), &out, &error));
  EXPECT_EQ(parser.overwritten_total(), 13u);
  EXPECT_EQ(out.overwritten, 13u);
}

TEST(DeviceTraceTest, ADocumentThatIsNotATraceIsRejectedWhole) {
  StringTable strings;
  DeviceTraceParser parser(&strings);
  DeviceTraceOutput out;
  std::string error;
  EXPECT_FALSE(parser.Parse(1, "{\"trace_events\": [", &out, &error));
  EXPECT_FALSE(parser.Parse(1, "[]", &out, &error));
  EXPECT_FALSE(parser.Parse(1, "{\"cores\": []}", &out, &error));
  EXPECT_TRUE(out.events.empty());
  EXPECT_EQ(parser.overwritten_total(), 0u);
}

}  // namespace
}  // namespace nrtprof::shim
