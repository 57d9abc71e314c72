// The shim's reading of the runtime's system trace, on documents written by hand in the real
// runtime's shape. Where each fact comes from:
//   [H] the SDK's public header nrt/nrt_sys_trace.h (aws-neuron/aws-neuron-sdk,
//       src/libnrt/include/nrt/nrt_sys_trace.h): a JSON document per fetch, each event handed
//       out once, fetch options max_events_per_nc and nc_idx.
//   [S] public notes on the runtime's JSON serializer (libnrt 2.31): the envelope
//       {"events":[...],"data_version":2}; per event the keys event_type, phase, id, nc_idx,
//       nc_local_id, tracking_id, thread_id, worker_gid (-1 when unknown), data (always an
//       object), timestamp_ns, then nrta_seq_id only when the event has one; compact output.
//   [T] the same notes' event catalogue: snake_case type names; data per type and phase —
//       device_exec start {device_core_idx, exec_id, nc_timestamp_ns, model_id}, stop
//       {nc_timestamp_ns}; tensor_read/tensor_write {tensor_id, size}; dmem_buf_copyin/copyout
//       {mem_type, mem_handle, offset, size}; timestamp_sync {exec_id, nc_timestamp_ns,
//       cpu_timestamp_ns}; model_switch {device_core_idx, is_neuron_core_work, model_id};
//       where nc_timestamp_ns is present, the top-level timestamp_ns is that device timestamp;
//       otherwise timestamp_ns is the host's wall clock (SystemTime).
//   [A] an assumption of ours, to confirm on a Trainium host (docs/real_runtime.md):
//       which phase of a span carries its data (we read it from either), that executions on one
//       core stop in the order they started, that nc_local_id counts a core's events 1, 2, ...
#include "shim/backend/device_trace.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

// CLOCK_REALTIME - CLOCK_MONOTONIC in these documents' world.
constexpr int64_t kRealtimeOffset = 1700000000000000000;

// One event, keys in the real order [S].
std::string Ev(const std::string& type, const std::string& phase, int id, int nc, int local,
               int tid, const std::string& data, uint64_t ts, const std::string& extra = "") {
  return "{\"event_type\":\"" + type + "\",\"phase\":\"" + phase + "\",\"id\":" +
         std::to_string(id) + ",\"nc_idx\":" + std::to_string(nc) + ",\"nc_local_id\":" +
         std::to_string(local) + ",\"tracking_id\":" + std::to_string(900 + id) +
         ",\"thread_id\":" + std::to_string(tid) + ",\"worker_gid\":" + std::to_string(nc) +
         ",\"data\":" + data + ",\"timestamp_ns\":" + std::to_string(ts) + extra + "}";
}

std::string Doc(const std::vector<std::string>& events) {
  std::string out = "{\"events\":[";  // [S]
  for (size_t i = 0; i < events.size(); ++i) out += (i ? "," : "") + events[i];
  return out + "],\"data_version\":2}";  // [S]
}

uint64_t Host(uint64_t monotonic) { return monotonic + kRealtimeOffset; }

class DeviceTraceTest : public ::testing::Test {
 protected:
  DeviceTraceTest() { parser_.set_realtime_offset_for_testing(kRealtimeOffset); }
  bool Parse(const std::string& doc, uint64_t generation = 1) {
    return parser_.Parse(generation, doc, &out_, &error_);
  }
  std::string Name(const nrtprof::Event& e) { return strings_.Get(e.name_iid()); }

  StringTable strings_;
  DeviceTraceParser parser_{&strings_};
  DeviceTraceOutput out_;
  std::string error_;
};

