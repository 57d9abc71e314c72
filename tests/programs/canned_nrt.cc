// A stand-in Neuron runtime (a shared library exporting the nrt_* functions a small program
// and the profiler's shim use) whose system trace is made of documents written by hand from
// the public facts about the real runtime's JSON, independently of the simulator's writer.
// It lets the end-to-end test put exactly that shape through the shim and the daemon.
//
// Facts, and where they come from:
//   [H] nrt/nrt_sys_trace.h (aws-neuron-sdk, src/libnrt/include/nrt/nrt_sys_trace.h): the
//       functions and their signatures; a fetch returns a NUL-terminated JSON document freed
//       with nrt_sys_trace_buffer_free; fetched events cannot be fetched again.
//   [S] public notes on the runtime's JSON serializer: {"events":[...],"data_version":2},
//       compact; event keys in the order of kEvent below; data always an object.
//   [T] the same notes' catalogue: snake_case types; device_exec start {device_core_idx,
//       exec_id, nc_timestamp_ns, model_id} and stop {nc_timestamp_ns}; tensor_write
//       {tensor_id, size}; dmem_buf_copyin {mem_type, mem_handle, offset, size};
//       timestamp_sync {exec_id, nc_timestamp_ns, cpu_timestamp_ns}; nrt_load stop
//       {model_id}; cc_exec start {gid, op_id, nc_timestamp_ns, exec_id, algorithm}; a
//       device timestamp is the event's timestamp_ns where the data has one, else the host's
//       wall clock.
// What is ours: the device clock (CLOCK_MONOTONIC + 1000 s), the sleeps standing for device
// work, and which phase of a span carries its data (the start).
//
// With CANNED_NRT_MALFORMED=1 in the environment, every document holding an execution is cut
// short (its last byte removed): what a runtime that broke its output would send.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"

struct nrt_model {
  uint64_t id;
};
struct nrt_tensor {
  uint64_t id;
  size_t size;
};
struct nrt_sys_trace_config {
  uint64_t max_events_per_nc;
};

namespace {

// [S] one event, keys in the real order; [S] worker_gid -1 when unknown.
constexpr char kEvent[] =
    "{\"event_type\":\"%s\",\"phase\":\"%s\",\"id\":%llu,\"nc_idx\":0,\"nc_local_id\":%llu,"
    "\"tracking_id\":%llu,\"thread_id\":%llu,\"worker_gid\":0,\"data\":%s,"
    "\"timestamp_ns\":%llu}";
constexpr uint64_t kDeviceOffsetNs = 1000000000000ull;  // the device clock reads 1000 s more

std::mutex mu;
bool capturing = false;
bool ever_started = false;
std::string pending;  // events recorded since the last fetch, comma-separated
uint64_t next_id = 1, next_local_id = 1, next_exec_id = 1, next_model_id = 1,
         next_tensor_id = 1;

using ull = unsigned long long;

uint64_t Clock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
uint64_t Wall() { return Clock(CLOCK_REALTIME); }
uint64_t Device() { return Clock(CLOCK_MONOTONIC) + kDeviceOffsetNs; }

void Record(const char* type, const char* phase, const std::string& data, uint64_t ts) {
  std::lock_guard<std::mutex> lock(mu);
  if (!capturing) return;
  char event[1024];
  const uint64_t id = next_id++;
  snprintf(event, sizeof(event), kEvent, type, phase, static_cast<ull>(id),
           static_cast<ull>(next_local_id++), static_cast<ull>(id + 100000),
           static_cast<ull>(gettid()), data.c_str(), static_cast<ull>(ts));
  if (!pending.empty()) pending.push_back(',');
  pending += event;
}

std::string Data(const char* format, ull a = 0, ull b = 0, ull c = 0) {
  char out[512];
  snprintf(out, sizeof(out), format, a, b, c);
  return out;
}

void RecordSync() {
  const uint64_t device = Device();
  const uint64_t wall = Wall();
  Record("timestamp_sync", "instant",
         Data("{\"exec_id\":0,\"nc_timestamp_ns\":%llu,\"cpu_timestamp_ns\":%llu}", device, wall),
         device);
}

// A host-to-device copy of `bytes` into device memory `handle`, taking `us` microseconds.
void CopyIn(uint64_t handle, uint64_t bytes, int us) {
  Record("dmem_buf_copyin", "start",
         Data("{\"mem_type\":1,\"mem_handle\":%llu,\"offset\":0,\"size\":%llu}", handle, bytes),
         Wall());
  usleep(us);
  Record("dmem_buf_copyin", "stop", "{}", Wall());
}

}  // namespace

