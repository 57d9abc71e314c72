// The collector core's own state, shared by the files that implement CollectorCore
// (collector_core.cc: streams, captures, who may do what; collector_recorded.cc: captures of
// the past, read from the flight recorder; collector_status.cc: status, top and the metrics'
// fold). Not for anyone else: include collector_core.h.
#ifndef NRTPROF_DAEMON_COLLECTOR_CORE_STATE_H_
#define NRTPROF_DAEMON_COLLECTOR_CORE_STATE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/collector_core.h"
#include "trace/collectives.h"

namespace nrtprof::daemon {

struct CollectorCore::Stream {
  Stream(StreamId id, const nrtprof::Hello& hello, const IngestLimits& limits, ControlSender send)
      : id(id),
        key(KeyOf(hello)),
        pid(hello.pid()),
        executable(hello.executable()),
        wanted_capture(hello.capture_id()),
        job(JobOf(hello.job(), std::vector<std::string>(hello.command_line().begin(),
                                                 hello.command_line().end()))),
        rank(hello.has_rank() && hello.rank() >= 0
                 ? hello.rank()
                 : RankFromCommandLine(std::vector<std::string>(hello.command_line().begin(),
                                                                hello.command_line().end()))),
        send(std::move(send)),
        ingest(hello, limits) {}
  const StreamId id;
  const ProcessKey key;
  const uint32_t pid;
  const std::string executable;
  const std::string wanted_capture;  // Hello.capture_id: empty for any
  const ProcessJob job;              // Hello.job, else its command line's (JobOf)
  // Its rank, as RankOf reads it from a capture: Hello.rank, else its command line's; -1: none.
  const int rank;
  std::optional<uint32_t> uid;       // the process's user, if on this machine (Caller::uid)
  ControlSender send;                // used under the core's mu_
  // The shim's counters (cumulative for the process) as its earlier or other streams had them
  // when this one began: Status counts only what this stream adds. Under the core's mu_.
  DropCounts counted_elsewhere;
  std::string capture_id;            // the capture it is in, or empty; under the core's mu_
  std::mutex mu;
  ProcessIngest ingest ABSL_GUARDED_BY(mu);
  // The last EventBatch.flushed stored: the shim has sent what it recorded before that flush.
  uint64_t flushed ABSL_GUARDED_BY(mu) = 0;
};

struct CollectorCore::Capture {
  std::string id;
  std::string output_dir;
  uint32_t stack_depth = 0;
  std::optional<uint32_t> owner;  // the user who asked for it; none: the operator
  uint64_t started_ns = 0;        // CLOCK_MONOTONIC
  uint32_t last_ms = 0;           // StartCaptureRequest.last_ms: from the flight recorder
  uint32_t iterations = 0;        // whole steps first_step.. (StartCaptureRequest.iterations)
  uint64_t first_step = 0;
  TriggerReason trigger;          // StartCaptureRequest.trigger: a rule of the daemon's took it
  std::vector<uint32_t> pids;     // StartCaptureRequest.pids: only these join; empty: any
  ProcessJob job;                 // StartCaptureRequest.job: only its processes; empty: any
  bool staged = false;            // written in the daemon's own folder, fetched, then removed
  // Writes the files the capture named (StartCaptureRequest.files); null: the core's sink.
  std::unique_ptr<TraceSink> own_sink;
  uint64_t number = 0;   // order of starting: a process without a capture id joins the latest
  bool starting = true;  // the id is reserved, the folder not made yet
  bool stopping = false;
  std::vector<Stream*> members;          // open streams in the capture
  std::vector<ProcessCapture> finished;  // from members that closed their stream
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_COLLECTOR_CORE_STATE_H_