// One program's work on NeuronCore 1 by thread 4242: a model load (a device-memory copy inside
// the nrt_load span), a tensor write (a copy inside the call), an execution, a read, and clock
// sync points — what the simulator also produces, in the same shape.
TEST_F(DeviceTraceTest, ARealDocumentBecomesTheHardwareLane) {
  const std::string doc = Doc({
      // [T] timestamp_sync: device and host clocks at one instant; timestamp_ns = device.
      Ev("timestamp_sync", "instant", 1, 1, 1, 4242,
         R"({"exec_id":0,"nc_timestamp_ns":1000000000000,"cpu_timestamp_ns":)" +
             std::to_string(Host(5000000)) + "}",
         1000000000000),
      Ev("nrt_load", "start", 2, 1, 2, 4242, "{}", Host(6000000)),
      // [T] dmem_buf_copyin data on its start; host clock.
      Ev("dmem_buf_copyin", "start", 3, 1, 3, 4242,
         R"({"mem_type":1,"mem_handle":77,"offset":0,"size":4096})", Host(6000100)),
      Ev("dmem_buf_copyin", "stop", 4, 1, 4, 4242, "{}", Host(6154100)),
      Ev("nrt_load", "stop", 5, 1, 5, 4242, R"({"model_id":3})", Host(6200000)),
      Ev("tensor_write", "start", 6, 1, 6, 4242, R"({"tensor_id":11,"size":2048})",
         Host(7000000)),
      Ev("dmem_buf_copyin", "start", 7, 1, 7, 4242,
         R"({"mem_type":1,"mem_handle":11,"offset":0,"size":2048})", Host(7000000)),
      Ev("dmem_buf_copyin", "stop", 8, 1, 8, 4242, "{}", Host(7154000)),
      Ev("tensor_write", "stop", 9, 1, 9, 4242, "{}", Host(7154000)),
      Ev("nrt_execute", "start", 10, 1, 10, 4242, R"({"model_id":3})", Host(8000000)),
      // [T] device_exec: start with its execution's ids, stop with its device timestamp.
      Ev("device_exec", "start", 11, 1, 11, 4242,
         R"({"device_core_idx":1,"exec_id":5,"nc_timestamp_ns":1000003000000,"model_id":3})",
         1000003000000),
      Ev("device_exec", "stop", 12, 1, 12, 4242, R"({"nc_timestamp_ns":1000003375000})",
         1000003375000),
      Ev("nrt_execute", "stop", 13, 1, 13, 4242, "{}", Host(8400000)),
      Ev("tensor_read", "start", 14, 1, 14, 4242, R"({"tensor_id":12,"size":512})",
         Host(9000000)),
      Ev("dmem_buf_copyout", "start", 15, 1, 15, 4242,
         R"({"mem_type":1,"mem_handle":12,"offset":0,"size":512})", Host(9000000)),
      Ev("dmem_buf_copyout", "stop", 16, 1, 16, 4242, "{}", Host(9154000)),
      Ev("tensor_read", "stop", 17, 1, 17, 4242, "{}", Host(9154000)),
      // [T] model_switch is not a lane of ours: skipped without a count.
      Ev("model_switch", "instant", 18, 1, 18, 4242,
         R"({"device_core_idx":1,"is_neuron_core_work":true,"model_id":3})", Host(9200000)),
  });
  ASSERT_TRUE(Parse(doc)) << error_;
  ASSERT_EQ(out_.events.size(), 4u);

  const nrtprof::Event& load = out_.events[0];
  EXPECT_EQ(load.kind(), nrtprof::EVENT_DEVICE_DMA);
  EXPECT_EQ(Name(load), "dma_model_load");
  EXPECT_TRUE(load.host_clock());
  EXPECT_EQ(load.start_ns(), 6000100u);  // host monotonic
  EXPECT_EQ(load.duration_ns(), 154000u);
  EXPECT_EQ(load.bytes(), 4096u);
  EXPECT_EQ(load.tid(), 4242u);
  EXPECT_EQ(load.nc_idx(), 1);

  // The write is one transfer: its copy inside is not counted again.
  const nrtprof::Event& write = out_.events[1];
  EXPECT_EQ(Name(write), "dma_h2d");
  EXPECT_EQ(write.start_ns(), 7000000u);
  EXPECT_EQ(write.duration_ns(), 154000u);
  EXPECT_EQ(write.bytes(), 2048u);

  const nrtprof::Event& exec = out_.events[2];
  EXPECT_EQ(exec.kind(), nrtprof::EVENT_DEVICE_EXEC);
  EXPECT_EQ(Name(exec), "nc_exec_running");
  EXPECT_FALSE(exec.host_clock());
  EXPECT_EQ(exec.start_ns(), 1000003000000u);  // device clock: the daemon maps it
  EXPECT_EQ(exec.duration_ns(), 375000u);
  EXPECT_EQ(exec.exec_id(), 5u);
  EXPECT_EQ(exec.tid(), 4242u);  // [T] thread_id: the calling thread
  EXPECT_EQ(exec.nc_idx(), 1);
  EXPECT_EQ(exec.device_id(), 11u);

  const nrtprof::Event& read = out_.events[3];
  EXPECT_EQ(Name(read), "dma_d2h");
  EXPECT_EQ(read.bytes(), 512u);

  ASSERT_EQ(out_.clock_syncs.size(), 1u);
  EXPECT_EQ(out_.clock_syncs[0].nc_idx(), 1);
  EXPECT_EQ(out_.clock_syncs[0].device_ns(), 1000000000000u);
  EXPECT_EQ(out_.clock_syncs[0].host_monotonic_ns(), 5000000u);
  EXPECT_EQ(out_.overwritten, 0u);
  EXPECT_EQ(out_.skipped, 0u);
}

