#include "daemon/wire_events.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/ingest.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

// Every field of a record, as text: records have padding, so they are compared by field.
std::string Fields(const IngestedEvent& e) {
  std::string s = absl::StrCat(
      "kind=", e.kind, " tid=", e.tid, " function=", e.function, " name=", e.name_iid,
      " stack=", e.stack_iid, " depth=", e.depth, " model_name=", e.model_name_iid,
      " engine=", e.engine_iid, " tensor_name=", e.tensor_name_iid, " repeat=", e.repeat,
      " status=", e.status, " nc=", e.nc_idx, " placement=", e.placement,
      " host_clock=", e.host_clock, " polls_only=", e.polls_only, " start=", e.start_ns,
      " duration=", e.duration_ns,
      " correlation=", e.correlation_id, " bytes=", e.bytes, " nrta_seq=", e.nrta_seq);
  // The union's bytes, whichever member the kind says (both start as zeros).
  uint64_t ids[3];
  static_assert(sizeof(ids) == sizeof(e.call) && sizeof(ids) == sizeof(e.device));
  std::memcpy(ids, &e.call, sizeof(ids));
  absl::StrAppend(&s, " handles_or_ids=", ids[0], ",", ids[1], ",", ids[2]);
  return s;
}

// What protobuf makes of `wire`: the records (ToRecord) and the batch without its events.
// False if it is not a ShimMessage with a batch.
bool ParseWithProtobuf(const std::string& wire, std::vector<std::string>* records,
                       std::string* rest) {
  nrtprof::ShimMessage m;
  if (!m.ParseFromString(wire) || !m.has_batch()) return false;
  records->clear();
  std::vector<IngestedEvent> parsed;
  if (!RecordsOf(m.batch(), &parsed)) return false;
  for (const IngestedEvent& e : parsed) records->push_back(Fields(e));
  m.mutable_batch()->clear_events();
  m.mutable_batch()->clear_events_encoded();
  *rest = m.batch().SerializeAsString();
  return true;
}

// Reads `wire` both ways. If the wire reader takes it, protobuf must too, with the same
// records and rest; returns whether the wire reader took it.
bool ReadsAsProtobufDoes(const std::string& wire, const std::string& what) {
  nrtprof::EventBatch rest;
  std::vector<IngestedEvent> events;
  std::string scratch;
  if (!ReadWireBatch(wire, &rest, &events, &scratch)) return false;
  std::vector<std::string> expected;
  std::string expected_rest;
  EXPECT_TRUE(ParseWithProtobuf(wire, &expected, &expected_rest))
      << what << ": the wire reader took bytes protobuf refuses";
  std::vector<std::string> got;
  for (const IngestedEvent& e : events) got.push_back(Fields(e));
  EXPECT_EQ(got, expected) << what;
  EXPECT_EQ(rest.SerializeAsString(), expected_rest) << what;
  return true;
}

// CountWireElements never fails on what protobuf parses (a message it could not count would
// go to protobuf unbounded), and counts at least the batch's events.
void CountsWhatProtobufParses(const std::string& wire, const std::string& what) {
  uint64_t elements = 0;
  const bool counted = CountWireElements(wire, &elements);
  nrtprof::ShimMessage m;
  if (!m.ParseFromString(wire)) return;
  EXPECT_TRUE(counted) << what << ": protobuf parses what was not counted";
  EXPECT_GE(elements, static_cast<uint64_t>(CountEvents(m.batch()))) << what;
}

