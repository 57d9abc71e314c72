// Triggered look-back captures (issue 41): rules the standing daemon evaluates on the stream it
// already folds for its metrics (CollectorCore::FoldMetrics), each firing a capture of the
// seconds before and after an anomaly from the flight recorder. docs/triggers.md is the
// language's reference; in short, a rule is
//
//   NAME: CONDITION [SETTING]...
//
//   CONDITION  step > K x median [over N]       a ProfilerStep#N range (nrtprof_step) slower
//                                               than K times the median of the process's last
//                                               N steps before it (N = 100)
//              step > DURATION                  ... slower than a time
//              execution > K x median [over N]  a device execution slower than K times the
//                                               median of the model's last N in the process
//              execution > DURATION             ... slower than a time
//              status != ok                     a runtime call (nrt_*, nrta_*) returned an error
//              exit by signal                   a process killed by a signal: its stream
//                                               ended without its final batch
//                                               (ProcessEnded, not Evaluate)
//              collective wait > DURATION       a collective's wait for the other ranks
//                                               (cc_exec_barrier) longer than a time
//   SETTING    before DURATION   look back this far before the anomaly's start (10 s)
//              after DURATION    and on this far after its end (2 s)
//              every DURATION    at most one capture per rule in this long (5 m)
//              files KIND,...    pftrace, json, summary, artifacts (every kind)
//              on process|job    the process, or every process of its job (job)
//   DURATION   NUMBER UNIT, the unit ns, us, ms, s, m or h ("250 ms", "2s", "5m")
//
// ParseTriggerRule: a rule from its text, or one line saying at which column what was
// expected. TriggerEvaluator: the rules over each folded window, with their rolling medians,
// rate limits and counts. Thread-compatible (the fold calls it one window at a time).
#ifndef NRTPROF_DAEMON_TRIGGERS_H_
#define NRTPROF_DAEMON_TRIGGERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trace/collectives.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

struct TriggerRule {
  enum class Subject { kStep, kExecution, kStatus, kExitBySignal, kCollectiveWait };
  enum class Scope { kProcess, kJob };

  std::string name;
  std::string text;  // as written, for the log and the captures' header
  Subject subject = Subject::kStep;
  // kStep, kExecution: either a factor of the rolling median of the last `over` ...
  double factor = 0;
  uint32_t over = 100;
  // ... or an absolute time (also kCollectiveWait's).
  uint64_t threshold_ns = 0;
  uint64_t before_ns = 10'000'000'000;
  uint64_t after_ns = 2'000'000'000;
  uint64_t every_ns = 300'000'000'000;
  uint32_t files = 0;  // a bit (1 << k) per nrtprof::CaptureFileKind k; 0: every kind
  Scope scope = Scope::kJob;

  bool relative() const { return factor > 0; }
  static constexpr size_t kMaxNameLength = 48;
  static constexpr uint32_t kMaxOver = 10'000;
  static constexpr uint64_t kMaxBeforeNs = 3'600'000'000'000;  // an hour
  static constexpr uint64_t kMaxAfterNs = 60'000'000'000;      // a minute
};

// The rule `text` ("slow-step: step > 3 x median over 50 before 10s"), or InvalidArgument with
// one line: "column C: expected WHAT, found 'TOKEN'" (C counts from 1 in `text`).
absl::StatusOr<TriggerRule> ParseTriggerRule(absl::string_view text);

// The rules' list: each parsed, the names unique. The error names the rule ("rule 2 ('...'):
// column C: ...").
absl::StatusOr<std::vector<TriggerRule>> ParseTriggerRules(const std::vector<std::string>& texts);

// "212 ms", "3.9 s", "850 us": a time as the reasons say it.
std::string FormatTriggerDuration(uint64_t ns);

