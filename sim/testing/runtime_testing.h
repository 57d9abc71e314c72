// Helpers for tests that drive libnrt.so.1 through its public C API: model bytes from text,
// tensors from float values, and the system trace's JSON as a list of events.
#ifndef NRTPROF_SIM_TESTING_RUNTIME_TESTING_H_
#define NRTPROF_SIM_TESTING_RUNTIME_TESTING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "nrt/nrt.h"

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
  std::vector<google::protobuf::Struct> events;
  std::vector<google::protobuf::Struct> cores;
  // Events of one type ("nc_exec_running", "nc_engine_op", "dma_transfer",
  // "timestamp_sync_point").
  std::vector<google::protobuf::Struct> OfType(const std::string& type) const;
};

// nrt_sys_trace_fetch_events(all cores) parsed; fails the current test if it is not JSON.
FetchedTrace Fetch();

double Num(const google::protobuf::Struct& s, const std::string& key);
std::string Str(const google::protobuf::Struct& s, const std::string& key);

}  // namespace nrtsim::testing

#endif  // NRTPROF_SIM_TESTING_RUNTIME_TESTING_H_
