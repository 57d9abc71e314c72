#include "shim/backend/event_wire.h"

#include <cstdint>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"

namespace nrtprof::shim {
namespace {

// What protobuf writes for `event` as the one field `events` of an EventBatch.
std::string ProtobufBytes(const nrtprof::Event& event) {
  nrtprof::EventBatch batch;
  *batch.add_events() = event;
  return batch.SerializeAsString();
}

std::string HandBytes(const nrtprof::Event& event) {
  std::string out;
  wire::AppendEvent(event, &out);
  return out;
}

// One setter a field of Event, by field number, each given a value that takes the field's
// longest encoding (a 64-bit value over 2^63, a negative int32 or enum: 10 bytes).
const std::vector<std::pair<int, std::function<void(nrtprof::Event*)>>>& Setters() {
  static const auto* setters = new std::vector<std::pair<int, std::function<void(nrtprof::Event*)>>>{
      {1, [](nrtprof::Event* e) { e->set_kind(static_cast<nrtprof::EventKind>(-3)); }},
      {2, [](nrtprof::Event* e) { e->set_start_ns(UINT64_MAX); }},
      {3, [](nrtprof::Event* e) { e->set_duration_ns(0x8000000000000001ull); }},
      {4, [](nrtprof::Event* e) { e->set_tid(UINT32_MAX); }},
      {5, [](nrtprof::Event* e) { e->set_name_iid(0x12345678u); }},
      {6, [](nrtprof::Event* e) { e->set_correlation_id(0xFEDCBA9876543210ull); }},
      {7, [](nrtprof::Event* e) { e->set_status(-1); }},
      {8, [](nrtprof::Event* e) { e->set_bytes(1ull << 63); }},
      {9, [](nrtprof::Event* e) { e->set_model_handle(0x00007F1234567890ull); }},
      {10, [](nrtprof::Event* e) { e->set_tensor_handle(0x00007F00DEADBEEFull); }},
      {11, [](nrtprof::Event* e) { e->set_tensor_handle2(127); }},
      {12, [](nrtprof::Event* e) { e->set_stack_iid(128); }},
      {13, [](nrtprof::Event* e) { e->set_depth(16383); }},
      {14, [](nrtprof::Event* e) { e->set_nc_idx(-1); }},
      {15, [](nrtprof::Event* e) { e->set_device_id(16384); }},
      {16, [](nrtprof::Event* e) { e->set_device_parent_id(UINT64_MAX - 1); }},
      {17, [](nrtprof::Event* e) { e->set_exec_id(1); }},
      {18, [](nrtprof::Event* e) { e->set_model_name_iid(0x80000000u); }},
      {19, [](nrtprof::Event* e) { e->set_engine_iid(7); }},
      {20, [](nrtprof::Event* e) { e->set_repeat(1000000); }},
      {21, [](nrtprof::Event* e) { e->set_placement(INT32_MIN); }},
      {22, [](nrtprof::Event* e) { e->set_tensor_name_iid(99); }},
      {23, [](nrtprof::Event* e) { e->set_host_clock(true); }},
      {24, [](nrtprof::Event* e) { e->set_function(static_cast<nrtprof::ApiFunction>(-7)); }},
      {25, [](nrtprof::Event* e) { e->set_nrta_seq(0xFFFF000000000001ull); }},
      {26, [](nrtprof::Event* e) { e->set_polls(5000000000ull); }},
      {27, [](nrtprof::Event* e) { e->set_worker_gid(INT32_MIN); }},
      {28, [](nrtprof::Event* e) { e->set_polls_only(true); }},
  };
  return *setters;
}

TEST(EventWireTest, AnEmptyEventIsItsTagAndALengthOfZero) {
  const nrtprof::Event empty;
  EXPECT_EQ(HandBytes(empty), ProtobufBytes(empty));
  EXPECT_EQ(HandBytes(empty), std::string("\x22\x00", 2));
}

TEST(EventWireTest, EachFieldAloneIsWrittenAsProtobufWritesIt) {
  for (const auto& [number, set] : Setters()) {
    nrtprof::Event event;
    set(&event);
    EXPECT_EQ(HandBytes(event), ProtobufBytes(event)) << "field " << number;
    EXPECT_GT(HandBytes(event).size(), 2u) << "field " << number << " was left out";
  }
}

TEST(EventWireTest, EveryFieldAtOnceAtItsLongestIsWrittenAsProtobufWritesIt) {
  nrtprof::Event event;
  for (const auto& [number, set] : Setters()) set(&event);
  const std::string bytes = HandBytes(event);
  EXPECT_EQ(bytes, ProtobufBytes(event));
  EXPECT_LE(bytes.size(), wire::kMaxEventBytes);
  // And protobuf reads it back as the same event.
  nrtprof::EventBatch batch;
  ASSERT_TRUE(batch.ParseFromString(bytes));
  ASSERT_EQ(batch.events_size(), 1);
  EXPECT_EQ(batch.events(0).SerializeAsString(), event.SerializeAsString());
}

TEST(EventWireTest, EventsAppendOneAfterAnother) {
  nrtprof::Event a, b;
  a.set_kind(nrtprof::EVENT_RANGE);
  a.set_start_ns(123456789);
  b.set_kind(nrtprof::EVENT_API_CALL);
  b.set_nc_idx(-1);
  std::string out;
  wire::AppendEvent(a, &out);
  wire::AppendEvent(b, &out);
  nrtprof::EventBatch batch;
  *batch.add_events() = a;
  *batch.add_events() = b;
  EXPECT_EQ(out, batch.SerializeAsString());
}

// The encoder writes fields 1 to kEventFields: a field added to Event in proto/nrtprof.proto
// (and so set by the builder some day) fails here until AppendEvent writes it.
TEST(EventWireTest, TheEncoderKnowsEveryFieldOfEventInTheProtoFile) {
  std::ifstream in(std::string(getenv("TEST_SRCDIR")) + "/nrtprof/proto/nrtprof.proto");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string proto = text.str();
  const size_t begin = proto.find("\nmessage Event {");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = proto.find("\n}", begin);
  ASSERT_NE(end, std::string::npos);
  const std::string body = proto.substr(begin, end - begin);
  // Each field's declaration: a type, a name, '=' and its number (comments stripped first).
  const std::string code = std::regex_replace(body, std::regex("//[^\n]*"), "");
  const std::regex field(R"(\b[A-Za-z_][A-Za-z0-9_.]*\s+[a-z_][a-z0-9_]*\s*=\s*(\d+)\s*;)");
  std::set<int> numbers;
  for (auto it = std::sregex_iterator(code.begin(), code.end(), field);
       it != std::sregex_iterator(); ++it) {
    numbers.insert(std::stoi((*it)[1].str()));
  }
  std::set<int> expected;
  for (int i = 1; i <= wire::kEventFields; ++i) expected.insert(i);
  EXPECT_EQ(numbers, expected);
  EXPECT_EQ(static_cast<int>(Setters().size()), wire::kEventFields);
  // No repeated, map or nested message field: AppendEvent writes varints only.
  EXPECT_EQ(code.find("repeated"), std::string::npos);
  EXPECT_EQ(code.find("map<"), std::string::npos);
}

}  // namespace
}  // namespace nrtprof::shim