// A span's halves in different fetches [H: each event once, oldest first].
TEST_F(DeviceTraceTest, SpansSplitAcrossFetchesAreJoined) {
  ASSERT_TRUE(Parse(Doc({Ev("device_exec", "start", 1, 0, 1, 7,
                            R"({"device_core_idx":0,"exec_id":9,"nc_timestamp_ns":500,"model_id":1})",
                            500)})))
      << error_;
  EXPECT_TRUE(out_.events.empty());
  ASSERT_TRUE(Parse(Doc({Ev("device_exec", "stop", 2, 0, 2, 7, R"({"nc_timestamp_ns":900})",
                            900)})))
      << error_;
  ASSERT_EQ(out_.events.size(), 1u);
  EXPECT_EQ(out_.events[0].start_ns(), 500u);
  EXPECT_EQ(out_.events[0].duration_ns(), 400u);
  EXPECT_EQ(out_.events[0].exec_id(), 9u);
  // A new capture forgets what the old one left open.
  ASSERT_TRUE(Parse(Doc({Ev("device_exec", "start", 3, 0, 1, 7,
                            R"({"device_core_idx":0,"exec_id":10,"nc_timestamp_ns":1000,"model_id":1})",
                            1000)}),
                    /*generation=*/2));
  ASSERT_TRUE(Parse(Doc({}), /*generation=*/3));
  ASSERT_TRUE(Parse(Doc({Ev("device_exec", "stop", 4, 0, 2, 7, R"({"nc_timestamp_ns":1400})",
                            1400)}),
                    /*generation=*/3));
  EXPECT_EQ(out_.events.size(), 1u) << "a stop without its start is no execution";
}

// [S] a newer runtime may add types, members and data keys; [S] nrta_seq_id may appear;
// [T] model_name may follow model_id where the runtime knows it.
TEST_F(DeviceTraceTest, UnknownTypesAndMembersAreCountedNotFatal) {
  const std::string doc = Doc({
      Ev("cc_exec", "start", 1, 0, 1, 7,
         R"({"gid":0,"op_id":3,"nc_timestamp_ns":10,"exec_id":1,"algorithm":"ring"})", 10),
      Ev("device_exec", "start", 2, 0, 2, 7,
         R"({"device_core_idx":0,"exec_id":4,"nc_timestamp_ns":100,"model_id":2,)"
         R"("model_name":"mlp\u00e9","future_key":[1,{"x":null}]})",
         100, R"(,"nrta_seq_id":77,"future_member":"x")"),
      Ev("device_exec", "stop", 3, 0, 3, 7, R"({"nc_timestamp_ns":200})", 200),
      Ev("some_new_type", "instant", 4, 0, 4, 7, "{}", 300),
      Ev("device_exec", "unknown", 5, 0, 5, 7, "{}", 300),
  });
  ASSERT_TRUE(Parse(doc)) << error_;
  ASSERT_EQ(out_.events.size(), 1u);
  EXPECT_EQ(out_.events[0].duration_ns(), 100u);
  EXPECT_EQ(strings_.Get(out_.events[0].model_name_iid()), "mlp\xC3\xA9");
  EXPECT_EQ(out_.skipped, 3u);  // cc_exec, some_new_type, phase "unknown"
  EXPECT_EQ(parser_.unknown_types_total(), 3u);
  EXPECT_EQ(parser_.unknown_members_total(), 2u);  // future_key, future_member
  EXPECT_EQ(parser_.malformed_total(), 0u);
}

