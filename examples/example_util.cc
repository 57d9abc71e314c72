#include "example_util.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <utility>

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

// The document is the runtime's system trace: {"events":[...],"data_version":2}. An execution is
// a device_exec start and stop on its NeuronCore (executions on one core run one at a time, so
// stops pair with starts in order); a host-initiated transfer is a tensor_read or tensor_write
// span of the calling thread. nc_local_id numbers each core's events one after another, so a
// gap in it is events the ring buffer lost.
absl::Status SystemTraceSum::Add(absl::string_view json) {
  google::protobuf::Struct doc;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &doc);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("system trace is not valid JSON: ", parsed.ToString()));
  }
  if (doc.fields().count("events") == 0 || doc.fields().count("data_version") == 0) {
    return absl::InvalidArgumentError("system trace JSON lacks events or data_version");
  }
  auto add = [&](size_t core, bool execution, double ns) {
    if (per_core_.size() <= core) per_core_.resize(core + 1);
    for (DeviceTime* t : {&total_, &per_core_[core]}) {
      (execution ? t->execution_ns : t->transfer_ns) += static_cast<uint64_t>(ns);
      ++(execution ? t->executions : t->transfers);
    }
  };
  for (const auto& value : doc.fields().at("events").list_value().values()) {
    const google::protobuf::Struct& event = value.struct_value();
    const std::string type = Text(event, "event_type");
    const std::string phase = Text(event, "phase");
    const auto core = static_cast<size_t>(Number(event, "nc_idx"));
    const double ns = Number(event, "timestamp_ns");
    const auto local_id = static_cast<uint64_t>(Number(event, "nc_local_id"));
    uint64_t& expected = next_local_id_.emplace(core, local_id).first->second;
    if (local_id > expected) total_.overwritten += local_id - expected;
    expected = local_id + 1;
    if (type == "device_exec") {
      if (phase == "start") {
        exec_starts_[core].push_back(ns);
      } else if (phase == "stop" && !exec_starts_[core].empty()) {
        add(core, true, ns - exec_starts_[core].front());
        exec_starts_[core].pop_front();
      }
    } else if (type == "tensor_read" || type == "tensor_write") {
      const auto key = std::make_pair(Number(event, "thread_id"), type);
      if (phase == "start") {
        call_starts_[key] = ns;
      } else if (phase == "stop" && call_starts_.count(key) != 0) {
        add(core, false, ns - call_starts_[key]);
        call_starts_.erase(key);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceTime> SumSystemTrace(absl::string_view json,
                                          std::vector<DeviceTime>* per_core) {
  SystemTraceSum sum;
  if (absl::Status s = sum.Add(json); !s.ok()) return s;
  if (per_core != nullptr) *per_core = sum.per_core();
  return sum.total();
}

void DeviceTimer::Poll() {
  char* buffer = nullptr;
  size_t size = 0;
  Check(nrt_sys_trace_fetch_events(&buffer, &size, nullptr), "nrt_sys_trace_fetch_events");
  const absl::Status added = sum_.Add(absl::string_view(buffer, size));
  nrt_sys_trace_buffer_free(buffer);
  if (!added.ok()) {
    fprintf(stderr, "%s: %s\n", __progname, std::string(added.message()).c_str());
    exit(1);
  }
}

DeviceTime DeviceTimer::Stop(std::vector<DeviceTime>* per_core) {
  Poll();
  stopped_ = true;
  Check(nrt_sys_trace_stop(), "nrt_sys_trace_stop");
  if (per_core != nullptr) *per_core = sum_.per_core();
  return sum_.total();
}

}  // namespace examples