std::string Varint(uint64_t v) {
  std::string s;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    if (v != 0) b |= 0x80;
    s.push_back(static_cast<char>(b));
  } while (v != 0);
  return s;
}
std::string Tag(uint32_t field, uint32_t type) { return Varint(uint64_t{field} << 3 | type); }
std::string Delimited(uint32_t field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}
// A batch as the shim sends one: every kind of event, every field, and what else a batch has.
nrtprof::ShimMessage RealBatch() {
  nrtprof::ShimMessage m;
  nrtprof::EventBatch* b = m.mutable_batch();
  b->set_sequence(7);
  nrtprof::InternedString* s = b->add_strings();
  s->set_iid(1);
  s->set_value("nrt_execute");
  nrtprof::InternedStack* stack = b->add_stacks();
  stack->set_iid(3);
  stack->add_frame_iids(1);

  nrtprof::Event* range = b->add_events();
  range->set_kind(nrtprof::EVENT_RANGE);
  range->set_start_ns(1'000);
  range->set_duration_ns(5'000);
  range->set_tid(11);
  range->set_name_iid(2);
  range->set_depth(1);

  nrtprof::Event* call = b->add_events();
  call->set_kind(nrtprof::EVENT_API_CALL);
  call->set_start_ns(1'200);
  call->set_duration_ns(300);
  call->set_tid(11);
  call->set_name_iid(1);
  call->set_function(nrtprof::API_NRT_EXECUTE);
  call->set_correlation_id(99);
  call->set_status(-3);  // negative: a ten-byte varint
  call->set_model_handle(0xfeedfacecafebeefull);
  call->set_tensor_handle(5);
  call->set_tensor_handle2(6);
  call->set_stack_iid(3);
  call->set_nc_idx(-1);
  call->set_repeat(4);
  call->set_placement(2);
  call->set_tensor_name_iid(1);
  call->set_model_name_iid(1);
  call->set_bytes(4096);
  call->set_polls_only(true);  // (a poll tally's flag; any call's field to the reader)

  nrtprof::Event* exec = b->add_events();
  exec->set_kind(nrtprof::EVENT_DEVICE_EXEC);
  exec->set_start_ns(UINT64_MAX - 10);
  exec->set_duration_ns(10);
  exec->set_tid(11);
  exec->set_name_iid(1);
  exec->set_nc_idx(3);
  exec->set_device_id(77);
  exec->set_exec_id(8);
  exec->set_model_name_iid(1);
  exec->set_host_clock(true);
  exec->set_worker_gid(-5);  // a collective's (the wire does not tell them apart): ten bytes

  nrtprof::Event* op = b->add_events();
  op->set_kind(nrtprof::EVENT_DEVICE_OP);
  op->set_name_iid(1);
  op->set_device_parent_id(77);
  op->set_exec_id(8);
  op->set_engine_iid(1);
  op->set_nc_idx(0);  // the default: not on the wire

  nrtprof::Event* dma = b->add_events();
  dma->set_kind(nrtprof::EVENT_DEVICE_DMA);
  dma->set_name_iid(1);
  dma->set_bytes(1ull << 40);
  dma->set_tensor_name_iid(1);
  dma->set_device_id(78);

  b->add_events();  // all defaults: an empty message

  nrtprof::DeviceClockSync* sync = b->add_clock_syncs();
  sync->set_nc_idx(3);
  sync->set_device_ns(123);
  sync->set_host_monotonic_ns(456);
  b->mutable_drops()->set_ring_full(9);
  b->mutable_drops()->mutable_by_lane()->set_runtime(9);
  b->mutable_clock()->set_monotonic_ns(10);
  b->mutable_clock()->set_realtime_ns(20);
  b->mutable_events_sent()->set_hardware(3);
  b->add_notices("a notice");
  b->set_final(true);
  b->set_flushed(2);
  return m;
}

// RealBatch as a shim sends it to a daemon that reads events_encoded: its first two events in
// `events` (as an older shim's), the other four encoded (EventBatch.events_encoded).
nrtprof::ShimMessage RealEncodedBatch() {
  nrtprof::ShimMessage m = RealBatch();
  nrtprof::EventBatch* b = m.mutable_batch();
  std::string encoded;
  for (int i = 2; i < b->events_size(); ++i) {
    const std::string event = b->events(i).SerializeAsString();
    encoded += std::string(1, static_cast<char>((4 << 3) | 2)) + Varint(event.size()) + event;
  }
  b->mutable_events()->DeleteSubrange(2, b->events_size() - 2);
  b->set_events_encoded(encoded);
  return m;
}

std::vector<nrtprof::ShimMessage> RealBatches() { return {RealBatch(), RealEncodedBatch()}; }

TEST(WireEventsTest, ARealBatchReadsAsProtobufParsesIt) {
  const std::string wire = RealBatch().SerializeAsString();
  ASSERT_TRUE(ReadsAsProtobufDoes(wire, "the batch"));
  nrtprof::EventBatch rest;
  std::vector<IngestedEvent> events;
  std::string scratch;
  ASSERT_TRUE(ReadWireBatch(wire, &rest, &events, &scratch));
  ASSERT_EQ(events.size(), 6u);
  // A few fields by value, beside the comparison with protobuf above.
  EXPECT_EQ(events[1].status, -3);
  EXPECT_EQ(events[1].call.model, 0xfeedfacecafebeefull);
  EXPECT_EQ(events[1].nc_idx, -1);
  EXPECT_TRUE(events[1].polls_only);
  EXPECT_EQ(events[2].device.id, 77u);
  EXPECT_TRUE(events[2].host_clock);
  EXPECT_EQ(events[2].worker_gid, -5);
  EXPECT_EQ(events[3].device.parent, 77u);
  EXPECT_EQ(events[3].nc_idx, 0);  // absent from the wire: the message's default
  EXPECT_EQ(events[5].kind, nrtprof::EVENT_KIND_UNSPECIFIED);
  EXPECT_EQ(rest.sequence(), 7u);
  EXPECT_EQ(rest.events_size(), 0);
  EXPECT_EQ(rest.strings_size(), 1);
  EXPECT_EQ(rest.notices(0), "a notice");
  EXPECT_TRUE(rest.final());

  // The buffers are reused: a second, smaller batch leaves nothing of the first.
  nrtprof::ShimMessage small;
  small.mutable_batch()->set_sequence(8);
  small.mutable_batch()->add_events()->set_tid(1);
  ASSERT_TRUE(ReadWireBatch(small.SerializeAsString(), &rest, &events, &scratch));
  EXPECT_EQ(events.size(), 1u);
  EXPECT_EQ(rest.sequence(), 8u);
  EXPECT_EQ(rest.strings_size(), 0);
  EXPECT_FALSE(rest.final());
}

TEST(WireEventsTest, EncodedEventsReadAsProtobufParsesThem) {
  const std::string wire = RealEncodedBatch().SerializeAsString();
  ASSERT_TRUE(ReadsAsProtobufDoes(wire, "the encoded batch"));
  nrtprof::EventBatch rest, plain_rest;
  std::vector<IngestedEvent> events, plain;
  std::string scratch;
  ASSERT_TRUE(ReadWireBatch(wire, &rest, &events, &scratch));
  ASSERT_TRUE(ReadWireBatch(RealBatch().SerializeAsString(), &plain_rest, &plain, &scratch));
  // The same six events in the same order, whichever field carried them.
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(Fields(events[i]), Fields(plain[i]));
  EXPECT_TRUE(rest.events_encoded().empty());
  EXPECT_EQ(rest.SerializeAsString(), plain_rest.SerializeAsString());
  // Given twice, the field is its last value to protobuf, and so to the wire reader.
  nrtprof::ShimMessage twice = RealEncodedBatch();
  const std::string first = twice.batch().events_encoded();
  twice.mutable_batch()->set_events_encoded(first.substr(0, first.size() / 2));
  const std::string doubled =
      Delimited(2, twice.batch().SerializeAsString() + Delimited(14, first));
  ASSERT_TRUE(ReadsAsProtobufDoes(doubled, "events_encoded twice"));
  ASSERT_TRUE(ReadWireBatch(doubled, &rest, &events, &scratch));
  EXPECT_EQ(events.size(), 6u);
  // Anything but events in it: declined, and refused by the ingest that then parses it.
  nrtprof::ShimMessage other = RealEncodedBatch();
  other.mutable_batch()->set_events_encoded(Tag(1, 0) + Varint(5));
  EXPECT_FALSE(ReadWireBatch(other.SerializeAsString(), &rest, &events, &scratch));
  nrtprof::ShimMessage garbled = RealEncodedBatch();
  garbled.mutable_batch()->set_events_encoded(Tag(4, 2) + Varint(100));
  EXPECT_FALSE(ReadWireBatch(garbled.SerializeAsString(), &rest, &events, &scratch));
  nrtprof::Hello hello;
  hello.set_pid(42);
  ProcessIngest ingest(hello, IngestLimits());
  const absl::StatusOr<uint64_t> refused = ingest.OnBatch(garbled.batch());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("events_encoded does not hold events"),
            std::string::npos)
      << refused.status();
}

TEST(WireEventsTest, EveryTruncationIsDeclinedOrReadAsProtobufDoes) {
  for (const nrtprof::ShimMessage& batch : RealBatches()) {
    const std::string wire = batch.SerializeAsString();
    int taken = 0;
    for (size_t n = 0; n < wire.size(); ++n) {
      taken += ReadsAsProtobufDoes(wire.substr(0, n), absl::StrCat("first ", n, " bytes"));
      CountsWhatProtobufParses(wire.substr(0, n), absl::StrCat("first ", n, " bytes"));
    }
    // Only the empty prefix has no batch; the rest cut a length: nothing can be taken.
    EXPECT_EQ(taken, 0);
  }
}

TEST(WireEventsTest, EveryOneByteCorruptionIsDeclinedOrReadAsProtobufDoes) {
  for (const nrtprof::ShimMessage& batch : RealBatches()) {
    const std::string wire = batch.SerializeAsString();
    int taken = 0, tried = 0;
    for (size_t i = 0; i < wire.size(); ++i) {
      for (uint8_t x : {0x01, 0x02, 0x08, 0x40, 0x80, 0xff}) {
        std::string bad = wire;
        bad[i] = static_cast<char>(static_cast<uint8_t>(bad[i]) ^ x);
        ++tried;
        taken += ReadsAsProtobufDoes(bad, absl::StrCat("byte ", i, " ^ ", int{x}));
        CountsWhatProtobufParses(bad, absl::StrCat("byte ", i, " ^ ", int{x}));
      }
    }
    // Most corruptions change a value, not the framing: those must be read, and read right.
    EXPECT_GT(taken, tried / 4) << taken << " of " << tried;
  }
}

// Bytes written by hand, for what the shim never sends but protobuf accepts.
std::string WithEvent(const std::string& event) {
  return Delimited(2, Tag(1, 0) + Varint(1) + Delimited(4, event));
}

TEST(WireEventsTest, OddEncodingsReadAsProtobufReadsThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"non-minimal varint", Tag(4, 0) + std::string("\x85\x80\x80\x00", 4)},
      {"non-minimal tag", std::string("\xa0\x80\x00", 3) + Varint(9)},  // field 4
      {"uint32 given 64 bits", Tag(4, 0) + Varint(0x1234567890ull)},
      {"int32 given a large positive", Tag(14, 0) + Varint(0xffffffffull)},
      {"bool given 2", Tag(23, 0) + Varint(2)},
      {"enum out of range", Tag(1, 0) + Varint(1000)},
      {"a field twice: the last wins", Tag(2, 0) + Varint(5) + Tag(2, 0) + Varint(6)},
      {"fields out of order", Tag(16, 0) + Varint(3) + Tag(1, 0) + Varint(3)},
      {"unknown varint field", Tag(100, 0) + Varint(1) + Tag(4, 0) + Varint(2)},
      {"unknown fixed64 field", Tag(100, 1) + std::string(8, 'x') + Tag(4, 0) + Varint(2)},
      {"unknown fixed32 field", Tag(100, 5) + std::string(4, 'x') + Tag(4, 0) + Varint(2)},
      {"unknown bytes field", Delimited(100, "abc") + Tag(4, 0) + Varint(2)},
      {"a known field as bytes", Delimited(2, "abc") + Tag(4, 0) + Varint(2)},
      {"a known field as fixed64", Tag(3, 1) + std::string(8, '\x01')},
  };
  for (const auto& [what, event] : cases) {
    EXPECT_TRUE(ReadsAsProtobufDoes(WithEvent(event), what)) << what << ": declined";
  }
}