// The profiler's own capture asks the runtime only for the types the parser draws
// (DeviceTraceParser::UsesType): the same work captured without the others draws the same lane.
// [A] a runtime numbers (nc_local_id) only the events it captures, as the simulator does.
TEST_F(DeviceTraceTest, TheTypesLeftOutOfTheCaptureDrawNothing) {
  struct Spec {
    std::string type, phase, data;
    uint64_t ts;
  };
  const std::vector<Spec> work = {
      {"timestamp_sync", "instant",
       R"({"exec_id":0,"nc_timestamp_ns":1000000000000,"cpu_timestamp_ns":)" +
           std::to_string(Host(5000000)) + "}",
       1000000000000},
      {"nrt_load", "start", "{}", Host(6000000)},
      {"dmem_buf_copyin", "start", R"({"mem_type":1,"mem_handle":77,"offset":0,"size":4096})",
       Host(6000100)},
      {"dmem_buf_copyin", "stop", "{}", Host(6154100)},
      {"nrt_load", "stop", R"({"model_id":3})", Host(6200000)},
      {"nrt_execute", "start", R"({"model_id":3})", Host(8000000)},
      {"model_switch", "instant",
       R"({"device_core_idx":1,"is_neuron_core_work":true,"model_id":3})", Host(8000100)},
      {"device_exec", "start",
       R"({"device_core_idx":1,"exec_id":5,"nc_timestamp_ns":1000003000000,"model_id":3,)"
       R"("model_name":"mlp"})",
       1000003000000},
      {"device_exec", "stop", R"({"nc_timestamp_ns":1000003375000})", 1000003375000},
      {"nrt_execute", "stop", "{}", Host(8400000)},
      {"tensor_read", "start", R"({"tensor_id":12,"size":512})", Host(9000000)},
      {"dmem_buf_copyout", "start", R"({"mem_type":1,"mem_handle":12,"offset":0,"size":512})",
       Host(9000000)},
      {"dmem_buf_copyout", "stop", "{}", Host(9154000)},
      {"tensor_read", "stop", "{}", Host(9154000)},
  };
  auto parse = [&](bool used_types_only, std::string* events, uint64_t* syncs) {
    // Ids stay unique (the runtime's, drawn as device_id); the core's count goes on from one
    // captured event to the next.
    std::vector<std::string> doc;
    int id = 0, local = 0;
    for (const Spec& e : work) {
      ++id;
      if (used_types_only && !DeviceTraceParser::UsesType(e.type.c_str())) continue;
      doc.push_back(Ev(e.type, e.phase, id, 1, ++local, 4242, e.data, e.ts));
    }
    StringTable strings;
    DeviceTraceParser parser(&strings);
    parser.set_realtime_offset_for_testing(kRealtimeOffset);
    DeviceTraceOutput out;
    std::string error;
    ASSERT_TRUE(parser.Parse(1, Doc(doc), &out, &error)) << error;
    EXPECT_EQ(out.overwritten, 0u);
    EXPECT_EQ(out.skipped, 0u);
    for (const nrtprof::Event& ev : out.events) {
      *events += strings.Get(ev.name_iid()) + "/" + strings.Get(ev.model_name_iid()) + ":" +
                 ev.SerializeAsString() + ";";
    }
    *syncs = out.clock_syncs.size();
  };
  std::string all, used;
  uint64_t all_syncs = 0, used_syncs = 0;
  parse(false, &all, &all_syncs);
  parse(true, &used, &used_syncs);
  EXPECT_NE(all.find("nc_exec_running/mlp:"), std::string::npos);
  EXPECT_NE(all.find("dma_model_load/:"), std::string::npos);
  EXPECT_NE(all.find("dma_d2h/:"), std::string::npos);
  EXPECT_EQ(used, all);
  EXPECT_EQ(used_syncs, 1u);
  EXPECT_EQ(all_syncs, 1u);
  // Left out: the call the shim records itself, and what is not drawn.
  EXPECT_FALSE(DeviceTraceParser::UsesType("nrt_execute"));
  EXPECT_FALSE(DeviceTraceParser::UsesType("model_switch"));
  EXPECT_FALSE(DeviceTraceParser::UsesType("cc_exec"));
  EXPECT_TRUE(DeviceTraceParser::UsesType("tensor_write"));
}

