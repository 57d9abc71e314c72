// Always-on metrics in Prometheus's text exposition format (version 0.0.4), for `nrtprofd
// --metrics_listen`: counters folded from the decoded windows of the flight recorder
// (CollectorCore::FoldMetrics), and gauges from the daemon's status at each scrape.
//
//   nrtprof_runtime_calls_total{function,status}            libnrt calls by function and status
//   nrtprof_model_executions_total{pid,executable,model}    nrt_execute calls (repeat counted)
//   nrtprof_model_device_seconds{pid,executable,model}      histogram of executions' device time
//   nrtprof_op_calls_total{op}, nrtprof_op_host_seconds_total{op},
//   nrtprof_op_device_seconds_total{op}                     the key_averages rows: self CPU and
//                                                           self NEURON time by framework op
//   nrtprof_uncorrelated_device_seconds_total               device time no call was matched to
//   nrtprof_executions_held_by_program_total{pid,executable}
//                                                           executions folded before their device
//                                                           events came: the program runs the
//                                                           runtime's system trace itself
//   nrtprof_collective_wait_seconds_total{pid,executable,rank}, nrtprof_collectives_total{...}
//                                                           each rank's wait for the other ranks
//                                                           (the collectives' cc_exec_barrier) and
//                                                           its collectives (barriers); rank from
//                                                           its command line (`--rank N`, ...;
//                                                           RankFromCommandLine), else "unknown"
//   nrtprof_events_received_total, nrtprof_events_dropped_total{reason},
//   nrtprof_events_dropped_by_lane_total{lane}, nrtprof_connected_processes,
//   nrtprof_flight_recorder_{bytes,batches,events,oldest_age_seconds,evicted_events_total}
//
// Series per process are bounded (kMaxProcessSeries): past it, new processes' series fold into
// pid="other", executable="other".
//
// With KeepFleetRows(true), each fold also adds to the fleet store's rows (fleet_exporter.h):
// per (process, executable, model, op) the calls, self CPU and self NEURON time and a histogram
// of executions' device time since the last TakeFleetRows. An op's calls and host time go to
// the row of the model it spent most device time in (within the process and fold); device time
// no call was matched to is op "(uncorrelated)". And per process that waited in collectives,
// a rank row (fleet_ranks): its rank, its job (JobFromCommandLine), its collectives and wait.
//
// Thread-safe.
#ifndef NRTPROF_DAEMON_METRICS_H_
#define NRTPROF_DAEMON_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "trace/summary.h"
#include "trace/trace_model.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

class Metrics {
 public:
  static constexpr size_t kMaxProcessSeries = 4096;
  // Upper bounds of the device-time histogram's buckets, in seconds.
  static const std::vector<double>& DeviceBuckets();

  // The device-time histogram of a fleet row: per DeviceBuckets() bound, then one for longer.
  struct FleetRow {
    std::string pid;  // "other" past kMaxProcessSeries
    std::string executable;
    std::string model;
    std::string op;
    uint64_t calls = 0;
    uint64_t host_ns = 0;
    uint64_t device_ns = 0;
    uint64_t executions = 0;
    std::vector<uint64_t> device_histogram;  // DeviceBuckets().size() + 1, not cumulative
  };
  static constexpr char kUncorrelatedOp[] = "(uncorrelated)";
  // A process's collectives since the last TakeFleetRankRows, for fleet_ranks.
  struct FleetRankRow {
    std::string pid;  // "other" past kMaxProcessSeries
    std::string executable;
    int rank = -1;             // -1: its command line does not say
    std::string job;           // its job id, else its command line without the rank
    uint64_t collectives = 0;  // its collectives' barriers (cc_exec_barrier)
    uint64_t wait_ns = 0;      // their time: waiting for the other ranks
  };

  // Folds in the calls, executions and op times of one decoded window.
  void Add(const Trace& trace);
  void KeepFleetRows(bool keep);
  // The fleet rows folded since the last call (in key order), and forgets them.
  std::vector<FleetRow> TakeFleetRows();
  // The rank rows folded since the last call (in process order), and forgets them.
  std::vector<FleetRankRow> TakeFleetRankRows();
  // The exposition text: the counters so far, then the gauges of `status`.
  std::string Render(const nrtprof::StatusReply& status) const;

 private:
  struct Histogram {
    std::vector<uint64_t> buckets;  // per DeviceBuckets() bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  struct CollectiveWait {
    std::string rank;  // the label: a number, "unknown" or "other"
    uint64_t collectives = 0;
    uint64_t wait_ns = 0;
  };
  struct OpTimes {
    uint64_t calls = 0;
    uint64_t host_ns = 0;
    uint64_t device_ns = 0;
  };
  // (pid, executable, model)
  using ModelKey = std::tuple<std::string, std::string, std::string>;

  ModelKey KeyOf(uint32_t pid, const std::string& executable, const std::string& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A process's collectives and their wait, with its rank (read once per process and fold).
  void AddCollectiveWait(const ProcessTrace& p, uint64_t collectives, uint64_t wait_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // (pid, executable, model, op)
  using FleetKey = std::tuple<std::string, std::string, std::string, std::string>;
  void AddFleetRows(const ProcessTrace& p, const Summary& summary,
                    const std::map<std::pair<std::string, std::string>, FleetRow>& by_op_model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int32_t>, uint64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::map<ModelKey, uint64_t> executions_ ABSL_GUARDED_BY(mu_);
  std::map<ModelKey, Histogram> device_ ABSL_GUARDED_BY(mu_);
  // By (pid, executable, ""): ProcessTrace::executions_held_by_program, summed.
  std::map<ModelKey, uint64_t> held_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, OpTimes> ops_ ABSL_GUARDED_BY(mu_);
  // By (pid, executable, ""): collective wait per process and rank.
  std::map<ModelKey, CollectiveWait> collectives_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<uint32_t, std::string>, bool> processes_ ABSL_GUARDED_BY(mu_);
  uint64_t uncorrelated_device_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool keep_fleet_rows_ ABSL_GUARDED_BY(mu_) = false;
  std::map<FleetKey, FleetRow> fleet_ ABSL_GUARDED_BY(mu_);
  std::map<ModelKey, FleetRankRow> fleet_ranks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_METRICS_H_
