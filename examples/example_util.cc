#include "example_util.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/bf16.h"
#include "sim/model_format.h"
#include "sim/model_text.h"

extern const char* __progname;

namespace examples {

void Check(NRT_STATUS status, const std::string& what) {
  if (status == NRT_SUCCESS) return;
  fprintf(stderr, "%s: %s failed with status %d\n", __progname, what.c_str(),
          static_cast<int>(status));
  exit(1);
}

absl::StatusOr<std::string> CompileModelText(absl::string_view text) {
  absl::StatusOr<nrtsim::Model> model = nrtsim::ParseModelText(text);
  if (!model.ok()) return model.status();
  return nrtsim::EncodeModel(*model);
}

nrt_model_t* LoadModelText(const std::string& text, int vnc) {
  absl::StatusOr<std::string> bytes = CompileModelText(text);
  if (!bytes.ok()) {
    fprintf(stderr, "%s: model text: %s\n", __progname,
            std::string(bytes.status().message()).c_str());
    exit(1);
  }
  // The text parsed, so its first line is "model NAME".
  const std::string name = text.substr(6, text.find('\n') - 6);
  nrt_model_t* loaded = nullptr;
  Check(nrt_load(bytes->data(), bytes->size(), vnc, -1, &loaded), "nrt_load of " + name);
  return loaded;
}

std::string EagerOpModelText(const std::string& model_name, const std::string& op,
                             const std::string& dtype, const std::vector<std::string>& input_shapes,
                             const std::string& output_shape, const std::string& attrs) {
  static constexpr const char* kInputNames[] = {"a", "b"};
  std::string text = absl::StrCat("model ", model_name, "\n");
  std::string args;
  for (size_t i = 0; i < input_shapes.size() && i < 2; ++i) {
    absl::StrAppend(&text, "input ", kInputNames[i], " ", dtype, " ", input_shapes[i], "\n");
    absl::StrAppend(&args, i == 0 ? "" : ", ", kInputNames[i]);
  }
  if (!attrs.empty()) absl::StrAppend(&args, ", ", attrs);
  absl::StrAppend(&text, "output out ", dtype, " ", output_shape, "\n", "out = ", op, "(", args,
                  ")\n");
  return text;
}

nrt_tensor_t* DeviceTensor(int vnc, size_t bytes, const char* name) {
  nrt_tensor_t* tensor = nullptr;
  Check(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, vnc, bytes, name, &tensor),
        absl::StrCat("nrt_tensor_allocate of ", name));
  return tensor;
}

size_t ElementSize(const std::string& dtype) { return dtype == "bf16" ? 2 : 4; }

std::vector<uint8_t> Encode(const std::vector<float>& values, const std::string& dtype) {
  std::vector<uint8_t> bytes(values.size() * ElementSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == "bf16") {
      const uint16_t b = nrtsim::FloatToBf16(values[i]);
      memcpy(&bytes[2 * i], &b, 2);
    } else {
      memcpy(&bytes[4 * i], &values[i], 4);
    }
  }
  return bytes;
}

std::vector<float> Decode(const std::vector<uint8_t>& bytes, const std::string& dtype) {
  const size_t n = bytes.size() / ElementSize(dtype);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == "bf16") {
      uint16_t b;
      memcpy(&b, &bytes[2 * i], 2);
      values[i] = nrtsim::Bf16ToFloat(b);
    } else {
      memcpy(&values[i], &bytes[4 * i], 4);
    }
  }
  return values;
}

DeviceTimer::DeviceTimer(uint64_t events_per_core) {
  nrt_sys_trace_config_t* config = nullptr;
  Check(nrt_sys_trace_config_allocate(&config), "nrt_sys_trace_config_allocate");
  nrt_sys_trace_config_set_max_events_per_nc(config, events_per_core);
  Check(nrt_sys_trace_start(config), "nrt_sys_trace_start");
  nrt_sys_trace_config_free(config);
}

DeviceTimer::~DeviceTimer() {
  if (!stopped_) nrt_sys_trace_stop();
}

namespace {

double Number(const google::protobuf::Struct& event, const char* key) {
  auto it = event.fields().find(key);
  return it == event.fields().end() ? 0.0 : it->second.number_value();
}

std::string Text(const google::protobuf::Struct& event, const char* key) {
  auto it = event.fields().find(key);
  return it == event.fields().end() ? "" : it->second.string_value();
}

}  // namespace

absl::StatusOr<DeviceTime> SumSystemTrace(absl::string_view json,
                                          std::vector<DeviceTime>* per_core) {
  google::protobuf::Struct doc;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &doc);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("system trace is not valid JSON: ", parsed.ToString()));
  }
  if (doc.fields().count("trace_events") == 0 || doc.fields().count("cores") == 0) {
    return absl::InvalidArgumentError("system trace JSON lacks trace_events or cores");
  }
  DeviceTime time;
  for (const auto& value : doc.fields().at("trace_events").list_value().values()) {
    const google::protobuf::Struct& event = value.struct_value();
    const std::string type = Text(event, "type");
    const auto duration = static_cast<uint64_t>(Number(event, "duration"));
    const auto core = static_cast<size_t>(Number(event, "nc_idx"));
    DeviceTime* on_core = nullptr;
    if (per_core != nullptr) {
      if (per_core->size() <= core) per_core->resize(core + 1);
      on_core = &(*per_core)[core];
    }
    for (DeviceTime* t : {&time, on_core}) {
      if (t == nullptr) continue;
      if (type == "nc_exec_running") {
        t->execution_ns += duration;
        ++t->executions;
      } else if (type == "dma_transfer" && Number(event, "parent_id") == 0) {
        t->transfer_ns += duration;
        ++t->transfers;
      }
    }
  }
  for (const auto& core : doc.fields().at("cores").list_value().values()) {
    time.overwritten += static_cast<uint64_t>(Number(core.struct_value(), "events_overwritten"));
  }
  return time;
}

DeviceTime DeviceTimer::Stop(std::vector<DeviceTime>* per_core) {
  stopped_ = true;
  char* buffer = nullptr;
  size_t size = 0;
  Check(nrt_sys_trace_fetch_events(&buffer, &size, nullptr), "nrt_sys_trace_fetch_events");
  Check(nrt_sys_trace_stop(), "nrt_sys_trace_stop");
  absl::StatusOr<DeviceTime> time = SumSystemTrace(absl::string_view(buffer, size), per_core);
  nrt_sys_trace_buffer_free(buffer);
  if (!time.ok()) {
    fprintf(stderr, "%s: %s\n", __progname, std::string(time.status().message()).c_str());
    exit(1);
  }
  return *time;
}

}  // namespace examples