TEST(WireEventsTest, VarintsOfEveryLengthReadAsProtobufReadsThem) {
  // The smallest and largest value of each length, 1 to 10 bytes, in tags and values of 32-
  // and 64-bit fields; each where the message ends right after the event and where more of it
  // follows (an unknown field of the ShimMessage), since varints are read differently there.
  std::vector<uint64_t> values;
  for (int bytes = 1; bytes <= 9; ++bytes) {
    values.push_back(bytes == 1 ? 0 : uint64_t{1} << (7 * (bytes - 1)));
    values.push_back((uint64_t{1} << (7 * bytes)) - 1);
  }
  values.push_back(uint64_t{1} << 63);
  values.push_back(~uint64_t{0});
  const std::string more = Delimited(100, std::string(24, 'x'));
  for (uint64_t value : values) {
    for (uint32_t field : {2u, 4u, 17u, 26u, 127u, 2047u, 262143u}) {
      const std::string event = Tag(field, 0) + Varint(value) + Tag(5, 0) + Varint(value / 3);
      const std::string what = absl::StrCat("field ", field, " = ", value);
      EXPECT_TRUE(ReadsAsProtobufDoes(WithEvent(event), what)) << what << ": declined";
      EXPECT_TRUE(ReadsAsProtobufDoes(WithEvent(event) + more, what)) << what << ": declined";
    }
  }
  // Longer than they need be: a value of 0 to 9 continuation bytes, and a tag of 2 to 5 bytes.
  for (int padding = 0; padding <= 9; ++padding) {
    std::string value = "\x85";
    for (int i = 0; i < padding; ++i) value += "\x80";
    value.back() &= 0x7f;
    const std::string event = Tag(4, 0) + value + Tag(2, 0) + Varint(3);
    const std::string what = absl::StrCat("a value of ", padding + 1, " bytes");
    EXPECT_TRUE(ReadsAsProtobufDoes(WithEvent(event) + more, what)) << what << ": declined";
  }
  for (int padding = 1; padding <= 4; ++padding) {
    std::string tag = "\xa0";  // field 4, a varint
    for (int i = 0; i < padding; ++i) tag += "\x80";
    tag.back() &= 0x7f;
    const std::string event = tag + Varint(9);
    const std::string what = absl::StrCat("a tag of ", padding + 1, " bytes");
    EXPECT_TRUE(ReadsAsProtobufDoes(WithEvent(event) + more, what)) << what << ": declined";
  }
}

