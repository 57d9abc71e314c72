// The summary table of a capture, in the manner of PyTorch's prof.key_averages().table(): one
// row per framework range name (aten::mul, rmsnorm), and one per libnrt function for runtime
// calls outside any range (all of them, in a process without annotations), with
//
//   Self CPU         host wall time of the rows' ranges minus that of their direct child ranges
//   CPU total        host wall time of the rows' ranges (a range inside a range of the same
//                    name counts once, within the outer one)
//   Self NEURON      device time of the executions and host-initiated transfers whose runtime
//                    call's innermost range is one of the row's ranges
//   Self NEURON %    of the capture's Self NEURON total
//   NEURON total     device time under the row's ranges and their descendants (each device
//                    event once per row, even when nested ranges share a name)
//   NEURON time avg  NEURON total / # of Calls
//   # of Calls       ranges (or runtime calls) of that name
//   Queue wait avg   (captures with async work only) the average time the row's async device
//                    work waited in its queue: from its schedule call's return to its start
//
// A collective's running (cc_running) is device time of the row that scheduled it; its wait
// for the other ranks (cc_exec_barrier) is a row of its own, "collective wait (AllReduce)" (by
// collective; its Self NEURON and NEURON total the waiting, # of Calls the barriers), in no
// other row's time, and a line under the table says how much of the total it is.
//
// and the totals, the uncorrelated device time and the events dropped. Written by SummarySink
// as summary.txt, summary.csv and summary.json; `nrtprof summary DIR` reads summary.json back
// (ParseSummaryJson) to sort and print it again.
//
// Functions are pure and thread-safe; SummarySink keeps no state.
#ifndef NRTPROF_TRACE_SUMMARY_H_
#define NRTPROF_TRACE_SUMMARY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trace/trace_model.h"
#include "trace/trace_sink.h"

namespace nrtprof::daemon {

struct SummaryRow {
  std::string name;
  uint64_t self_cpu_ns = 0;
  uint64_t cpu_total_ns = 0;
  uint64_t self_device_ns = 0;
  uint64_t device_total_ns = 0;
  uint64_t calls = 0;
  // The async API's executions and transfers charged to the row (as Self NEURON): their waits
  // from the schedule call's return to the start on the device, summed, and how many.
  uint64_t queue_wait_ns = 0;
  uint64_t queue_waits = 0;
};

// One process of the capture, for the table's header.
struct SummaryProcess {
  uint32_t pid = 0;
  std::string host;     // empty if the shim did not say
  std::string command;  // its command line, arguments joined by spaces
  std::string job;      // ProcessTrace::job: NRTPROF_JOB or NEURON_RT_ROOT_COMM_ID; empty if none
};

struct Summary {
  std::string capture_id;
  TriggerReason trigger;  // the Trace's: why a rule took the capture, if one did
  // What was captured, where and when: the header of summary.txt.
  std::vector<SummaryProcess> processes;  // by pid
  uint64_t events = 0;                    // ranges, runtime calls and device events
  // The span from the first event's start to the last one's end, on CLOCK_REALTIME (0 if the
  // capture has no event or its wall clock is unknown), and its length.
  uint64_t window_start_unix_ns = 0;
  uint64_t window_ns = 0;
  std::vector<SummaryRow> rows;  // in no particular order; FormatSummary sorts
  uint64_t self_cpu_total_ns = 0;
  uint64_t self_device_total_ns = 0;
  // Device executions and host-initiated transfers no runtime call could be matched to: in
  // no row.
  uint64_t uncorrelated_device_events = 0;
  uint64_t uncorrelated_device_ns = 0;
  DropCounts drops;  // summed over the processes
  // Processes whose stream ended without their final batch: their last events are missing,
  // uncounted (ProcessTrace::cut_off).
  uint64_t cut_off_processes = 0;
  // What the shims could not do, "pid PID (EXECUTABLE): NOTICE" (ProcessTrace::notices).
  std::vector<std::string> notices;
  // The async API (nrta_*): its device work (executions and host-initiated transfers); its
  // executions whose schedule call is in the capture, and of those the ones whose queue was
  // empty when the call returned (no earlier request of the queue in flight: the device was
  // waiting for the host). The lines under the table about them are printed only when
  // async_device_events != 0.
  uint64_t async_device_events = 0;
  uint64_t async_executions = 0;
  uint64_t async_executions_queue_empty = 0;
  // Per NeuronCore (nc_idx), the time it had work (top-level executions and transfers, work
  // that overlaps counted once), summed over the processes.
  std::map<int32_t, uint64_t> device_busy_ns;
  // The async API's completion polls (nrta_is_completed, nrta_get_sequence): how many the
  // program made, and how many of them the shim recorded (the polls that saw something new;
  // the rest are counted on the next recorded one, ApiCall::polls, and not timed). A call row
  // of theirs counts them all.
  uint64_t completion_polls = 0;
  uint64_t completion_polls_recorded = 0;
};

enum class SummarySortKey { kSelfDevice, kDeviceTotal, kSelfCpu, kCpuTotal, kCalls, kName };
enum class SummaryFormat { kText, kCsv, kJson };

// "self_device" (the default), "device_total", "self_cpu", "cpu_total", "calls", "name".
absl::StatusOr<SummarySortKey> ParseSummarySortKey(absl::string_view key);
// "text", "csv", "json".
absl::StatusOr<SummaryFormat> ParseSummaryFormat(absl::string_view format);

Summary ComputeSummary(const Trace& trace);

// ComputeSummary of a capture given a process at a time (TraceStream): Add each process's
// Trace, then Finish with the capture's Trace without its processes. The summary is the one
// ComputeSummary makes of the whole Trace.
class SummaryBuilder {
 public:
  void Add(const Trace& trace);
  Summary Finish(const Trace& trace);

