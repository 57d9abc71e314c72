#include "sim/testing/runtime_testing.h"

#include <regex>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "sim/model_format.h"
#include "sim/model_text.h"
#include "nrt/nrt_sys_trace.h"

namespace nrtsim::testing {

std::string ModelBytes(const std::string& text) {
  absl::StatusOr<Model> model = ParseModelText(text);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? EncodeModel(*model) : std::string();
}

nrt_model_t* Load(const std::string& text, int vnc) {
  const std::string bytes = ModelBytes(text);
  nrt_model_t* model = nullptr;
  EXPECT_EQ(nrt_load(bytes.data(), bytes.size(), vnc, -1, &model), NRT_SUCCESS);
  return model;
}

nrt_tensor_t* DeviceFloats(int vnc, const std::vector<float>& values, const char* name) {
  nrt_tensor_t* t = nullptr;
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, vnc, values.size() * 4, name, &t),
            NRT_SUCCESS);
  if (t != nullptr) {
    EXPECT_EQ(nrt_tensor_write(t, values.data(), 0, values.size() * 4), NRT_SUCCESS);
  }
  return t;
}

std::vector<float> ReadFloats(const nrt_tensor_t* tensor) {
  std::vector<float> out(nrt_tensor_get_size(tensor) / 4);
  EXPECT_EQ(nrt_tensor_read(tensor, out.data(), 0, out.size() * 4), NRT_SUCCESS);
  return out;
}

nrt_tensor_set_t* Set(const std::map<std::string, nrt_tensor_t*>& tensors) {
  nrt_tensor_set_t* set = nullptr;
  EXPECT_EQ(nrt_allocate_tensor_set(&set), NRT_SUCCESS);
  for (const auto& [name, tensor] : tensors) {
    EXPECT_EQ(nrt_add_tensor_to_tensor_set(set, name.c_str(), tensor), NRT_SUCCESS);
  }
  return set;
}

std::vector<google::protobuf::Struct> FetchedTrace::OfType(const std::string& type,
                                                           const std::string& phase) const {
  std::vector<google::protobuf::Struct> out;
  for (const auto& e : events) {
    if (Str(e, "event_type") == type && (phase.empty() || Str(e, "phase") == phase)) {
      out.push_back(e);
    }
  }
  return out;
}

FetchedTrace Fetch(const nrt_sys_trace_fetch_options_t* options) {
  FetchedTrace trace;
  char* buffer = nullptr;
  size_t size = 0;
  EXPECT_EQ(nrt_sys_trace_fetch_events(&buffer, &size, options), NRT_SUCCESS);
  if (buffer == nullptr) return trace;
  google::protobuf::Struct doc;
  const std::string json(buffer, size);
  nrt_sys_trace_buffer_free(buffer);
  trace.json = json;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &doc).ok()) << json;
  if (doc.fields().count("events") == 0) {
    ADD_FAILURE() << "no events array: " << json;
    return trace;
  }
  for (const auto& v : doc.fields().at("events").list_value().values()) {
    trace.events.push_back(v.struct_value());
  }
  return trace;
}

std::string RealShapeError(const std::string& json) {
  // The facts (public notes on the runtime's JSON serializer, libnrt 2.31): a two-key
  // envelope with data_version 2; per event ten keys in this order, then nrta_seq_id only
  // when the event has one; phase one of start/stop/instant; worker_gid signed (-1 unknown);
  // data always an object; compact output (no whitespace).
  static const std::regex kEvent(
      R"re(\{"event_type":"[a-z_]+","phase":"(start|stop|instant)","id":[0-9]+,"nc_idx":[0-9]+,)re"
      R"re("nc_local_id":[0-9]+,"tracking_id":[0-9]+,"thread_id":[0-9]+,"worker_gid":-?[0-9]+,)re"
      R"re("data":\{("[a-z_]+":(-?[0-9]+|true|false|"[^"]*")(,"[a-z_]+":(-?[0-9]+|true|false|"[^"]*"))*)?\},)re"
      R"re("timestamp_ns":[0-9]+(,"nrta_seq_id":[0-9]+)?\})re");
  const std::string head = "{\"events\":[";
  const std::string tail = "],\"data_version\":2}";
  if (json.compare(0, head.size(), head) != 0) return "does not begin with " + head;
  if (json.size() < head.size() + tail.size() ||
      json.compare(json.size() - tail.size(), tail.size(), tail) != 0) {
    return "does not end with " + tail;
  }
  const size_t last = json.size() - tail.size();
  size_t pos = head.size();
  int index = 0;
  while (pos < last) {
    const size_t ts = json.find("\"timestamp_ns\":", pos);
    if (ts == std::string::npos || ts > last) return "event " + std::to_string(index) + ": no timestamp_ns";
    const size_t end = json.find('}', ts);
    if (end == std::string::npos || end >= last + 1) return "event " + std::to_string(index) + ": unterminated";
    const std::string event = json.substr(pos, end + 1 - pos);
    if (!std::regex_match(event, kEvent)) {
      return "event " + std::to_string(index) + " is not in the real shape: " + event;
    }
    pos = end + 1;
    ++index;
    if (pos < last) {
      if (json[pos] != ',') return "event " + std::to_string(index) + ": expected ','";
      ++pos;
    }
  }
  return "";
}

}  // namespace nrtsim::testing