// A collective's barrier (the rank waiting for the others) and running, as the simulator
// writes them (sim/README.md, "Collectives"; the issue's public facts: the system trace's
// cc_exec_barrier and cc_running carry the rank's worker_gid and the request's nrta_seq_id).
// Two collectives on two queues of one core overlap: each stop closes its own request's span,
// and a span's halves may come in two fetches.
TEST_F(DeviceTraceTest, CollectivesBarrierAndRunningAreDeviceEventsOfTheirRequest) {
  EXPECT_TRUE(DeviceTraceParser::UsesType("cc_exec_barrier"));
  EXPECT_TRUE(DeviceTraceParser::UsesType("cc_running"));
  const std::string a = R"(,"nrta_seq_id":9007199254740993)";  // queue 32, number 1
  const std::string b = R"(,"nrta_seq_id":9288674231451649)";  // queue 33, number 1
  const std::string head = R"({"nc_timestamp_ns":)";
  const std::string rank = R"(,"op_id":1,"rank":3,"rank_n":4)";
  ASSERT_TRUE(Parse(Doc({
      Ev("timestamp_sync", "instant", 1, 3, 1, 7,
         R"({"exec_id":0,"nc_timestamp_ns":1000,"cpu_timestamp_ns":)" +
             std::to_string(Host(5000)) + "}",
         1000),
      Ev("cc_exec_barrier", "start", 2, 3, 2, 7, head + "2000" + rank + "}", 2000, a),
      Ev("cc_exec_barrier", "start", 3, 3, 3, 8, head + "2500" + rank + "}", 2500, b),
      Ev("cc_exec_barrier", "stop", 4, 3, 4, 8, head + "6000}", 6000, b),
      Ev("cc_exec_barrier", "stop", 5, 3, 5, 7, head + "9000}", 9000, a),
      Ev("cc_running", "start", 6, 3, 6, 7,
         head + "9000" + rank +
             R"(,"cc_op":"all_reduce","op":"add","dtype":"float32","size":4096,"algo":"ring"})",
         9000, a),
      Ev("cc_running", "stop", 7, 3, 7, 7, head + "9022}", 9022, a),
      Ev("cc_running", "start", 8, 3, 8, 8,
         head + "9100" + rank +
             R"(,"cc_op":"all_gather","op":"add","dtype":"bfloat16","size":8192,"algo":"ring"})",
         9100, b),
  }))) << error_;
  ASSERT_TRUE(Parse(Doc({Ev("cc_running", "stop", 9, 3, 9, 8, head + "9150}", 9150, b)})))
      << error_;
  EXPECT_EQ(out_.skipped, 0u);
  EXPECT_EQ(out_.overwritten, 0u);
  ASSERT_EQ(out_.events.size(), 4u);
  struct Want {
    std::string name;
    uint64_t seq, start, duration, bytes;
    std::string op;
    uint32_t tid;
  };
  const std::vector<Want> want = {
      {"cc_exec_barrier", 9288674231451649, 2500, 3500, 0, "", 8},
      {"cc_exec_barrier", 9007199254740993, 2000, 7000, 0, "", 7},
      {"cc_running", 9007199254740993, 9000, 22, 4096, "all_reduce", 7},
      {"cc_running", 9288674231451649, 9100, 50, 8192, "all_gather", 8},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    const nrtprof::Event& e = out_.events[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(e.kind(), nrtprof::EVENT_DEVICE_EXEC);
    EXPECT_EQ(Name(e), want[i].name);
    EXPECT_EQ(e.nrta_seq(), want[i].seq);
    EXPECT_FALSE(e.host_clock());  // the device's clock, mapped by the daemon
    EXPECT_EQ(e.start_ns(), want[i].start);
    EXPECT_EQ(e.duration_ns(), want[i].duration);
    EXPECT_EQ(e.bytes(), want[i].bytes);
    EXPECT_EQ(e.model_name_iid() == 0 ? "" : strings_.Get(e.model_name_iid()), want[i].op);
    EXPECT_EQ(e.worker_gid(), 3);
    EXPECT_EQ(e.nc_idx(), 3);
    EXPECT_EQ(e.tid(), want[i].tid);
  }
}

// [A] nc_local_id numbers a core's events one after another: a gap is events the ring
// overwrote. Where a capture's numbering starts is not known, so its first event sets it.
TEST_F(DeviceTraceTest, EncodedEventsAreTheBytesProtobufWritesForThem) {
  // The flusher takes each event as its bytes (DeviceTraceOutput::encode): they must be what
  // the Event's own serialization gives, for every kind of event the parser makes.
  const std::string a = R"(,"nrta_seq_id":9007199254740993)";
  std::string unranked = Ev("cc_running", "start", 9, 0, 9, 8,
                            R"({"nc_timestamp_ns":9100,"op_id":1,"rank":3,"rank_n":4,)"
                            R"("cc_op":"all_reduce","op":"add","dtype":"float32","size":4096,)"
                            R"("algo":"ring"})",
                            9100);
  unranked.replace(unranked.find(R"("worker_gid":0)"), 14, R"("worker_gid":-1)");
  const std::string doc = Doc({
      Ev("timestamp_sync", "instant", 1, 0, 1, 7,
         R"({"exec_id":0,"nc_timestamp_ns":1000,"cpu_timestamp_ns":)" +
             std::to_string(Host(5000)) + "}",
         1000),
      Ev("nrt_load", "start", 2, 0, 2, 7, "{}", Host(6000)),
      Ev("dmem_buf_copyin", "start", 3, 0, 3, 7,
         R"({"mem_type":1,"mem_handle":77,"offset":0,"size":4096})", Host(6100)),
      Ev("dmem_buf_copyin", "stop", 4, 0, 4, 7, "{}", Host(7100)),
      Ev("nrt_load", "stop", 5, 0, 5, 7, R"({"model_id":3,"model_name":"tiny"})", Host(8000)),
      Ev("tensor_read", "start", 6, 0, 6, 7, R"({"tensor_id":12,"size":512})", Host(9000), a),
      Ev("tensor_read", "stop", 7, 0, 7, 7, "{}", Host(9500), a),
      Ev("device_exec", "start", 8, 0, 8, 7,
         R"({"device_core_idx":0,"exec_id":5,"nc_timestamp_ns":2000,"model_id":3})", 2000, a),
      unranked,
      Ev("cc_running", "stop", 10, 0, 10, 8, R"({"nc_timestamp_ns":9200})", 9200),
      Ev("device_exec", "stop", 11, 0, 11, 7, R"({"nc_timestamp_ns":123456789012345})",
         123456789012345ull, a),
  });
  ASSERT_TRUE(Parse(doc)) << error_;
  DeviceTraceParser encoding(&strings_);
  encoding.set_realtime_offset_for_testing(kRealtimeOffset);
  DeviceTraceOutput encoded;
  encoded.encode = true;
  ASSERT_TRUE(encoding.Parse(1, doc, &encoded, &error_)) << error_;
  EXPECT_TRUE(encoded.events.empty());
  ASSERT_EQ(out_.events.size(), 4u) << "a copy, a read, a collective, an execution";
  ASSERT_EQ(encoded.encoded_events.size(), out_.events.size());
  std::string expected;
  for (size_t i = 0; i < out_.events.size(); ++i) {
    const nrtprof::Event& e = out_.events[i];
    nrtprof::EventBatch one;
    *one.add_events() = e;
    expected += one.SerializeAsString();  // field 4: tag, length, the Event
    EXPECT_EQ(encoded.encoded_events[i].end, expected.size());
    EXPECT_EQ(encoded.encoded_events[i].kind, e.kind());
    EXPECT_EQ(encoded.encoded_events[i].name_iid, e.name_iid());
    EXPECT_EQ(encoded.encoded_events[i].model_name_iid, e.model_name_iid());
  }
  EXPECT_EQ(encoded.encoded, expected);
  EXPECT_EQ(Name(out_.events[2]), "cc_running");
  EXPECT_EQ(out_.events[2].worker_gid(), -1);
  EXPECT_EQ(strings_.Get(out_.events[3].model_name_iid()), "tiny");
  EXPECT_TRUE(out_.events[0].host_clock());
}

TEST_F(DeviceTraceTest, GapsInACoresLocalIdsAreOverwrittenEvents) {
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 1, 0, 4, 7, "{}", 1),
                         Ev("model_switch", "instant", 2, 1, 1, 7, "{}", 1)})));
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 3, 0, 10, 7, "{}", 1),
                         Ev("model_switch", "instant", 4, 1, 2, 7, "{}", 1)})));
  EXPECT_EQ(parser_.overwritten_total(), 5u);
  // A new capture starts its own count.
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 5, 0, 1, 7, "{}", 1),
                         Ev("model_switch", "instant", 6, 0, 3, 7, "{}", 1)}),
                    2));
  EXPECT_EQ(parser_.overwritten_total(), 6u);
  EXPECT_EQ(out_.overwritten, 6u);
}