 private:
  Summary summary_;
  std::map<std::string, SummaryRow> rows_;
  uint64_t first_ns_ = UINT64_MAX;  // the events' span
  uint64_t last_ns_ = 0;
};

// Called for each device event that counts as device time (a top-level execution or transfer)
// with the row its self NEURON time is charged to; "" for an uncorrelated one.
using DeviceTimeCharged = std::function<void(const DeviceEvent&, const std::string& row)>;
// The summary of one process alone (ComputeSummary of a trace holding only it), telling
// `charged_to` (if set) where each device event went: the fleet store's rows by op and model.
Summary ComputeProcessSummary(const ProcessTrace& process,
                              const DeviceTimeCharged& charged_to = nullptr);

// A CSV field as summary.csv writes it (quoted where needed), for other writers of such rows
// (nrtprof diff). Their JSON strings are common/json_text.h's.
std::string CsvField(const std::string& s);

// Rows sorted by `sort` (numbers descending, names ascending; ties by name), the first
// `limit` of them if limit > 0. Text: the fixed-width table with its closing lines; csv: a
// header and the rows, times in ns; json: everything, times in ns (what ParseSummaryJson reads).
std::string FormatSummary(const Summary& summary, SummarySortKey sort = SummarySortKey::kSelfDevice,
                          SummaryFormat format = SummaryFormat::kText, int limit = 0);

// One row's cells as the text table shows them: the name (whole), Self CPU, CPU total, Self
// NEURON, Self NEURON %, NEURON total, NEURON time avg, with async work in the capture
// (summary.async_device_events != 0) Queue wait avg, and # of Calls (nrtprof report shows them
// the same way).
std::vector<std::string> SummaryCells(const Summary& summary, const SummaryRow& row);

// Reads FormatSummary's json back. INVALID_ARGUMENT, saying where, for anything else.
absl::StatusOr<Summary> ParseSummaryJson(absl::string_view json);

// "123.456us", "1.234ms", "2.000s": PyTorch's profiler's way.
std::string FormatDuration(uint64_t ns);

// Writes `summary` as summary.txt, summary.csv and summary.json, each atomically.
class SummarySink : public TraceSink {
 public:
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override;
  // Needs only the summary, which the stream's Finish is given.
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_SUMMARY_H_
