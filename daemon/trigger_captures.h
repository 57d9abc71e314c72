// nrtprofd --trigger RULE: the daemon's rules (triggers.h) run on the metrics' fold, and each
// anomaly they admit becomes an ordinary capture of the past in the daemon's output root: the
// rule's look-back before the anomaly's start and its look-ahead after its end, of the process
// (or of every process of its job), taken by CollectorCore::StartCapture/StopCapture as
// `nrtprof capture --last` takes one, its summary and fleet row carrying the rule and reason.
//
// A thread of its own folds every check period (the fold CollectorCore::FoldMetrics shares with
// /metrics and the fleet store: whichever folds first takes the window) and another writes the
// captures, one at a time, each once its look-ahead has passed; nothing waits on the profiled
// programs. Every triggered capture's folder holds trigger.json (the rule, the reason, when);
// by those the daemon knows its triggered captures, across restarts too, and keeps them within
// the disk budget: the oldest are removed first and counted. A folder without trigger.json (a
// capture someone asked for) is never removed.
//
// A job (JobOf, trace/collectives.h): the processes that share a Hello.job (NRTPROF_JOB, else
// NEURON_RT_ROOT_COMM_ID), or, without one, a command line but for its rank. A rule "on job"
// captures the job's processes (StartCaptureRequest.job); a process of no job, alone.
//
// The job on other hosts: with peers (nrtprofd --trigger_peers HOST:PORT,...: the other hosts'
// daemons, listening on TCP with TLS and a token), a rule "on job" that fires for a process of a
// job also asks each peer for the same window: StartCapture of the same capture id and job, its
// look-back reaching as far back on the peer's clock as the local one on this daemon's, with
// the rule and the reason ("asked by HOST: ..."), then StopCapture. The peers are asked each
// on a thread of its own, the start within peer_timeout: a peer down or unreachable never
// holds up the local capture nor the next; it is counted (peer_failed) and said in the log (a
// line at most every so often). The peer writes the job's processes it has, the reason in its
// summary, and keeps the capture as one of its own triggered captures (AdoptPeerCapture: its
// trigger.json, its budget, its `nrtprof captures`). docs/triggers.md says what to configure.
//
// Thread-safe.
#ifndef NRTPROF_DAEMON_TRIGGER_CAPTURES_H_
#define NRTPROF_DAEMON_TRIGGER_CAPTURES_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "daemon/collector_core.h"
#include "daemon/log_rate_limiter.h"
#include "daemon/metrics.h"
#include "daemon/triggers.h"
#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