// How full the runtime's fullest ring got between two takes: the flusher waits longer only
// while it stays far from full.
TEST_F(DeviceTraceTest, TheMostEventsACoreNumberedAreTakenOverwrittenOnesIncluded) {
  EXPECT_EQ(parser_.TakeMostNumberedOnACore(), 0u);
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 1, 0, 1, 7, "{}", 1),
                         Ev("model_switch", "instant", 2, 0, 2, 7, "{}", 1),
                         Ev("model_switch", "instant", 3, 1, 1, 7, "{}", 1)})));
  // Events 3 to 6 of core 0 were overwritten: the ring held them all the same.
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 4, 0, 7, 7, "{}", 1),
                         Ev("model_switch", "instant", 5, 1, 2, 7, "{}", 1)})));
  EXPECT_EQ(parser_.TakeMostNumberedOnACore(), 7u);
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 6, 1, 3, 7, "{}", 1),
                         Ev("model_switch", "instant", 7, 1, 4, 7, "{}", 1)})));
  EXPECT_EQ(parser_.TakeMostNumberedOnACore(), 2u);
  EXPECT_EQ(parser_.TakeMostNumberedOnACore(), 0u);
  // Those of a capture that ended before the take count too.
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 8, 0, 8, 7, "{}", 1),
                         Ev("model_switch", "instant", 9, 0, 9, 7, "{}", 1),
                         Ev("model_switch", "instant", 10, 0, 10, 7, "{}", 1)})));
  ASSERT_TRUE(Parse(Doc({Ev("model_switch", "instant", 11, 1, 1, 7, "{}", 1)}), 2));
  EXPECT_EQ(parser_.TakeMostNumberedOnACore(), 3u);
}

