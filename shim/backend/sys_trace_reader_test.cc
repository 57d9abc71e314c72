// The system-trace reader's two paths: events written in the runtime's compact form are read
// by a fast path, anything else by the general one. What a user sees (the hardware lane, the
// malformed count) must not depend on which path read an event: these tests read documents
// in the runtime's shape, and every truncation and many one-byte corruptions of them, both
// ways, and require the same events, counts and errors.
#include "shim/backend/sys_trace_reader.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shim/backend/device_trace.h"

namespace nrtprof::shim {
namespace {

// Every field of an event, in one line.
std::string Describe(const SysTraceEvent& e) {
  return absl::StrCat(
      SysTraceTypeName(e.type), " phase=", static_cast<int>(e.phase), " id=", e.id,
      " nc=", e.nc_idx, " local=", e.nc_local_id, " tracking=", e.tracking_id,
      " thread=", e.thread_id, " worker=", e.worker_gid, " ts=", e.timestamp_ns,
      " seq=", e.has_nrta_seq_id, "/", e.nrta_seq_id, " exec=", e.has_exec_id, "/", e.exec_id,
      " model=", e.has_model_id, "/", e.model_id, " nc_ts=", e.has_nc_timestamp_ns, "/",
      e.nc_timestamp_ns, " cpu_ts=", e.has_cpu_timestamp_ns, "/", e.cpu_timestamp_ns,
      " size=", e.has_size, "/", e.size, " tensor=", e.tensor_id, " core=", e.device_core_idx,
      " name='", std::string(e.model_name), "'",
      e.cc_op.empty() ? "" : absl::StrCat(" cc_op='", std::string(e.cc_op), "'"));
}

struct Reading {
  bool ok = false;
  std::string error;
  std::vector<std::string> events;
  SysTraceReadStats stats;

