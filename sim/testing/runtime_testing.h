// Helpers for tests that drive libnrt.so.1 through its public C API: model bytes from text,
// tensors from float values, and the system trace's JSON as a list of events.
#ifndef NRTPROF_SIM_TESTING_RUNTIME_TESTING_H_
#define NRTPROF_SIM_TESTING_RUNTIME_TESTING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/testing/struct_fields.h"
#include "google/protobuf/struct.pb.h"
#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"

namespace nrtsim::testing {

// Compiles model text to model-file bytes; fails the current test on a parse error.
std::string ModelBytes(const std::string& text);

// Loads model text on `vnc`; returns nullptr (after a test failure) on error.
nrt_model_t* Load(const std::string& text, int vnc);

nrt_tensor_t* DeviceFloats(int vnc, const std::vector<float>& values, const char* name);
std::vector<float> ReadFloats(const nrt_tensor_t* tensor);

// A tensor set holding the named tensors.
nrt_tensor_set_t* Set(const std::map<std::string, nrt_tensor_t*>& tensors);

struct FetchedTrace {
  std::string json;  // the document as fetched
  std::vector<google::protobuf::Struct> events;
  // Events of one event_type ("device_exec", "tensor_write", "timestamp_sync", ...), and of
  // one phase ("start", "stop", "instant") when `phase` is not empty.
  std::vector<google::protobuf::Struct> OfType(const std::string& type,
                                               const std::string& phase = "") const;
};

// nrt_sys_trace_fetch_events (all cores, or per `options`) parsed; fails the current test if
// it is not JSON with an "events" array.
FetchedTrace Fetch(const nrt_sys_trace_fetch_options_t* options = nullptr);

// Empty if `json` has the real runtime's system-trace shape exactly: {"events":[...],
// "data_version":2}, compact, each event's keys in the real order (event_type, phase, id,
// nc_idx, nc_local_id, tracking_id, thread_id, worker_gid, data, timestamp_ns, and
// nrta_seq_id only when present), `data` a flat object; else what is wrong and where.
std::string RealShapeError(const std::string& json);

// One field of an event (common/testing/struct_fields.h).
using ::nrtprof::testing::Num;
using ::nrtprof::testing::Str;

}  // namespace nrtsim::testing

#endif  // NRTPROF_SIM_TESTING_RUNTIME_TESTING_H_