TEST_F(DeviceTraceTest, MalformedDocumentsAreRefusedWholeAndCounted) {
  const std::string good = Ev("device_exec", "start", 1, 0, 1, 7,
                              R"({"device_core_idx":0,"exec_id":4,"nc_timestamp_ns":1,"model_id":2})",
                              1);
  const std::string stop =
      Ev("device_exec", "stop", 2, 0, 2, 7, R"({"nc_timestamp_ns":5})", 5);
  for (const std::string& bad : std::vector<std::string>{
           std::string("{\"events\":["),                                  // cut short
           std::string("[]"),                                             // not an object
           std::string(R"({"trace_events":[],"cores":[]})"),             // our old shape
           "{\"events\":[" + good + "," + stop + "]}",                   // no data_version
           "{\"events\":[" + good + "," + stop + "],\"data_version\":3}",  // another version
           "{\"events\":[" + good + "," + stop + "],\"data_version\":2} x",  // trailing text
           Doc({good, R"({"event_type":"device_exec","phase":"stop"})"}),  // members missing
           Doc({good, Ev("device_exec", "stop", 2, 0, 2, 7, R"({"nc_timestamp_ns":"5"})", 5)}),
           Doc({good, Ev("device_exec", "stop", -2, 0, 2, 7, "{}", 5)}),  // a negative id
           Doc({good, Ev("device_exec", "stop", 2, 0, 2, 7, "[]", 5)}),   // data not an object
       }) {
    DeviceTraceOutput out;
    std::string error;
    EXPECT_FALSE(parser_.Parse(1, bad, &out, &error)) << bad;
    EXPECT_FALSE(error.empty());
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_TRUE(out.events.empty()) << bad;
    EXPECT_GE(out.malformed, 1u) << bad;
  }
  EXPECT_GE(parser_.malformed_total(), 10u);
  // Nothing of a refused document stays behind: the start above was never opened.
  ASSERT_TRUE(Parse(Doc({stop})));
  EXPECT_TRUE(out_.events.empty());
}

