// `nrtprof capture --hosts HOST:PORT,...`: one capture on several daemons at one instant, their
// files fetched to the caller. Per host, over one authenticated connection: the clock offset
// (clock_offset.h), StartCapture at a start instant named in that host's own clock, the window
// (a duration, whole steps or the flight recorder's past), StopCapture and FetchCapture into
// DIR/HOST. Then DIR/trace.pftrace (trace_merge.h) and DIR/summary.txt (hosts_summary.h), the
// latter also on stderr. A host that cannot be reached or refuses is left out with one line
// naming it; the command fails (1) only when no host's capture was written, and exits
// kEmptyCaptureExit (capture_report.h) when every host's part is empty, each said why.
//
// Not thread-safe: one call per command (it runs a thread per host inside).
#ifndef NRTPROF_CLIENT_CAPTURE_HOSTS_H_
#define NRTPROF_CLIENT_CAPTURE_HOSTS_H_

#include <signal.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::cli {

// What `nrtprof capture` records, from its flags (checked already).
struct CaptureWindow {
  absl::Duration duration;
  absl::Duration last;
  uint32_t iterations = 0;
  uint32_t step_multiple = 1;
  std::vector<uint32_t> pids;
  uint32_t stacks = 0;
  std::vector<CaptureFileKind> files;  // --files; empty: every kind
  // With iterations: how long to wait while no process marks steps (--step_timeout).
  absl::Duration step_timeout = absl::Seconds(60);
};

// The wait of `capture --iterations` on one daemon: fed each status it answers, it says when
// every process that marks steps (of `pids`, if any) has marked `final_step` or has gone (a
// process that ends leaves the daemon's list), once at least one has been seen. Not
// thread-safe.
class StepWatch {
 public:
  StepWatch(std::vector<uint32_t> pids, uint64_t final_step)
      : pids_(std::move(pids)), final_step_(final_step) {}

  bool Done(const StatusReply& status);

  // Whether any process (of `pids`) has been seen marking steps: until one has, Done() waits
  // for one, and capture --iterations bounds that wait (--step_timeout).
  bool SeenSteps() const { return !last_step_.empty(); }

  // While none is seen, what the user is told, from the last status: "no process connected
  // marks steps (nrtprof_step): 2 connected, none has marked one; waiting 50s more for one
  // (--step_timeout)". `left`: what remains of the bound.
  std::string NoStepsYet(absl::Duration left) const;

  // One line per process that went before the final step: "pid N ended before step F".
  std::vector<std::string> EndedEarly() const;

 private:
  std::vector<uint32_t> pids_;
  uint64_t final_step_;
  std::map<uint32_t, int64_t> last_step_;  // every process seen marking steps: its last
  std::set<uint32_t> gone_;
  size_t connected_ = 0;  // in the last status (of `pids`, if any), marking steps or not
};

// capture --iterations: how often the wait repeats that no process marks steps.
constexpr absl::Duration kNoStepsNoticeEvery = absl::Seconds(10);

// `hosts`: the --hosts list as given; `out`: DIR, absolute. `stop_signals` (blocked in every
// thread) end the window early. Returns the exit code.
int CaptureOnHosts(const std::string& hosts, const CaptureWindow& window, const std::string& out,
                   const sigset_t& stop_signals);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_CAPTURE_HOSTS_H_