// One anomaly a rule saw: what a capture is taken of, and why.
struct TriggerFiring {
  size_t rule = 0;  // index in the evaluator's rules
  uint32_t pid = 0;
  std::string host;
  std::string executable;
  // The process's job (JobOf: its Hello.job, else its command line if it names a rank); empty:
  // none, the process is captured alone.
  ProcessJob job;
  uint64_t start_ns = 0;  // the anomaly's span, on the fold's (the daemon's) monotonic clock
  uint64_t end_ns = 0;
  uint64_t value_ns = 0;      // what was measured (0 for status and exit rules)
  uint64_t threshold_ns = 0;  // what it was held to: the absolute time, or K x the median
  uint64_t median_ns = 0;     // relative rules: the median
  // "step 4711 took 3.9x the median of the last 100 (212 ms vs 54 ms)", the process named.
  std::string reason;
};

class TriggerEvaluator {
 public:
  explicit TriggerEvaluator(std::vector<TriggerRule> rules);

  const std::vector<TriggerRule>& rules() const { return rules_; }

  // Evaluates one folded window (the fold's Trace, clipped to what ended in it, on the daemon's
  // clock): the anomalies that are to be captured, in the order found. A rule's anomaly within
  // its `every` of its last capture's is counted as suppressed, not returned. Windows must come
  // in order (each folds what ended after the previous one).
  std::vector<TriggerFiring> Evaluate(const Trace& window);

  // A process ended without its final batch (its stream closed: CollectorCore's
  // ended_without_final) at `at_ns`: the `exit by signal` rules' anomaly. `signal`: the signal
  // that ended it, when known (0: unknown; a process known to have exited is not passed).
  std::vector<TriggerFiring> ProcessEnded(uint32_t pid, const std::string& host,
                                          const std::string& executable,
                                          const std::vector<std::string>& command_line,
                                          const std::string& job, uint64_t at_ns, int signal);

  struct Counts {
    uint64_t triggers = 0;    // anomalies seen, suppressed or not
    uint64_t suppressed = 0;  // of those, within `every` of the rule's last capture
  };
  // Per rule, in the rules' order.
  std::vector<Counts> counts() const;

  // How many steps (or executions) a process (or model) must have had before a relative rule
  // judges the next: the median of fewer is no baseline.
  static constexpr uint32_t kMinHistory = 20;
  // The most (rule, process, model) medians kept.
  static constexpr size_t kMaxHistories = 1 << 16;

 private:
  // The last N values, in arrival order and sorted (the median at the middle): inserting and
  // removing a value moves at most N of them.
  class RollingMedian {
   public:
    explicit RollingMedian(uint32_t capacity) : capacity_(capacity) {}
    size_t size() const { return ring_.size(); }
    uint64_t Median() const;
    void Add(uint64_t value);

   private:
    uint32_t capacity_;
    std::vector<uint64_t> ring_;  // arrival order, from next_ on
    size_t next_ = 0;
    std::vector<uint64_t> sorted_;
  };
  // (rule, pid, host, model): the model is empty for steps.
  using HistoryKey = std::tuple<size_t, uint32_t, std::string, std::string>;

  // Counts an anomaly and says whether it is to be captured (not within the rule's `every`).
  bool Admit(size_t rule, uint64_t at_ns);
  void Measure(size_t rule, const ProcessTrace& p, RollingMedian* history, uint64_t start_ns,
               uint64_t duration_ns, const std::function<std::string()>& what,
               std::vector<TriggerFiring>* out);
  // A relative rule's history for the process (and model); null for an absolute rule.
  RollingMedian* History(size_t rule, const ProcessTrace& p, const std::string& model);
  TriggerFiring Firing(size_t rule, const ProcessTrace& p, uint64_t start_ns,
                       uint64_t end_ns) const;

  std::vector<TriggerRule> rules_;
  std::vector<Counts> counts_;
  // Per rule: the start of the anomaly its last capture was of, and whether it has had one.
  std::vector<uint64_t> last_fired_ns_;
  std::vector<bool> fired_;
  std::map<HistoryKey, RollingMedian> history_;
  bool any_step_rule_ = false;
  bool any_execution_rule_ = false;
  bool any_status_rule_ = false;
  bool any_collective_rule_ = false;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_TRIGGERS_H_