  std::string Describe() const {
    std::string out = absl::StrCat(ok ? "ok" : "failed: " + error, " events=", stats.events,
                                   " unknown_types=", stats.unknown_types,
                                   " unknown_members=", stats.unknown_members, "\n");
    for (const std::string& e : events) absl::StrAppend(&out, e, "\n");
    return out;
  }
};

template <typename ReadFn>
Reading ReadWith(ReadFn read, std::string_view doc) {
  Reading r;
  r.ok = read(
      doc, [&](const SysTraceEvent& e) { r.events.push_back(shim::Describe(e)); }, &r.stats,
      &r.error);
  return r;
}

Reading Fast(std::string_view doc) { return ReadWith(ReadSysTrace, doc); }
Reading General(std::string_view doc) { return ReadWith(ReadSysTraceGeneralOnlyForTesting, doc); }

// One event as the runtime writes it: compact, its members in the runtime's order.
std::string Ev(const std::string& type, const std::string& phase, uint64_t id,
               const std::string& nc, const std::string& data, const std::string& ts,
               const std::string& worker = "0") {
  return absl::StrCat("{\"event_type\":\"", type, "\",\"phase\":\"", phase, "\",\"id\":", id,
                      ",\"nc_idx\":", nc, ",\"nc_local_id\":", id, ",\"tracking_id\":",
                      1000 + id, ",\"thread_id\":20417,\"worker_gid\":", worker,
                      ",\"data\":", data, ",\"timestamp_ns\":", ts, "}");
}

std::string Doc(const std::vector<std::string>& events) {
  std::string out = "{\"events\":[";
  for (size_t i = 0; i < events.size(); ++i) absl::StrAppend(&out, i ? "," : "", events[i]);
  return out + "],\"data_version\":2}";
}

// What the simulator and the real runtime write for a load, an execution, a write, a read, a
// model switch and clock syncs, with the edges of each value's range.
std::string RealShapeDocument() {
  const std::string model = "{\"model_id\":3,\"model_name\":\"aten_mul\"}";
  return Doc({
      Ev("timestamp_sync", "instant", 1, "0",
         "{\"exec_id\":0,\"nc_timestamp_ns\":1000000000000,\"cpu_timestamp_ns\":"
         "1796310196000000000}",
         "1000000000000"),
      Ev("nrt_load", "start", 2, "0", "{}", "1796310196000100000"),
      Ev("dmem_buf_copyin", "start", 3, "0",
         "{\"mem_type\":1,\"mem_handle\":94526644522400,\"offset\":0,\"size\":4096}",
         "1796310196000200000"),
      Ev("dmem_buf_copyin", "stop", 4, "0", "{}", "1796310196000300000"),
      Ev("nrt_load", "stop", 5, "0", model, "1796310196000400000"),
      Ev("model_switch", "instant", 6, "0",
         "{\"device_core_idx\":0,\"is_neuron_core_work\":true,\"model_id\":3,"
         "\"model_name\":\"aten_mul\"}",
         "1796310196000450000"),
      Ev("nrt_execute", "start", 7, "0", model, "1796310196000500000"),
      Ev("device_exec", "start", 8, "0",
         "{\"device_core_idx\":0,\"exec_id\":1,\"nc_timestamp_ns\":1000000501000,"
         "\"model_id\":3,\"model_name\":\"aten_mul\"}",
         "1000000501000"),
      Ev("device_exec", "stop", 9, "0", "{\"nc_timestamp_ns\":1000000876000}", "1000000876000"),
      Ev("nrt_execute", "stop", 10, "0", "{}", "1796310196000880000"),
      Ev("tensor_write", "start", 11, "1", "{\"tensor_id\":94526644522400,\"size\":4}",
         "1796310196001000000", "1"),
      Ev("tensor_write", "stop", 12, "1", "{}", "1796310196001154000", "1"),
      Ev("tensor_read", "start", 13, "1", "{\"tensor_id\":94526644522400,\"size\":4}",
         "1796310196002000000", "-1"),
      Ev("dmem_buf_copyout", "start", 14, "1",
         "{\"mem_type\":1,\"mem_handle\":94526644522400,\"offset\":0,\"size\":4}",
         "1796310196002000000", "-9223372036854775808"),
      Ev("dmem_buf_copyout", "stop", 15, "1", "{}", "1796310196002100000"),
      Ev("tensor_read", "stop", 16, "1", "{}", "18446744073709551615"),
      Ev("model_switch", "instant", 17, "4294967295",
         "{\"device_core_idx\":0,\"is_neuron_core_work\":false,\"model_id\":9999999999999999999,"
         "\"model_name\":\"caf\\u00e9 \\\"v2\\\"\"}",
         "9999999999999999999"),
      Ev("future_type", "begin", 18, "0", "{\"new_key\":[1,{\"x\":null}]}", "5"),
  });
}

TEST(SysTraceReaderTest, TheRuntimesCompactEventsReadAsTheGeneralReaderReadsThem) {
  const std::string doc = RealShapeDocument();
  const Reading fast = Fast(doc);
  ASSERT_TRUE(fast.ok) << fast.error;
  EXPECT_EQ(fast.Describe(), General(doc).Describe());
  ASSERT_EQ(fast.events.size(), 18u);
  EXPECT_EQ(fast.stats.unknown_types, 1u);  // future_type/begin
  // What the hardware lane is made of, as the general reader always gave it.
  const std::vector<std::pair<size_t, std::string>> expected = {
      {7, "device_exec phase=1 id=8 nc=0 local=8 tracking=1008 thread=20417 worker=0 "
          "ts=1000000501000 seq=0/0 exec=1/1 model=1/3 nc_ts=1/1000000501000 cpu_ts=0/0 "
          "size=0/0 tensor=0 core=0 name='aten_mul'"},
      {0, "timestamp_sync phase=3 id=1 nc=0 local=1 tracking=1001 thread=20417 worker=0 "
          "ts=1000000000000 seq=0/0 exec=1/0 model=0/0 nc_ts=1/1000000000000 "
          "cpu_ts=1/1796310196000000000 size=0/0 tensor=0 core=0 name=''"},
      {13, "dmem_buf_copyout phase=1 id=14 nc=1 local=14 tracking=1014 thread=20417 "
           "worker=-9223372036854775808 ts=1796310196002000000 seq=0/0 exec=0/0 model=0/0 "
           "nc_ts=0/0 cpu_ts=0/0 size=1/4 tensor=0 core=0 name=''"},
      {16, "model_switch phase=3 id=17 nc=4294967295 local=17 tracking=1017 thread=20417 "
           "worker=0 ts=9999999999999999999 seq=0/0 exec=0/0 model=1/9999999999999999999 "
           "nc_ts=0/0 cpu_ts=0/0 size=0/0 tensor=0 core=0 name='caf\xc3\xa9 \"v2\"'"},
  };
  for (const auto& [index, line] : expected) EXPECT_EQ(fast.events[index], line);
}

TEST(SysTraceReaderTest, OtherSpacingAndOrderReadTheSame) {
  std::string spaced = RealShapeDocument();
  for (size_t at = 0; (at = spaced.find(",\"", at)) != std::string::npos; at += 3) {
    spaced.replace(at, 2, ", \"");
  }
  const Reading fast = Fast(spaced);
  ASSERT_TRUE(fast.ok) << fast.error;
  EXPECT_EQ(fast.Describe(), General(spaced).Describe());
  const Reading compact = Fast(RealShapeDocument());
  EXPECT_EQ(fast.events, compact.events);
}

// Every prefix of the document, and every byte of it replaced by each of a few that matter to
// JSON: both paths accept or refuse alike, with the same events, counts and reason.
TEST(SysTraceReaderTest, EveryTruncationAndCorruptionIsJudgedAlike) {
  const std::string doc = RealShapeDocument();
  int refused = 0;
  for (size_t n = 0; n < doc.size(); ++n) {
    const std::string_view prefix(doc.data(), n);
    const Reading fast = Fast(prefix);
    ASSERT_EQ(fast.Describe(), General(prefix).Describe()) << "prefix of " << n << " bytes";
    refused += !fast.ok;
  }
  EXPECT_EQ(refused, static_cast<int>(doc.size()));  // no prefix is a document
  for (size_t at = 0; at < doc.size(); ++at) {
    for (char c : {'"', '\\', ' ', 'x', '0', '9', '-', '.', 'e', '}', ',', '\x01', '\xc3'}) {
      if (doc[at] == c) continue;
      std::string bad = doc;
      bad[at] = c;
      ASSERT_EQ(Fast(bad).Describe(), General(bad).Describe())
          << "byte " << at << " ('" << doc[at] << "') made '" << c << "'";
    }
  }
}

// The events of asynchronous requests carry an eleventh member, nrta_seq_id, after
// timestamp_ns: read by the fast path too, as the general one reads them, whole or damaged.
std::string AsyncDocument() {
  const auto seq = [](std::string event, const std::string& id) {
    event.insert(event.size() - 1, ",\"nrta_seq_id\":" + id);
    return event;
  };
  return Doc({
      seq(Ev("device_exec", "start", 1, "0",
             "{\"device_core_idx\":0,\"exec_id\":7,\"nc_timestamp_ns\":1000000501000,"
             "\"model_id\":3,\"model_name\":\"tiny\"}",
             "1000000501000"),
          "281474976710657"),
      seq(Ev("device_exec", "stop", 2, "0", "{\"nc_timestamp_ns\":1000000876000}",
             "1000000876000"),
          "281474976710657"),
      seq(Ev("tensor_write", "start", 3, "0", "{\"tensor_id\":9,\"size\":64}", "5"),
          "18446744073709551615"),
      Ev("device_exec", "stop", 4, "0", "{}", "6"),
  });
}

TEST(SysTraceReaderTest, AsyncEventsWithTheirSequenceIdReadAlike) {
  const std::string doc = AsyncDocument();
  const Reading fast = Fast(doc);
  ASSERT_TRUE(fast.ok) << fast.error;
  EXPECT_EQ(fast.Describe(), General(doc).Describe());
  ASSERT_EQ(fast.events.size(), 4u);
  EXPECT_NE(fast.events[0].find(" seq=1/281474976710657 "), std::string::npos) << fast.events[0];
  EXPECT_NE(fast.events[2].find(" seq=1/18446744073709551615 "), std::string::npos);
  EXPECT_NE(fast.events[3].find(" seq=0/0 "), std::string::npos);
  for (size_t n = 0; n < doc.size(); ++n) {
    const std::string_view prefix(doc.data(), n);
    ASSERT_EQ(Fast(prefix).Describe(), General(prefix).Describe()) << "prefix of " << n;
  }
  for (size_t at = 0; at < doc.size(); ++at) {
    for (char c : {'"', '\\', ' ', 'x', '0', '9', '-', '.', 'e', '}', ',', '\x01'}) {
      if (doc[at] == c) continue;
      std::string bad = doc;
      bad[at] = c;
      ASSERT_EQ(Fast(bad).Describe(), General(bad).Describe())
          << "byte " << at << " ('" << doc[at] << "') made '" << c << "'";
    }
  }
}

// A collective's two spans on its rank's core, as the simulator writes them (sim/sys_trace.cc):
// the barrier, then the running with the collective's op, reduction, type, size and algorithm
// (strings among the data); worker_gid is the rank's global core.
std::string CollectivesDocument() {
  const auto seq = [](std::string event) {
    event.insert(event.size() - 1, ",\"nrta_seq_id\":9007199254740993");
    return event;
  };
  return Doc({
      seq(Ev("cc_exec_barrier", "start", 1, "0",
             "{\"nc_timestamp_ns\":1000,\"op_id\":1,\"rank\":2,\"rank_n\":4}", "1000", "2")),
      seq(Ev("cc_exec_barrier", "stop", 2, "0", "{\"nc_timestamp_ns\":9000}", "9000", "2")),
      seq(Ev("cc_running", "start", 3, "0",
             "{\"nc_timestamp_ns\":9000,\"op_id\":1,\"rank\":2,\"rank_n\":4,"
             "\"cc_op\":\"all_reduce\",\"op\":\"add\",\"dtype\":\"float32\",\"size\":4096,"
             "\"algo\":\"ring\"}",
             "9000", "2")),
      seq(Ev("cc_running", "stop", 4, "0", "{\"nc_timestamp_ns\":9022}", "9022", "2")),
  });
}

TEST(SysTraceReaderTest, CollectivesEventsReadWithTheirOpSizeAndRank) {
  const std::string doc = CollectivesDocument();
  const Reading fast = Fast(doc);
  ASSERT_TRUE(fast.ok) << fast.error;
  EXPECT_EQ(fast.Describe(), General(doc).Describe());
  EXPECT_EQ(fast.stats.unknown_types, 0u);
  EXPECT_EQ(fast.stats.unknown_members, 0u);
  ASSERT_EQ(fast.events.size(), 4u);
  EXPECT_EQ(fast.events[0].rfind("cc_exec_barrier phase=1 ", 0), 0u) << fast.events[0];
  EXPECT_NE(fast.events[0].find(" worker=2 "), std::string::npos) << fast.events[0];
  EXPECT_NE(fast.events[2].find(" seq=1/9007199254740993 "), std::string::npos);
  EXPECT_NE(fast.events[2].find(" size=1/4096 "), std::string::npos) << fast.events[2];
  EXPECT_NE(fast.events[2].find(" cc_op='all_reduce'"), std::string::npos) << fast.events[2];
  for (size_t n = 0; n < doc.size(); ++n) {
    const std::string_view prefix(doc.data(), n);
    ASSERT_EQ(Fast(prefix).Describe(), General(prefix).Describe()) << "prefix of " << n;
  }
  for (size_t at = 0; at < doc.size(); ++at) {
    for (char c : {'"', '\\', ' ', 'x', '0', '-', '}', ',', '\x01'}) {
      if (doc[at] == c) continue;
      std::string bad = doc;
      bad[at] = c;
      ASSERT_EQ(Fast(bad).Describe(), General(bad).Describe())
          << "byte " << at << " ('" << doc[at] << "') made '" << c << "'";
    }
  }
}

TEST(SysTraceReaderTest, NumbersPastTheirRangeFailTheDocument) {
  for (const auto& [nc, ts, reason] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"4294967296", "1", "nc_idx out of range"},
           {"0", "18446744073709551616", "timestamp_ns out of range"},
           {"0", "01", "timestamp_ns is not an unsigned integer"},
           {"0", "1.5", "timestamp_ns is not an unsigned integer"},
           {"0", "1e3", "timestamp_ns is not an unsigned integer"},
       }) {
    const std::string doc = Doc({Ev("device_exec", "stop", 1, nc, "{}", ts)});
    const Reading fast = Fast(doc);
    EXPECT_FALSE(fast.ok) << doc;
    EXPECT_NE(fast.error.find(reason), std::string::npos) << fast.error;
    EXPECT_EQ(fast.Describe(), General(doc).Describe());
  }
}

