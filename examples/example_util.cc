#include "example_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
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
  // The first fetch and parse pay one-time costs (protobuf's JSON parser sets itself up: about
  // 20 ms here) that would otherwise land in the program's first timed iteration.
  Poll();
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
// span of the calling thread (of the scheduling thread and its request, for an asynchronous one).
// nc_local_id numbers each core's events one after another, so a gap in it is events the ring
// buffer lost.
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
      // An asynchronous transfer's events carry its request's id: requests of two queues may
      // overlap.
      const auto key =
          std::make_tuple(Number(event, "thread_id"), type, Number(event, "nrta_seq_id"));
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

bool ParseAsyncDepth(absl::string_view text, int* depth) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0 || value > kMaxAsyncDepth) return false;
  *depth = value;
  return true;
}

namespace {

// Between two polls of a request's completion: long enough to leave the two cores to the
// runtime's workers, short beside an execution (hundreds of microseconds).
void Pause() { std::this_thread::sleep_for(std::chrono::microseconds(20)); }

// Polls until request `seq` has completed; NRT_SUCCESS, or nrta_is_completed's error.
NRT_STATUS PollUntilCompleted(nrta_seq_t seq) {
  for (;;) {
    bool done = false;
    const NRT_STATUS status = nrta_is_completed(seq, &done);
    if (status != NRT_SUCCESS || done) return status;
    Pause();
  }
}

}  // namespace

AsyncRuntime::AsyncRuntime(int core, int depth) : core_(core), depth_(depth < 1 ? 1 : depth) {}

AsyncRuntime::~AsyncRuntime() { WaitAll(); }

void AsyncRuntime::ReapLocked() {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    bool done = false;
    // seq 0: a request another thread is still scheduling.
    if (it->seq == 0 || nrta_is_completed(it->seq, &done) != NRT_SUCCESS || !done) {
      ++it;
      continue;
    }
    if (it->ret != NRT_SUCCESS && failed_ == NRT_SUCCESS) {
      failed_ = it->ret;
      failed_what_ = it->what;
    }
    it = in_flight_.erase(it);
  }
}

template <typename F>
NRT_STATUS AsyncRuntime::Schedule(nrta_xu_t xu, const std::string& what,
                                  std::vector<uint8_t> bytes, nrta_seq_t* seq, F schedule) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {  // room: fewer than depth_ requests in flight
    ReapLocked();
    if (in_flight_.size() < static_cast<size_t>(depth_)) break;
    const nrta_seq_t oldest = in_flight_.front().seq;
    lock.unlock();
    if (oldest != 0) {
      PollUntilCompleted(oldest);
    } else {
      Pause();
    }
    lock.lock();
  }
  in_flight_.emplace_back();
  const auto request = std::prev(in_flight_.end());
  request->what = what;
  request->bytes = std::move(bytes);
  for (;;) {
    nrta_seq_t scheduled = 0;
    const NRT_STATUS status = schedule(request->bytes.empty() ? nullptr : request->bytes.data(),
                                       &request->ret, &scheduled);
    if (status == NRT_SUCCESS) {
      request->seq = scheduled;
      *seq = scheduled;
      last_submitted_[xu] = std::max(last_submitted_[xu], scheduled);
      return NRT_SUCCESS;
    }
    if (status != NRT_QUEUE_FULL) {
      in_flight_.erase(request);
      return status;
    }
    // The runtime's queue was full: wait until its last completed id moves on, or has reached
    // the last request we gave it (what was full may have completed since the refusal: waiting
    // for more would wait forever).
    nrta_seq_t before = 0, now = 0;
    if (const NRT_STATUS s = nrta_get_sequence(core_, xu, 0, &before); s != NRT_SUCCESS) {
      in_flight_.erase(request);
      return s;
    }
    const nrta_seq_t last = last_submitted_[xu];
    lock.unlock();
    now = before;
    while (now == before && now < last) {
      Pause();
      if (nrta_get_sequence(core_, xu, 0, &now) != NRT_SUCCESS) break;
    }
    lock.lock();
  }
}

NRT_STATUS AsyncRuntime::Execute(nrt_model_t* model, const nrt_tensor_set_t* input,
                                 nrt_tensor_set_t* output, const std::string& what,
                                 nrta_seq_t* seq) {
  return Schedule(NRTA_XU_COMPUTE, what, {}, seq,
                  [&](const uint8_t*, NRT_STATUS* ret, nrta_seq_t* s) {
                    return nrta_execute_schedule(model, input, output, 0, ret, s);
                  });
}

NRT_STATUS AsyncRuntime::Write(nrt_tensor_t* tensor, const void* buf, size_t size,
                               const std::string& what, nrta_seq_t* seq) {
  return Schedule(NRTA_XU_TENSOR_OP, what, {}, seq,
                  [&](const uint8_t*, NRT_STATUS* ret, nrta_seq_t* s) {
                    return nrta_tensor_write(tensor, buf, 0, size, 0, ret, s);
                  });
}

NRT_STATUS AsyncRuntime::Write(nrt_tensor_t* tensor, std::vector<uint8_t> bytes,
                               const std::string& what, nrta_seq_t* seq) {
  const size_t size = bytes.size();
  return Schedule(NRTA_XU_TENSOR_OP, what, std::move(bytes), seq,
                  [&](const uint8_t* owned, NRT_STATUS* ret, nrta_seq_t* s) {
                    return nrta_tensor_write(tensor, owned, 0, size, 0, ret, s);
                  });
}

NRT_STATUS AsyncRuntime::Read(void* buf, nrt_tensor_t* tensor, size_t size,
                              const std::string& what, nrta_seq_t* seq) {
  return Schedule(NRTA_XU_TENSOR_OP, what, {}, seq,
                  [&](const uint8_t*, NRT_STATUS* ret, nrta_seq_t* s) {
                    return nrta_tensor_read(buf, tensor, 0, size, 0, ret, s);
                  });
}

NRT_STATUS AsyncRuntime::Wait(nrta_seq_t seq) {
  if (seq != 0) {
    if (const NRT_STATUS s = PollUntilCompleted(seq); s != NRT_SUCCESS) {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_ == NRT_SUCCESS) {
        failed_ = s;
        failed_what_ = "nrta_is_completed";
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ReapLocked();
  return failed_;
}

NRT_STATUS AsyncRuntime::WaitAll() {
  for (;;) {
    nrta_seq_t newest = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ReapLocked();
      if (in_flight_.empty()) return failed_;
      newest = in_flight_.back().seq;
    }
    // Both queues' requests: wait for the newest, then go round for what is left.
    if (newest == 0) {
      Pause();
    } else if (const NRT_STATUS s = PollUntilCompleted(newest); s != NRT_SUCCESS) {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_ == NRT_SUCCESS) {
        failed_ = s;
        failed_what_ = "nrta_is_completed";
      }
      return failed_;
    }
  }
}

std::string AsyncRuntime::failed_what() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_what_;
}

}  // namespace examples