extern "C" {

NRT_STATUS nrt_init(nrt_framework_type_t, const char*, const char*) { return NRT_SUCCESS; }
void nrt_close() {
  std::lock_guard<std::mutex> lock(mu);
  capturing = false;
  pending.clear();
}

NRT_STATUS nrt_load(const void* bytes, size_t size, int32_t, int32_t, nrt_model_t** model) {
  if (bytes == nullptr || model == nullptr) return NRT_INVALID;
  Record("nrt_load", "start", "{}", Wall());
  CopyIn(0x1000, size, 300);
  auto* m = new nrt_model{next_model_id++};
  Record("nrt_load", "stop", Data("{\"model_id\":%llu}", m->id), Wall());
  *model = m;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_unload(nrt_model_t* model) {
  delete model;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_execute(nrt_model_t* model, const nrt_tensor_set_t*, nrt_tensor_set_t*) {
  if (model == nullptr) return NRT_INVALID;
  const uint64_t exec_id = next_exec_id++;
  const uint64_t start = Device();
  // [T] a collective op alongside: a type the profiler does not draw.
  Record("cc_exec", "start",
         Data("{\"gid\":0,\"op_id\":1,\"nc_timestamp_ns\":%llu,\"exec_id\":%llu,"
              "\"algorithm\":\"ring\"}",
              start, exec_id),
         start);
  Record("device_exec", "start",
         Data("{\"device_core_idx\":0,\"exec_id\":%llu,\"nc_timestamp_ns\":%llu,"
              "\"model_id\":%llu}",
              exec_id, start, model->id),
         start);
  usleep(2000);
  const uint64_t stop = Device();
  Record("device_exec", "stop", Data("{\"nc_timestamp_ns\":%llu}", stop), stop);
  return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t, int, size_t size, const char*,
                               nrt_tensor_t** tensor) {
  if (tensor == nullptr) return NRT_INVALID;
  *tensor = new nrt_tensor{next_tensor_id++, size};
  return NRT_SUCCESS;
}

void nrt_tensor_free(nrt_tensor_t** tensor) {
  if (tensor == nullptr) return;
  delete *tensor;
  *tensor = nullptr;
}

NRT_STATUS nrt_tensor_write(nrt_tensor_t* tensor, const void*, size_t, size_t size) {
  if (tensor == nullptr) return NRT_INVALID;
  Record("tensor_write", "start", Data("{\"tensor_id\":%llu,\"size\":%llu}", tensor->id, size),
         Wall());
  CopyIn(tensor->id, size, 500);
  Record("tensor_write", "stop", "{}", Wall());
  return NRT_SUCCESS;
}

NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t** set) {
  static int dummy;
  if (set == nullptr) return NRT_INVALID;
  *set = reinterpret_cast<nrt_tensor_set_t*>(&dummy);
  return NRT_SUCCESS;
}
void nrt_destroy_tensor_set(nrt_tensor_set_t** set) {
  if (set != nullptr) *set = nullptr;
}
NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t*, const char*, nrt_tensor_t*) {
  return NRT_SUCCESS;
}

// --- nrt_sys_trace.h [H] ---

NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t** options) {
  if (options == nullptr) return NRT_INVALID;
  *options = new nrt_sys_trace_config{32768};
  return NRT_SUCCESS;
}
void nrt_sys_trace_config_free(nrt_sys_trace_config_t* options) { delete options; }
void nrt_sys_trace_config_set_max_events_per_nc(nrt_sys_trace_config_t* options, uint64_t n) {
  if (options != nullptr) options->max_events_per_nc = n;
}

NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t*) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (capturing) return NRT_INVALID;
    capturing = ever_started = true;
    next_local_id = 1;
  }
  RecordSync();
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_stop() {
  std::lock_guard<std::mutex> lock(mu);
  if (!capturing) return NRT_INVALID;
  capturing = false;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_fetch_events(char** buffer, size_t* written_size,
                                      const nrt_sys_trace_fetch_options_t*) {
  if (buffer == nullptr || written_size == nullptr) return NRT_INVALID;
  RecordSync();
  std::string doc;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!ever_started) return NRT_INVALID;
    doc = "{\"events\":[" + pending + "],\"data_version\":2}";  // [S]
    const bool has_execution = pending.find("\"device_exec\"") != std::string::npos;
    pending.clear();
    const char* malformed = getenv("CANNED_NRT_MALFORMED");
    if (has_execution && malformed != nullptr && strcmp(malformed, "1") == 0) doc.pop_back();
  }
  char* out = static_cast<char*>(malloc(doc.size() + 1));
  if (out == nullptr) return NRT_RESOURCE;
  memcpy(out, doc.c_str(), doc.size() + 1);
  *buffer = out;
  *written_size = doc.size();
  return NRT_SUCCESS;
}

void nrt_sys_trace_buffer_free(char* buffer) { free(buffer); }

}  // extern "C"
