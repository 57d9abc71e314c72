// Collectives across the ranks of a capture (issue 40): each collective instance matched across
// the processes (ranks) that took part, when each rank arrived, which arrived last and what it
// cost the others, and what the late rank was doing while the others waited for it. What
// `nrtprof collectives CAPTURE_DIR` prints (client/command_collectives.cc).
//
// From the Trace alone (the correlator's, or one rebuilt from trace.pftrace):
//  - A rank is a process of the capture that scheduled collectives (`nrta_cc_schedule`), or a
//    copy of such a process's program that ended without its final batch (or whose command
//    line says its rank) and has none in the capture: a rank that vanished. Its
//    rank number is the one its environment gave it (RANK, as torchrun sets it: Hello.rank),
//    else the one its command line says (`--rank N`, `--rank=N`, `--local_rank N`,
//    `--local-rank=N`, as launchers pass it); when some process says neither, the ranks are
//    numbered by host and pid instead, and `ranks_said` is false.
//  - Matching: the simulator (sim/README.md, "Collectives") has one communicator per process,
//    the whole group, and the k-th collective each rank schedules on a collectives queue is
//    one collective of the group. A rank's requests are numbered per process, per queue, from 1
//    at nrt_init (the low 48 bits of nrta_seq; the high 16 name the queue), in the order it
//    scheduled them — so the k-th collective of every rank on queue q carries the same (q, k),
//    and instances are matched by that pair, which holds in a capture that starts mid-job too.
//    Sub-groups are not told apart (no call records a replica group).
//  - Arrival: the rank's cc_exec_barrier start when the capture has the collective's device
//    events (a DeviceEvent named "cc_exec_barrier" of its schedule call), else the start of its
//    nrta_cc_schedule call. The collective could start at the last arrival. It ended at its
//    cc_running end when known, else when the first rank saw it complete (the recorded
//    nrta_is_completed poll of its request: later than the end by at most the poll interval).
//  - Noise floor: arrivals within CollectivesOptions::noise_floor_ns of each other are taken as
//    simultaneous (scheduling jitter; across hosts, the clocks' alignment error), so a
//    collective whose skew is at most the floor has no late rank: nobody is counted last in it,
//    nobody as having waited. Whether the most-often-last rank stands out is then weighed
//    against chance: a job whose ranks are balanced still has a last rank in every collective,
//    each about 1/N of the time (Straggler::chance).
//  - Wait a late rank cost: the sum, over the other ranks, of the last arrival minus theirs.
//  - Cause: what covered the late rank's time between the second-to-last arrival and its own
//    (the others all waiting), per instant the first of: its device executions, or a call of
//    the scheduling thread that ran a model (nrt_execute: the host waiting on it, launch
//    included) — "device: <model>"; its transfers, or a tensor read/write/copy call —
//    "transfer: <tensor>"; the innermost framework range of the thread that does not enclose
//    the collective itself — "host: <range>"; another runtime call — "host: <call>"; else
//    "host: (outside any range)".
//
// A pure function of the Trace: thread-safe.
#ifndef NRTPROF_TRACE_COLLECTIVES_H_
#define NRTPROF_TRACE_COLLECTIVES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

// One process taking part in the collectives.
struct CollectiveMember {
  int rank = 0;
  std::string host;
  uint32_t pid = 0;
  size_t process = 0;    // index in Trace::processes (the first part, for a process in parts)
  bool cut_off = false;  // the process ended without its final batch (killed, crashed)
};

// What covered part of a late rank's time: "host: data_loader_stall", "device: extra_forward".
struct LateCause {
  std::string what;
  uint64_t ns = 0;
};

struct CollectiveArrival {
  size_t member = 0;        // index in CollectivesAnalysis::members
  uint64_t arrival_ns = 0;
  uint64_t completed_ns = 0;  // when this rank saw it complete (its cc_running end), 0 unknown
  uint64_t correlation_id = 0;  // its nrta_cc_schedule call
};