struct TriggerCaptureOptions {
  std::vector<TriggerRule> rules;
  std::string output_root;  // the daemon's: where the captures go
  uint64_t budget_bytes = uint64_t{1} << 30;
  std::chrono::milliseconds check_period{5'000};
  // How long a capture's stop waits for its processes' last batches (StopCaptureRequest.wait_ms).
  uint32_t stop_wait_ms = 2'000;
  // The job's other hosts' daemons (gRPC targets: HOST:PORT), and how to reach them (TLS with
  // the peers' CA, and their token). This host's name, for the reason the peers write.
  std::vector<std::string> peers;
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  std::string host;
  // How long a peer may take to start the window (StartCapture): past it, the peer is counted
  // as failed. Its stop (writing the files) may take longer, on the ask's own thread.
  std::chrono::milliseconds peer_timeout{2'000};
  std::function<void(const std::string&)> log;  // one line each; null: nowhere
};

class TriggerCaptures {
 public:
  static constexpr char kMarkerFile[] = "trigger.json";
  // Anomalies waiting for their capture; past this, one is counted as failed and said in the
  // log (captures are written one at a time, and a rule "every 0s" may fire faster).
  static constexpr size_t kMaxQueued = 64;

  TriggerCaptures(TriggerCaptureOptions options, CollectorClock* clock);
  ~TriggerCaptures();
  TriggerCaptures(const TriggerCaptures&) = delete;
  TriggerCaptures& operator=(const TriggerCaptures&) = delete;

  // The fold's hook (CollectorOptions::folded): evaluates the window and queues the captures.
  void OnFold(const Trace& window);
  // The core's hook (CollectorOptions::ended_without_final): for the `exit by signal` rules,
  // queued; the capture thread then reads how the process ended (a zombie's wait status in
  // /proc/PID/stat), and a process still running (a stream that failed) fires nothing.
  void OnEndedWithoutFinal(const nrtprof::Hello& hello, bool local);
  // Finds the triggered captures already in the output root (an earlier run's), then starts
  // the threads (none without rules: a daemon that only takes its peers' captures). `core` and
  // `metrics` must outlive Stop.
  void Start(CollectorCore* core, Metrics* metrics);
  // A capture a peer daemon's rule asked for (a StartCapture over TCP with a trigger, written):
  // marked with trigger.json (the rule, the reason, "asked_by"), kept within this daemon's
  // budget and listed with its triggered captures.
  void AdoptPeerCapture(const nrtprof::StartCaptureRequest& asked,
                        const nrtprof::CaptureFiles& files);
  // Captures still queued are left untaken (each said in the log).
  void Stop();
  // The rules' counts and the triggered captures kept (StatusReply.triggers, ...).
  void FillStatus(nrtprof::StatusReply* reply) const;

 private:
  struct Pending {
    TriggerFiring firing;
    bool whole_job = false;  // a rule on job, of a process of a job: its job; else the process
  };
  struct Kept {
    std::string capture_id;
    std::string dir;
    std::string rule;
    std::string reason;
    uint64_t unix_ms = 0;
    uint64_t bytes = 0;
  };
  struct RuleCounts {
    uint64_t captures = 0;
    uint64_t failed = 0;
    uint64_t removed = 0;
    uint64_t peer_captures = 0;  // peers that wrote the window when asked
    uint64_t peer_failed = 0;
  };

  struct Ended {
    nrtprof::Hello hello;
    bool local = false;
    uint64_t at_ns = 0;
  };
  void FoldLoop();
  // An ended process: how it ended, then the exit rules' firings queued.
  void JudgeEnded(const Ended& ended);
  // What the firing captures: the process, or its job.
  Pending PendingOf(TriggerFiring f) const;
  // Queues the captures, and the evaluator's counts as of them.
  void Queue(std::vector<Pending> pending, std::vector<TriggerEvaluator::Counts> counts);
  void CaptureLoop();
  void Take(const Pending& pending);
  // Asks every peer for the window of `start` (a rule on job), each on a thread of its own;
  // returns at once.
  void AskPeers(size_t rule, const nrtprof::StartCaptureRequest& start);
  struct Ask;
  // One peer's ask (its thread): StartCapture within peer_timeout, StopCapture; counted.
  void AskPeer(size_t peer, size_t rule, const nrtprof::StartCaptureRequest& start, Ask* ask);
  // A peer's failure in the log, rate-limited (peer_log_).
  void LogPeerFailure(const std::string& line);
  // Writes trigger.json into `kept.dir`, then keeps it within the budget.
  void Keep(Kept kept, const std::string& marker);
  // Reads output_root's triggered captures (their trigger.json) into kept_.
  void FindKept();
  // Removes the oldest triggered captures until the rest fit the budget.
  void KeepBudget() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  const TriggerCaptureOptions options_;
  CollectorClock* const clock_;
  CollectorCore* core_ = nullptr;
  Metrics* metrics_ = nullptr;
  std::mutex eval_mu_;  // the evaluator: the fold's and the capture thread's
  TriggerEvaluator evaluator_ ABSL_GUARDED_BY(eval_mu_);

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Ended> ended_ ABSL_GUARDED_BY(mu_);
  std::vector<TriggerEvaluator::Counts> counts_ ABSL_GUARDED_BY(mu_);  // the evaluator's, copied
  std::vector<RuleCounts> rule_counts_ ABSL_GUARDED_BY(mu_);
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);  // oldest first
  std::thread folding_;
  std::thread capturing_;
  std::vector<std::unique_ptr<nrtprof::Control::Stub>> peer_stubs_;
  // The peers' asks in flight, each on its thread: joined once done, cancelled at Stop.
  struct Ask {  // under asks_mu_, but for the thread
    std::thread thread;
    std::shared_ptr<grpc::ClientContext> context;  // the call in flight (start, then stop)
    bool done = false;
  };
  std::mutex asks_mu_;
  std::list<Ask> asks_ ABSL_GUARDED_BY(asks_mu_);
  bool asks_stopping_ ABSL_GUARDED_BY(asks_mu_) = false;
  // Per peer, its asks in flight; past kMaxAsksInFlight a new one is counted as failed.
  std::vector<uint32_t> in_flight_ ABSL_GUARDED_BY(asks_mu_);
  static constexpr uint32_t kMaxAsksInFlight = 4;
  LogRateLimiter peer_log_;  // the lines of peers that did not answer
};

// /metrics' lines of the rules (StatusReply.triggers): per rule, nrtprof_triggers_total,
// nrtprof_triggers_suppressed_total, nrtprof_triggered_captures_total,
// nrtprof_triggered_captures_failed_total, nrtprof_triggered_captures_removed_total; and
// nrtprof_triggered_captures_bytes with its limit (alone on a daemon without rules that keeps
// captures its peers asked for). Empty without rules nor triggered captures.
std::string RenderTriggerMetrics(const nrtprof::StatusReply& status);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_TRIGGER_CAPTURES_H_
