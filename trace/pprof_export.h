// A capture's device and host time by stack, for pprof-speaking tools (`nrtprof export`,
// issue 42): a pprof Profile (proto/pprof/profile.proto) or folded stacks for flamegraph tools.
//
// Each stack, leaf first:
//   engine op "mul [vector]"   when the capture holds the execution's ops (device profile)
//   model                       its name, else "model HASH"; a transfer's own name ("dma_h2d")
//   runtime call                "nrt_execute", "nrta_execute_schedule", "nrt_tensor_write", ...
//   framework ranges            innermost first ("ProfilerStep#N" as "ProfilerStep*", the row
//                               the summary table has for every step; a call made while a
//                               step ran is under "ProfilerStep*" even on a thread whose ranges
//                               hold no step, as the summary charges it to the steps' row)
//   host call stack             with `--stacks N`, the frames the shim unwound, innermost first
// with the values
//   device_time (nanoseconds)   what the summary (trace/summary.h) charges as Self NEURON: the
//                               top-level executions and host-initiated transfers, found by
//                               the summary itself (ComputeProcessSummary's charged_to), so that
//                               a range's cumulative device time is its row's NEURON total to
//                               the nanosecond. An execution with engine ops is split among
//                               them by their durations (scaled down, to the nanosecond, when
//                               engines ran at once); what no op covers stays on the model.
//   host_time (nanoseconds)     each runtime call's duration, on the stack ending at the call
//   executions (count)          one per execution, on its model's frame
// A collective's wait for the other ranks is its summary row alone ("collective wait
// (AllReduce)"); its running is device time under the op, as the summary has it.
// And the labels host, pid, tid (numbers), thread (its name, when known) and neuron_core (its
// index as text: pprof readers drop a number label of 0). Device work no
// runtime call could be matched to is under "(no runtime call)".
//
// The profile's time and duration are the capture's window as the summary has it (the first
// event's start to the last one's end, on the wall clock), or what SetWindow says (the fleet
// store's minutes). ForEachStack gives the stacks to whatever else draws them (the report's
// flame graph): the one place a stack is made is Add.
//
// Pure functions; thread-compatible.
#ifndef NRTPROF_TRACE_PPROF_EXPORT_H_
#define NRTPROF_TRACE_PPROF_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "proto/pprof/profile.pb.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

// The stacks of one or more Traces, merged: Add each (each host's part of a merged capture,
// with its host), then write.
class StackProfile {
 public:
  // The values of each stack, in this order.
  enum Value { kDeviceNs = 0, kHostNs = 1, kExecutions = 2, kValues = 3 };

  StackProfile();
  StackProfile(const StackProfile&) = delete;  // its index points at its own samples
  StackProfile& operator=(const StackProfile&) = delete;

  // Adds every process of `trace`. `host`: the processes' host when they do not name one
  // (a merged capture's part); empty to leave it to them.
  void Add(const Trace& trace, const std::string& host = "");

  // One stack's values from elsewhere than a Trace (the fleet store's sums): `stack` leaf
  // first; host and thread empty, and nc_idx -1, for none.
  void AddStack(const std::vector<std::string>& stack, const std::string& host, uint32_t pid,
                uint32_t tid, const std::string& thread, int32_t nc_idx, int64_t device_ns,
                int64_t host_ns, int64_t executions);

  // The window the profile covers, instead of its events' span: its start on the wall clock
  // (Unix ns) and its length (the fleet store's minutes up to now).
  void SetWindow(int64_t start_unix_ns, int64_t duration_ns);

  // Every stack once with its values (the same stack of several threads, cores and processes
  // summed), in no particular order: `frames` leaf first, a host frame as its function alone
  // (the call sites in one function are one frame, as pprof's functions and folded stacks have
  // them). The views last as long as the profile.
  void ForEachStack(absl::FunctionRef<void(const std::vector<std::string_view>& frames,
                                           int64_t device_ns, int64_t host_ns, int64_t executions)>
                        fn) const;

  // The profile: sample types device_time, host_time, executions; device_time the default;
  // time_nanos and duration_nanos the window.
  perftools::profiles::Profile ToPprof() const;

  // Folded stacks, root first, one "frame;frame;frame DEVICE_NS" line per stack with device
  // time (labels merged), sorted; a ';' or a line break in a frame's name becomes ' '.
  std::string ToCollapsed() const;

  // Sums over every sample, of each value.
  uint64_t Total(Value v) const { return totals_[v]; }
  size_t samples() const { return samples_.size(); }

 private:
  struct Sample {
    std::vector<uint32_t> stack;  // frame ids (into frames_), leaf first
    uint32_t host = 0;            // strings_ ids; 0: none
    uint32_t thread = 0;
    uint32_t pid = 0;
    uint32_t tid = 0;
    int32_t nc_idx = -1;          // -1: none
    int64_t values[kValues] = {0, 0, 0};
  };
  struct SampleKey {
    const std::vector<uint32_t>* stack;
    uint32_t host, thread, pid, tid;
    int32_t nc_idx;
  };
  struct KeyHash {
    const std::vector<Sample>* samples;
    using is_transparent = void;
    size_t operator()(uint32_t i) const;
    size_t operator()(const SampleKey& k) const;
  };
  struct KeyEq {
    const std::vector<Sample>* samples;
    using is_transparent = void;
    bool operator()(uint32_t a, uint32_t b) const;
    bool operator()(const SampleKey& a, uint32_t b) const;
    bool operator()(uint32_t a, const SampleKey& b) const { return (*this)(b, a); }
  };

  uint32_t Intern(std::string_view text);
  void AddValues(const SampleKey& key, int64_t device_ns, int64_t host_ns, int64_t executions);
  void AddProcess(const ProcessTrace& p, const std::string& host);

  std::vector<std::string> strings_;                     // [0] = ""
  absl::flat_hash_map<std::string, uint32_t> string_ids_;
  std::vector<Sample> samples_;
  absl::flat_hash_set<uint32_t, KeyHash, KeyEq> sample_index_;
  uint64_t totals_[kValues] = {0, 0, 0};
  uint64_t first_ns_ = UINT64_MAX;  // the events' span, for the profile's time and duration
  uint64_t last_ns_ = 0;
  int64_t realtime_offset_ns_ = 0;
  bool window_set_ = false;  // SetWindow's, in place of the span
  int64_t window_start_unix_ns_ = 0;
  int64_t window_ns_ = 0;
};

// `bytes` as a gzip file (what `pprof` and Pyroscope take as FILE.pb.gz).
std::string Gzip(const std::string& bytes);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_PPROF_EXPORT_H_
