// The text of each system-trace event, exactly: the real runtime's compact form (its member
// order, no white space, the variant's data members on their phase only), which a profiler's
// reader may match in place (nrtprof's does: shim/backend/sys_trace_reader.cc), and integers
// at the edges of the writer's eight-digit chunks.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "sys_trace.h"

namespace nrtsim {
namespace {

std::string Text(const TraceEvent& e, int64_t worker_gid = 0) {
  std::string out = "[";
  AppendTraceEventJson(e, worker_gid, &out);
  return out.substr(1);
}

TEST(SysTraceTextTest, AnAsyncExecutionsStartAndStop) {
  static const std::string kName = "tiny";
  TraceEvent e;
  e.type = TraceEventType::kDeviceExec;
  e.phase = TracePhase::kStart;
  e.id = 123456789;
  e.nc_idx = 1;
  e.nc_local_id = 4242;
  e.tracking_id = (1ull << 50) | 77;
  e.thread_id = 81234;
  e.device_core_idx = 1;
  e.exec_id = 100000000;
  e.nc_timestamp_ns = 1765000000123456789ull;
  e.host_timestamp_ns = 5;  // not written: a device event's timestamp_ns is the device's
  e.model_id = 2;
  e.model_name = &kName;
  e.has_nrta_seq_id = true;
  e.nrta_seq_id = (1ull << 48) | 3;
  EXPECT_EQ(Text(e, 3),
            R"({"event_type":"device_exec","phase":"start","id":123456789,"nc_idx":1,)"
            R"("nc_local_id":4242,"tracking_id":1125899906842701,"thread_id":81234,)"
            R"("worker_gid":3,"data":{"device_core_idx":1,"exec_id":100000000,)"
            R"("nc_timestamp_ns":1765000000123456789,"model_id":2,"model_name":"tiny"},)"
            R"("timestamp_ns":1765000000123456789,"nrta_seq_id":281474976710659})");
  e.phase = TracePhase::kStop;
  e.has_nrta_seq_id = false;
  EXPECT_EQ(Text(e, -1),
            R"({"event_type":"device_exec","phase":"stop","id":123456789,"nc_idx":1,)"
            R"("nc_local_id":4242,"tracking_id":1125899906842701,"thread_id":81234,)"
            R"("worker_gid":-1,"data":{"nc_timestamp_ns":1765000000123456789},)"
            R"("timestamp_ns":1765000000123456789})");
}

TEST(SysTraceTextTest, EveryVariantsDataOnItsPhase) {
  static const std::string kOddName = "a\"b\\c\x01\x7f\xc3\xa9";
  TraceEvent e;
  e.host_timestamp_ns = 9;
  e.phase = TracePhase::kInstant;
  e.type = TraceEventType::kModelSwitch;
  e.is_neuron_core_work = false;
  e.model_name = &kOddName;
  const std::string head =
      R"("id":0,"nc_idx":0,"nc_local_id":0,"tracking_id":0,"thread_id":0,"worker_gid":0,)";
  EXPECT_EQ(Text(e), R"({"event_type":"model_switch","phase":"instant",)" + head +
                         R"("data":{"device_core_idx":0,"is_neuron_core_work":false,"model_id":0,)"
                         R"("model_name":"a\"b\\c\u0001\u007f\u00c3\u00a9"},"timestamp_ns":9})");
  e.model_name = nullptr;
  e.type = TraceEventType::kTimestampSync;
  e.exec_id = 10;
  e.nc_timestamp_ns = 99999999;
  e.cpu_timestamp_ns = 10000000000000000ull;
  EXPECT_EQ(Text(e), R"({"event_type":"timestamp_sync","phase":"instant",)" + head +
                         R"("data":{"exec_id":10,"nc_timestamp_ns":99999999,)"
                         R"("cpu_timestamp_ns":10000000000000000},"timestamp_ns":99999999})");
  e.type = TraceEventType::kCcRunning;
  e.phase = TracePhase::kStart;
  e.op_id = 9999999999999999ull;
  e.rank = 4294967295u;
  e.rank_n = 8;
  e.cc_op = "all_reduce";
  e.cc_reduce = "add";
  e.cc_dtype = "fp32";
  e.size = UINT64_MAX;
  EXPECT_EQ(Text(e), R"({"event_type":"cc_running","phase":"start",)" + head +
                         R"("data":{"nc_timestamp_ns":99999999,"op_id":9999999999999999,)"
                         R"("rank":4294967295,"rank_n":8,"cc_op":"all_reduce","op":"add",)"
                         R"("dtype":"fp32","size":18446744073709551615,"algo":"ring"},)"
                         R"("timestamp_ns":99999999})");
  e.type = TraceEventType::kDmemBufCopyin;
  e.mem_handle = 100000001;
  e.offset = 10000000000000001ull;
  e.size = 64;
  e.thread_id = INT64_MIN;
  EXPECT_EQ(Text(e),
            R"({"event_type":"dmem_buf_copyin","phase":"start","id":0,"nc_idx":0,)"
            R"("nc_local_id":0,"tracking_id":0,"thread_id":-9223372036854775808,"worker_gid":0,)"
            R"("data":{"mem_type":1,"mem_handle":100000001,"offset":10000000000000001,)"
            R"("size":64},"timestamp_ns":9})");
  e.phase = TracePhase::kStop;  // the copy's data is on its start only
  const std::string stop = Text(e);
  EXPECT_EQ(stop.substr(stop.size() - 27), R"("data":{},"timestamp_ns":9})");
}

}  // namespace
}  // namespace nrtsim
