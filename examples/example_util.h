// Shared plumbing of the example programs: fail-fast status checks, compiling a model from its
// text description (what neuronx-cc would do for a real program), bf16 host conversions,
// measuring device time through the runtime's public system-trace API, and driving the explicit
// asynchronous API (nrt/nrt_async.h) with a bounded number of requests in flight.
//
// Not thread-safe unless stated; the examples call these from main() or per thread on
// objects each thread owns.
#ifndef NRTPROF_EXAMPLES_EXAMPLE_UTIL_H_
#define NRTPROF_EXAMPLES_EXAMPLE_UTIL_H_

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"

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
  std::map<size_t, std::deque<double>> exec_starts_;  // per core
  // per thread, type and nrta_seq_id (0 for a synchronous call)
  std::map<std::tuple<double, std::string, double>, double> call_starts_;
  std::map<size_t, uint64_t> next_local_id_;  // per core
};

// One document, summed; with `per_core`, also per NeuronCore (indexed by core).
absl::StatusOr<DeviceTime> SumSystemTrace(absl::string_view json,
                                          std::vector<DeviceTime>* per_core = nullptr);

class DeviceTimer {
 public:
  // Starts a system trace with room for `events_per_core` events per NeuronCore, and fetches
  // once (what the first fetch costs is then paid here, not in what the program times).
  explicit DeviceTimer(uint64_t events_per_core = kRingEvents);
  // The ring a program that Poll()s every kPollEvery iterations needs: constant, whatever the
  // number of iterations (a ring sized for every iteration grew the examples to gigabytes).
  // Fetching often also hands the profiler the device events soon after their calls, and keeps
  // each fetch short: shorter than the work an asynchronous program keeps queued (every 8
  // iterations, rmsnorm naive --async 4 left the device idle while it parsed: 2.7 ms per
  // iteration against 2.2 ms fetching every iteration).
  static constexpr uint64_t kRingEvents = 16384;
  static constexpr int kPollEvery = 1;
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

// Parses an --async flag's value: a whole number from 0 (synchronous) to kMaxAsyncDepth.
constexpr int kMaxAsyncDepth = 4096;
bool ParseAsyncDepth(absl::string_view text, int* depth);

// The explicit asynchronous API driven the way PyTorch-native Neuron drives it: executions
// scheduled on the compute execution unit's queue, transfers on the tensor-op execution unit's
// queue 0, each call returning at once, at most `depth` requests in flight (scheduled and not
// yet seen complete) across both. NRT_QUEUE_FULL (the runtime's queue has less room than
// `depth`) is met by waiting until that queue completes one more request (nrta_get_sequence),
// then scheduling again. Waits poll nrta_is_completed.
//
// Ordering is the caller's: requests of one queue run in order (so executions on one core see
// each other's outputs), but the two queues are not ordered against each other, so an
// execution that reads a tensor must be scheduled only after the write of it has completed
// (Wait), a read of an execution's output only after the execution has completed, and a write
// must not land in a tensor a queued execution still reads.
//
// A request's status (`ret`) is checked when it is seen complete; the first failure is kept
// and returned by Wait/WaitAll from then on. Thread-safe: the waits poll without the lock.
class AsyncRuntime {
 public:
  AsyncRuntime(int core, int depth);
  ~AsyncRuntime();  // waits for what is in flight (its buffers are ours)
  AsyncRuntime(const AsyncRuntime&) = delete;
  AsyncRuntime& operator=(const AsyncRuntime&) = delete;

  // Each schedules one request once there is room and returns the schedule call's status (an
  // error is the caller's to report, naming `what`); `*seq` names the request.
  NRT_STATUS Execute(nrt_model_t* model, const nrt_tensor_set_t* input, nrt_tensor_set_t* output,
                     const std::string& what, nrta_seq_t* seq);
  // `buf` must stay as it is until the request completes.
  NRT_STATUS Write(nrt_tensor_t* tensor, const void* buf, size_t size, const std::string& what,
                   nrta_seq_t* seq);
  // The same with a buffer the request owns until it completes.
  NRT_STATUS Write(nrt_tensor_t* tensor, std::vector<uint8_t> bytes, const std::string& what,
                   nrta_seq_t* seq);
  // `buf` is filled when the request completes (Wait for it).
  NRT_STATUS Read(void* buf, nrt_tensor_t* tensor, size_t size, const std::string& what,
                  nrta_seq_t* seq);

  // Waits until request `seq` (0: none) has completed. NRT_SUCCESS, or the status of the first
  // request seen failing (failed_what() names it).
  NRT_STATUS Wait(nrta_seq_t seq);
  // Waits until every request scheduled so far has completed; as Wait.
  NRT_STATUS WaitAll();
  std::string failed_what() const;
  int depth() const { return depth_; }

 private:
  struct Request {
    nrta_seq_t seq = 0;
    NRT_STATUS ret = NRT_FAILURE;  // written by the runtime when the request completes
    std::string what;
    std::vector<uint8_t> bytes;  // an owned write's buffer
  };
  // Schedules with `schedule(ret, seq)` once there is room, retrying after NRT_QUEUE_FULL.
  template <typename F>
  NRT_STATUS Schedule(nrta_xu_t xu, const std::string& what, std::vector<uint8_t> bytes,
                      nrta_seq_t* seq, F schedule);
  // Drops the requests that have completed, keeping the first failure. Under mu_.
  void ReapLocked();

  const int core_, depth_;
  mutable std::mutex mu_;
  std::list<Request> in_flight_;  // in schedule order; a list: `ret` must not move
  NRT_STATUS failed_ = NRT_SUCCESS;
  std::string failed_what_;
  std::map<nrta_xu_t, nrta_seq_t> last_submitted_;  // per execution unit (queue 0 of each)
};

}  // namespace examples

#endif  // NRTPROF_EXAMPLES_EXAMPLE_UTIL_H_