struct CollectiveInstance {
  uint32_t queue = 0;   // nrta_seq >> 48: the collectives queue (XU id)
  uint64_t number = 0;  // its number on that queue, from 1
  int64_t step = -1;    // the ProfilerStep#N its last rank scheduled it in, -1 outside steps
  std::vector<CollectiveArrival> arrivals;  // by arrival time
  std::vector<size_t> missing;              // members that never scheduled it
  uint64_t first_arrival_ns = 0;
  uint64_t start_ns = 0;    // the last arrival: when the collective could start
  uint64_t end_ns = 0;      // 0: unknown (no rank's completion in the capture)
  size_t last = 0;          // member that arrived last
  uint64_t wait_cost_ns = 0;  // what the last rank's lateness cost the others, summed
  // The skew is within the noise floor: no rank was late (last, wait cost, causes not counted).
  bool within_noise = false;
  std::vector<LateCause> late_causes;  // the last rank's gap, longest first
  uint64_t skew_ns() const { return start_ns - first_arrival_ns; }
};

struct Straggler {
  size_t member = 0;
  uint64_t times_last = 0;
  uint64_t wait_cost_ns = 0;
  // This rank's own collective wait: from its arrival to the collective's start (the last
  // arrival), summed over the collectives every rank reached — time in a collective that is
  // not the collective's work.
  uint64_t waited_ns = 0;
  std::vector<LateCause> causes;  // over the instances it was last in, longest first
  // How likely a rank of a balanced job (each of the N ranks last with probability 1/N) is last
  // in at least times_last of the collectives that had a late rank: small means it stands out.
  double chance = 1.0;
};

struct CollectivesOptions {
  // Arrivals at most this far apart count as simultaneous. 50 us: above the jitter of a launch
  // on a quiet host, far below a straggler worth looking at. Callers add the clocks' error
  // across hosts (a merged capture's bounds).
  uint64_t noise_floor_ns = 50'000;
};

struct CollectivesAnalysis {
  std::vector<CollectiveMember> members;      // by rank
  bool ranks_said = true;
  std::vector<CollectiveInstance> instances;  // by start (last arrival)
  std::vector<Straggler> stragglers;          // every member; most often last first
  uint64_t noise_floor_ns = 0;                // the floor used
  size_t late_instances = 0;   // collectives every rank reached with a skew above the floor
  size_t within_noise = 0;     // collectives every rank reached within the floor
  // What the capture cannot say: ranks that vanished (cut off, missing from instances).
  std::vector<std::string> notes;
};

// NOT_FOUND "the capture has no collectives (no nrta_cc_schedule call)" when no process
// scheduled one.
absl::StatusOr<CollectivesAnalysis> AnalyzeCollectives(const Trace& trace,
                                                       const CollectivesOptions& options = {});

// The probability of at least k successes in n trials of probability p (the binomial tail).
double AtLeastByChance(uint64_t k, uint64_t n, double p);

// The rank a command line gives (`--rank N`, `--rank=N`, `--local_rank N`, `--local-rank=N`),
// or -1.
int RankFromCommandLine(const std::vector<std::string>& argv);
// The command line without that rank argument and without a launcher's per-host share of the
// ranks (`--local-ranks LIST`, `--node_rank N`), its program by file name, joined by spaces:
// the same for every rank of a job whose launchers were started with one command line
// ("cc_job --ranks 4"), so that a fleet's ranks can be grouped by job (docs/fleet.md).
std::string JobFromCommandLine(const std::vector<std::string>& argv);

// A process's job: the processes of one training job, on every host, as a daemon's trigger
// rules "on job" and a peer's capture of the job know it (docs/triggers.md, "Jobs").
struct ProcessJob {
  std::string name;                // empty: no job (the process is a job of one)
  bool from_command_line = false;  // `name` is JobFromCommandLine's, not a Hello.job
  bool empty() const { return name.empty(); }
  bool operator==(const ProcessJob& o) const {
    return name == o.name && from_command_line == o.from_command_line;
  }
  bool operator<(const ProcessJob& o) const {
    return from_command_line != o.from_command_line ? o.from_command_line : name < o.name;
  }
};
// `job_id` (Hello.job: NRTPROF_JOB, else NEURON_RT_ROOT_COMM_ID) when the process gave one;
// else, when its command line names a rank, that command line without it (JobFromCommandLine,
// as fleet_ranks.job); else none.
ProcessJob JobOf(const std::string& job_id, const std::vector<std::string>& argv);

// A process's rank in its job: the one its environment said (ProcessTrace::rank: RANK, as
// torchrun sets it), else the one its command line says (RankFromCommandLine), else -1.
int RankOf(const ProcessTrace& p);
// Its job: JobOf, and when it names no job id but its environment gave it a rank, its command
// line (which then holds no rank to take out): the ranks of one torchrun job share it.
ProcessJob JobOf(const ProcessTrace& p);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_COLLECTIVES_H_