TEST(WireEventsTest, DeclinesWhatProtobufMustRead) {
  nrtprof::ShimMessage hello;
  hello.mutable_hello()->set_pid(1);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a Hello", hello.SerializeAsString()},
      {"no batch at all", ""},
      {"a batch given twice", WithEvent("") + WithEvent("")},
      {"a group in an event", WithEvent(Tag(100, 3) + Tag(100, 4))},
      {"field number 0", WithEvent(Tag(0, 0) + Varint(1))},
      {"a ten-byte varint run on", WithEvent(Tag(2, 0) + std::string(11, '\xff'))},
  };
  nrtprof::EventBatch rest;
  std::vector<IngestedEvent> events;
  std::string scratch;
  for (const auto& [what, wire] : cases) {
    EXPECT_FALSE(ReadWireBatch(wire, &rest, &events, &scratch)) << what;
  }
}

TEST(WireEventsTest, CountsEveryFieldOfTheBatchUnread) {
  uint64_t elements = 0;
  // The real batch: its sequence, a string, a stack, six events, a clock sync, its drops,
  // clock, events sent, a notice, final and flushed.
  ASSERT_TRUE(CountWireElements(RealBatch().SerializeAsString(), &elements));
  EXPECT_EQ(elements, 16u);
  // Encoded, four of its events are one field, and each of them counts as well.
  ASSERT_TRUE(CountWireElements(RealEncodedBatch().SerializeAsString(), &elements));
  EXPECT_EQ(elements, 17u);
  // An unknown group's fields count too, nested ones included; a Hello's fields count.
  const std::string group = Tag(100, 3) + Tag(1, 0) + Varint(1) + Tag(2, 3) + Tag(3, 0) +
                            Varint(1) + Tag(2, 4) + Tag(100, 4);
  ASSERT_TRUE(CountWireElements(Delimited(2, Tag(1, 0) + Varint(1) + group), &elements));
  EXPECT_EQ(elements, 5u);  // the sequence, the group, its field, the inner group, its field
  nrtprof::ShimMessage hello;
  hello.mutable_hello()->set_pid(1);
  hello.mutable_hello()->add_command_line("a");
  hello.mutable_hello()->add_command_line("b");
  ASSERT_TRUE(CountWireElements(hello.SerializeAsString(), &elements));
  EXPECT_EQ(elements, 3u);
  // A five-byte tag whose last byte is above 0x0f: protobuf drops the bits past 32 and reads
  // the field its low bits name (the collector fuzzer's finding, from a mutated batch).
  const std::string wide_tag = std::string("\x08\x03", 2) +              // sequence 3
                               std::string("\xed\xd3\xc2\xf3\x14", 5) +  // field 164500797,
                               std::string("\x18\x82\xaa\x01", 4);       // fixed32
  nrtprof::ShimMessage wide;
  ASSERT_TRUE(wide.ParseFromString(Delimited(2, wide_tag)));
  EXPECT_EQ(wide.batch().sequence(), 3u);
  ASSERT_TRUE(CountWireElements(Delimited(2, wide_tag), &elements));
  EXPECT_EQ(elements, 2u);
  nrtprof::EventBatch rest;
  std::vector<IngestedEvent> events;
  std::string scratch;
  ASSERT_TRUE(ReadWireBatch(Delimited(2, wide_tag), &rest, &events, &scratch));
  EXPECT_EQ(rest.SerializeAsString(), wide.batch().SerializeAsString());
  // What protobuf refuses: a group never closed, closed by another number, an end alone.
  for (const std::string& bad :
       {Delimited(2, Tag(100, 3) + Tag(1, 0) + Varint(1)), Delimited(2, Tag(100, 3) + Tag(101, 4)),
        Delimited(2, Tag(100, 4))}) {
    EXPECT_FALSE(CountWireElements(bad, &elements));
    nrtprof::ShimMessage m;
    EXPECT_FALSE(m.ParseFromString(bad));
  }
}

