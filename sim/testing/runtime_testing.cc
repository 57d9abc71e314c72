#include "sim/testing/runtime_testing.h"

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

std::vector<google::protobuf::Struct> FetchedTrace::OfType(const std::string& type) const {
  std::vector<google::protobuf::Struct> out;
  for (const auto& e : events) {
    if (Str(e, "type") == type) out.push_back(e);
  }
  return out;
}

FetchedTrace Fetch() {
  FetchedTrace trace;
  char* buffer = nullptr;
  size_t size = 0;
  EXPECT_EQ(nrt_sys_trace_fetch_events(&buffer, &size, nullptr), NRT_SUCCESS);
  if (buffer == nullptr) return trace;
  google::protobuf::Struct doc;
  const std::string json(buffer, size);
  nrt_sys_trace_buffer_free(buffer);
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &doc).ok()) << json;
  for (const auto& v : doc.fields().at("trace_events").list_value().values()) {
    trace.events.push_back(v.struct_value());
  }
  for (const auto& v : doc.fields().at("cores").list_value().values()) {
    trace.cores.push_back(v.struct_value());
  }
  return trace;
}

double Num(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? -1 : it->second.number_value();
}

std::string Str(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "" : it->second.string_value();
}

}  // namespace nrtsim::testing