// Through the parser the flusher uses: a compact document cut short keeps none of its events
// and counts them as malformed (device_malformed in the capture), as before the fast path.
TEST(SysTraceReaderTest, ACompactDocumentCutShortIsMalformedWhole) {
  StringTable strings;
  DeviceTraceParser parser(&strings);
  parser.set_realtime_offset_for_testing(1700000000000000000);
  const std::string doc = RealShapeDocument();
  DeviceTraceOutput out;
  std::string error;
  EXPECT_FALSE(parser.Parse(1, doc.substr(0, doc.size() - 30), &out, &error));
  EXPECT_TRUE(out.events.empty());
  EXPECT_TRUE(out.clock_syncs.empty());
  EXPECT_EQ(out.malformed, 18u);  // every event_type in the text
  EXPECT_EQ(parser.malformed_total(), 18u);
  EXPECT_NE(error.find("at byte"), std::string::npos) << error;

  DeviceTraceOutput whole;
  ASSERT_TRUE(parser.Parse(1, doc, &whole, &error)) << error;
  // The load's copy, the execution, the write; the read, which ends 584 years after it
  // started, and the model switch on core 4294967295 are malformed events.
  ASSERT_EQ(whole.events.size(), 3u);
  EXPECT_EQ(whole.malformed, 2u);
  EXPECT_EQ(strings.Get(whole.events[0].name_iid()), "dma_model_load");
  EXPECT_EQ(strings.Get(whole.events[1].name_iid()), "nc_exec_running");
  EXPECT_EQ(strings.Get(whole.events[1].model_name_iid()), "aten_mul");
  EXPECT_EQ(whole.events[1].exec_id(), 1u);
  EXPECT_EQ(whole.events[1].start_ns(), 1000000501000u);
  EXPECT_EQ(whole.events[1].duration_ns(), 375000u);
  EXPECT_EQ(strings.Get(whole.events[2].name_iid()), "dma_h2d");
  EXPECT_EQ(whole.events[2].bytes(), 4u);
  EXPECT_EQ(whole.clock_syncs.size(), 1u);
}

}  // namespace
}  // namespace nrtprof::shim