// Values no runtime writes but a document can hold: kept from reaching the daemon, which would
// refuse the whole batch they came in.
TEST_F(DeviceTraceTest, ImplausibleValuesAreMalformedEventsNotRefusedBatches) {
  ASSERT_TRUE(Parse(Doc({
      Ev("device_exec", "start", 1, 5000, 1, 7,
         R"({"device_core_idx":0,"exec_id":1,"nc_timestamp_ns":1,"model_id":1})", 1),
      Ev("device_exec", "start", 2, 0, 1, 7,
         R"({"device_core_idx":0,"exec_id":2,"nc_timestamp_ns":1,"model_id":1})", 1),
      Ev("device_exec", "stop", 3, 0, 2, 7, R"({"nc_timestamp_ns":18446744073709551615})",
         18446744073709551615ull),
      Ev("tensor_write", "start", 4, 0, 3, 7, R"({"tensor_id":1,"size":4})",
         18446744073709551615ull),
      Ev("tensor_write", "stop", 5, 0, 4, 7, "{}", 18446744073709551615ull),
  })))
      << error_;
  EXPECT_EQ(out_.malformed, 2u);  // the core past 4095, the execution of 584 years
  ASSERT_EQ(out_.events.size(), 1u);
  EXPECT_EQ(out_.events[0].duration_ns(), 0u);
  EXPECT_EQ(out_.events[0].start_ns(), 18446744073709551615ull - kRealtimeOffset);
}

TEST_F(DeviceTraceTest, WhitespaceAndEscapesAreJson) {
  // Not what the runtime writes (it is compact [S]), but JSON all the same.
  const std::string doc =
      "{ \"events\" : [ {\"event_type\":\"device_\\u0065xec\", \"phase\":\"start\", \"id\":1,"
      "\"nc_idx\":0,\"nc_local_id\":1,\"tracking_id\":2,\"thread_id\":7,\"worker_gid\":-1,"
      "\"data\":{ \"exec_id\":1 ,\"nc_timestamp_ns\":3},\"timestamp_ns\":3 } ] ,\n"
      "\"data_version\" : 2 }\n";
  ASSERT_TRUE(Parse(doc)) << error_;
  EXPECT_EQ(parser_.unknown_types_total(), 0u);
}

// The runtime's wall-clock times become the shim's monotonic ones through the offset of the two
// clocks, read around each document. A flusher preempted between two readings (5 ms here, a busy
// host) must not move the document's every event by half of that: of the tries, the pair read
// closest together.
int64_t fake_readings[9];
int fake_next = 0;
int64_t FakeClock(clockid_t) { return fake_readings[fake_next++ % 9]; }

TEST(RealtimeOffsetTest, ThePairReadClosestTogetherIsTheOffset) {
  constexpr int64_t kOffset = 1700000000000000000;
  const int64_t readings[9] = {
      1000, kOffset + 1100, 5001100,            // preempted for 5 ms before the last reading
      5002000, kOffset + 5002050, 5002100,      // 100 ns apart
      5003000, kOffset + 5003900, 5004000,      // 1 us apart, the wall clock read late in it
  };
  std::copy(readings, readings + 9, fake_readings);
  fake_next = 0;
  EXPECT_EQ(RealtimeOffsetNs(FakeClock), kOffset);
  EXPECT_EQ(fake_next, 9);
  // The preempted pair first or last, the same.
  const int64_t reordered[9] = {
      5003000, kOffset + 5003900, 5004000,
      5002000, kOffset + 5002050, 5002100,
      1000, kOffset + 1100, 5001100,
  };
  std::copy(reordered, reordered + 9, fake_readings);
  fake_next = 0;
  EXPECT_EQ(RealtimeOffsetNs(FakeClock), kOffset);
}

}  // namespace
}  // namespace nrtprof::shim