// The replay of a kept batch gives the capture the stream's own ingest would have.
TEST(WireEventsTest, ARecordedBatchIngestsAsTheParsedOne) {
  nrtprof::Hello hello;
  hello.set_pid(42);
  ProcessIngest live(hello, IngestLimits());
  nrtprof::ShimMessage m = RealBatch();
  nrtprof::EventBatch* b = m.mutable_batch();
  b->clear_stacks();
  for (nrtprof::Event& e : *b->mutable_events()) {
    e.set_name_iid(1);
    e.set_stack_iid(0);
    if (e.kind() == nrtprof::EVENT_KIND_UNSPECIFIED) e.set_kind(nrtprof::EVENT_RANGE);
    if (e.start_ns() > 1'000'000) e.set_start_ns(1'000'000);
  }
  b->set_sequence(3);  // two batches missing before it
  ASSERT_TRUE(live.OnBatch(*b).ok());

  std::unique_ptr<ProcessIngest> parsed = live.ForReplay(0);
  std::unique_ptr<ProcessIngest> read = live.ForReplay(0);
  parsed->BeginCapture();
  read->BeginCapture();
  ASSERT_EQ(parsed->OnBatch(*b).value(), 3u);
  nrtprof::EventBatch rest;
  std::vector<IngestedEvent> events;
  std::string scratch;
  ASSERT_TRUE(ReadWireBatch(m.SerializeAsString(), &rest, &events, &scratch));
  ASSERT_EQ(read->OnRecordedBatch(rest, events).value(), 3u);
  // Again: a duplicate, kept once.
  ASSERT_EQ(read->OnRecordedBatch(rest, events).value(), 3u);

  ProcessCapture x = parsed->TakeCapture(), y = read->TakeCapture();
  ASSERT_EQ(x.events.size(), 6u);
  ASSERT_EQ(y.events.size(), x.events.size());
  for (size_t i = 0; i < x.events.size(); ++i) EXPECT_EQ(Fields(y.events[i]), Fields(x.events[i]));
  EXPECT_EQ(y.batches_missing, 2u);
  EXPECT_EQ(y.batches_missing, x.batches_missing);
  EXPECT_EQ(y.events_received, x.events_received);
  EXPECT_EQ(y.received_by_lane.hardware, 3u);
  EXPECT_EQ(y.received_by_lane.hardware, x.received_by_lane.hardware);
  EXPECT_EQ(y.shim_at_end.ring_full, x.shim_at_end.ring_full);
  EXPECT_EQ(y.sent_at_begin.hardware, x.sent_at_begin.hardware);
  EXPECT_EQ(y.realtime_offset_ns, x.realtime_offset_ns);

  // Only a replay takes recorded batches: the stream's own ingest checks what it is given.
  EXPECT_EQ(live.OnRecordedBatch(rest, events).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace nrtprof::daemon
