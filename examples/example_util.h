// Shared plumbing of the example programs: fail-fast status checks, compiling a model from its
// text description (what neuronx-cc would do for a real program), bf16 host conversions and
// measuring device time through the runtime's public system-trace API.
//
// Not thread-safe unless stated; the examples call these from main() or per thread on
// objects each thread owns.
#ifndef NRTPROF_EXAMPLES_EXAMPLE_UTIL_H_
#define NRTPROF_EXAMPLES_EXAMPLE_UTIL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nrt/nrt.h"

namespace examples {

// Exits the program with "PROGRAM: WHAT failed with status N" unless status is NRT_SUCCESS.
// Thread-safe.
void Check(NRT_STATUS status, const std::string& what);

// Compiles `text` (docs/model_format.md) and loads it on NeuronCore `vnc`; exits on error.
nrt_model_t* LoadModelText(const std::string& text, int vnc);

// Compiles `text` into the bytes nrt_load() takes; the error names the line at fault. For
// callers that must not exit (a Python extension module raises instead).
absl::StatusOr<std::string> CompileModelText(absl::string_view text);

// The model text of one eager op, "out = OP(a[, b][, ATTRS])", with inputs `a` (and `b`) of
// `input_shapes` ("[4,512]") and output `out`: what a framework without a graph compiler has
// compiled for each op it dispatches. rmsnorm's naive variant and the Python framework module
// (nrt_framework.cc) both build their models with it, so the two run the same models.
std::string EagerOpModelText(const std::string& model_name, const std::string& op,
                             const std::string& dtype, const std::vector<std::string>& input_shapes,
                             const std::string& output_shape, const std::string& attrs = "");

// Allocates a device tensor on `vnc` and names it; exits on error.
nrt_tensor_t* DeviceTensor(int vnc, size_t bytes, const char* name);

// Host element conversions for the tensor's dtype ("bf16" or "fp32").
std::vector<uint8_t> Encode(const std::vector<float>& values, const std::string& dtype);
std::vector<float> Decode(const std::vector<uint8_t>& bytes, const std::string& dtype);
size_t ElementSize(const std::string& dtype);

// Device time spent between Start() and Stop(), from nrt_sys_trace events: the executions
// (device_exec spans) and the host-initiated transfers (tensor_read/tensor_write spans).
struct DeviceTime {
  uint64_t execution_ns = 0;
  uint64_t executions = 0;
  uint64_t transfer_ns = 0;
  uint64_t transfers = 0;
  uint64_t overwritten = 0;  // events the ring buffers lost; the totals are then too low
  uint64_t total_ns() const { return execution_ns + transfer_ns; }
};

// Sums system trace documents as nrt_sys_trace_fetch_events() returns them, one fetch after
// another: a span whose start came in one document and its stop in the next counts once. So a
// program can fetch as it goes, with a small ring, and keep only the totals.
class SystemTraceSum {
 public:
  // Errors say what is wrong with the JSON; nothing of it is counted then.
  absl::Status Add(absl::string_view json);
  const DeviceTime& total() const { return total_; }
  const std::vector<DeviceTime>& per_core() const { return per_core_; }  // indexed by core

 private:
  DeviceTime total_;
  std::vector<DeviceTime> per_core_;
  std::map<size_t, std::deque<double>> exec_starts_;               // per core
  std::map<std::pair<double, std::string>, double> call_starts_;  // per thread and type
  std::map<size_t, uint64_t> next_local_id_;                       // per core
};

// One document, summed; with `per_core`, also per NeuronCore (indexed by core).
absl::StatusOr<DeviceTime> SumSystemTrace(absl::string_view json,
                                          std::vector<DeviceTime>* per_core = nullptr);

class DeviceTimer {
 public:
  // Starts a system trace with room for `events_per_core` events per NeuronCore.
  explicit DeviceTimer(uint64_t events_per_core = kRingEvents);
  // The ring a program that Poll()s every kPollEvery iterations needs: constant, whatever the
  // number of iterations (a ring sized for every iteration grew the examples to gigabytes).
  // Fetching often also hands the profiler the device events soon after their calls.
  static constexpr uint64_t kRingEvents = 16384;
  static constexpr int kPollEvery = 8;
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  ~DeviceTimer();

  // Fetches what the runtime recorded since the last fetch and adds it up.
  void Poll();
  // Fetches the rest, stops the capture and returns the sums; with `per_core`, also per
  // NeuronCore (indexed by core). Call once.
  DeviceTime Stop(std::vector<DeviceTime>* per_core = nullptr);

 private:
  bool stopped_ = false;
  SystemTraceSum sum_;
};

}  // namespace examples

#endif  // NRTPROF_EXAMPLES_EXAMPLE_UTIL_H_
