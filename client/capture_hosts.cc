#include "client/capture_hosts.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/capture_report.h"
#include "client/clock_offset.h"
#include "client/daemon_connection.h"
#include "client/daemon_credentials.h"
#include "client/fetch.h"
#include "client/hosts_summary.h"
#include "client/summary_file.h"
#include "client/trace_merge.h"
#include "common/address.h"
#include "common/clock.h"
#include "common/terminal_text.h"
#include "trace/atomic_file.h"
#include "trace/summary.h"

namespace nrtprof::cli {
namespace {

// Round trips per host (clock_offset.h), the shortest of which decides: about 15 ms on
// loopback; a far host stops at 50 ms.
constexpr int kClockRounds = 128;
constexpr uint64_t kClockBudgetNs = 50'000'000;
// How far ahead of now the hosts start: enough for StartCapture to reach the slowest of them.
constexpr absl::Duration kMinStartLead = absl::Milliseconds(250);
constexpr absl::Duration kMaxStartLead = absl::Seconds(5);
// A host's window that opened later than this after the instant named is said to have.
constexpr uint64_t kLateStartNs = 1'000'000;

// Processes in step (the ranks of a job) mark the same step within moments, but each daemon
// names the next step after the latest that reached it, a flush (25 ms) apart: hosts whose next
// steps are at most this far apart take the latest's, all the same numbers. Further apart, the
// hosts' processes are not in step, and each host keeps its own.
constexpr uint64_t kMaxStepSpread = 100;

void Say(const std::string& line) { fprintf(stderr, "nrtprof capture: %s\n", line.c_str()); }

// One host of the capture, from the connection to its fetched files.
struct Host {
  std::string name;     // as given in --hosts
  std::string address;  // the gRPC target
  std::string folder;   // DIR/NAME, where its files come home
  std::unique_ptr<DaemonConnection> connection;
  std::string hostname;
  ClockEstimate clock;
  StartCaptureReply started;
  CaptureFiles files;
  std::optional<StepWatch> steps;  // capture --iterations: its processes' steps
  bool no_steps = false;  // none of its processes marked steps within --step_timeout
  std::string failure;  // why it was left out; empty while it is in

  bool in() const { return failure.empty(); }
  void Fail(const std::string& what, const absl::Status& status) {
    failure = absl::StrCat(what, ": ", status.message());
  }
};

// A folder name for a host: what the user wrote, with anything but letters, digits and
// ".:-_" made '_'.
std::string FolderName(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != ':' && c != '-' && c != '_') c = '_';
  }
  return out;
}

absl::StatusOr<std::vector<Host>> ParseHosts(const std::string& list, const std::string& out) {
  std::vector<Host> hosts;
  std::set<std::string> folders;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    const std::string name(absl::StripAsciiWhitespace(part));
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--hosts '", list, "' has an empty entry"));
    }
    Host h;
    h.name = name;
    h.address = ToGrpcTarget(name);
    h.folder = absl::StrCat(out, "/", FolderName(name));
    if (!folders.insert(h.folder).second) {
      return absl::InvalidArgumentError(absl::StrCat("--hosts names ", name, " twice"));
    }
    hosts.push_back(std::move(h));
  }
  return hosts;
}

// `step` for every host still in, each on a thread of its own; a host that fails says so in
// one line and is out.
void ForEachHost(std::vector<Host>* hosts, const std::function<void(Host*)>& step) {
  std::vector<std::thread> threads;
  std::vector<Host*> ran;
  for (Host& h : *hosts) {
    if (!h.in()) continue;
    ran.push_back(&h);
    threads.emplace_back([&step, &h] { step(&h); });
  }
  for (std::thread& t : threads) t.join();
  for (Host* h : ran) {
    if (!h->in()) Say(absl::StrCat("host ", h->name, " is left out: ", h->failure));
  }
}

size_t HostsIn(const std::vector<Host>& hosts) {
  return std::count_if(hosts.begin(), hosts.end(), [](const Host& h) { return h.in(); });
}

void Connect(const TlsPaths& tls, Host* h) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      CredentialsFor(h->address, tls);
  if (!credentials.ok()) return h->Fail("cannot connect", credentials.status());
  absl::StatusOr<std::unique_ptr<DaemonConnection>> connected =
      DaemonConnection::Connect(h->address, 2000, *credentials);
  if (!connected.ok()) return h->Fail("cannot connect", connected.status());
  h->connection = *std::move(connected);
}

void MeasureHostClock(Host* h) {
  absl::StatusOr<ClockEstimate> clock =
      MeasureClock(h->connection->stub(), h->address, kClockRounds, kClockBudgetNs, &h->hostname);
  if (!clock.ok()) return h->Fail("cannot read its clock", clock.status());
  h->clock = *clock;
}

void Start(StartCaptureRequest request, uint64_t local_start_ns, Host* h) {
  const int64_t start = static_cast<int64_t>(local_start_ns) + h->clock.monotonic_offset_ns;
  request.set_start_monotonic_ns(start > 0 ? static_cast<uint64_t>(start) : 0);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  const grpc::Status s = h->connection->stub()->StartCapture(&context, request, &h->started);
  if (!s.ok()) h->Fail("cannot start the capture", FromGrpc(s, h->address));
}

// How long after the named instant the host opened its window (its StartCapture came late), in
// its own clock; 0 if on time.
uint64_t LateBy(const Host& h, uint64_t local_start_ns) {
  const int64_t named = static_cast<int64_t>(local_start_ns) + h.clock.monotonic_offset_ns;
  const int64_t began = static_cast<int64_t>(h.started.started_monotonic_ns());
  return began > named ? static_cast<uint64_t>(began - named) : 0;
}

void StopAndFetch(uint32_t wait_ms, Host* h) {
  StopCaptureRequest stop;
  stop.set_capture_id(h->started.capture_id());
  stop.set_wait_ms(wait_ms);
  stop.set_first_step(h->started.first_step());  // AlignSteps' (the daemon's own, or later)
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const grpc::Status s = h->connection->stub()->StopCapture(&context, stop, &h->files);
    if (!s.ok()) return h->Fail("the capture was not written", FromGrpc(s, h->address));
  }
  absl::StatusOr<std::vector<std::string>> fetched = FetchCaptureFiles(
      h->connection->stub(), h->address, h->started.capture_id(), h->folder, true);
  if (!fetched.ok()) return h->Fail("its files could not be fetched", fetched.status());
}

// The loop of AwaitSteps: a signal's number, or 0. A host none of whose processes marks steps
// is said at once and every kNoStepsNoticeEvery; past --step_timeout it is waited for no more
// (its part of the capture is empty), and when that is every host the window ends: before, it
// waited the hour, silent.
int AwaitStepsOnEveryHost(std::vector<Host>* hosts, const CaptureWindow& window,
                          const sigset_t& stop_signals) {
  const absl::Time began = absl::Now();
  const timespec tick = absl::ToTimespec(absl::Milliseconds(200));
  absl::Time next_notice = began;
  for (;;) {
    const absl::Duration waited = absl::Now() - began;
    const bool notice = absl::Now() >= next_notice;
    if (notice) next_notice += kNoStepsNoticeEvery;
    bool done = true, stepped = false;
    for (Host& h : *hosts) {
      if (!h.in() || h.no_steps) continue;
      absl::StatusOr<StatusReply> now = h.connection->Status(2000);
      if (!now.ok()) {
        h.Fail("lost during the capture", now.status());
        Say(absl::StrCat("host ", h.name, " is left out: ", h.failure));
        continue;
      }
      const bool host_done = h.steps->Done(*now);
      stepped = stepped || h.steps->SeenSteps();
      if (host_done || h.steps->SeenSteps()) {
        done = host_done && done;
        continue;
      }
      // The first notice comes before the bound is looked at: said at once.
      if (notice) {
        Say(absl::StrCat("host ", h.name, ": ",
                         h.steps->NoStepsYet(
                             std::max(window.step_timeout - waited, absl::ZeroDuration()))));
      }
      if (waited >= window.step_timeout) {
        h.no_steps = true;
        Say(absl::StrCat("host ", h.name, ": ",
                         window.pids.empty() ? "no process" : "none of the pids",
                         " marked steps (nrtprof_step) within ",
                         absl::FormatDuration(window.step_timeout),
                         " (--step_timeout): its part of the capture ends"));
      } else {
        done = false;
      }
    }
    if (HostsIn(*hosts) == 0) return 0;
    if (done) {
      if (!stepped) return 0;  // no host had steps to wait for
      // The steps' device events come after their calls: a moment for them.
      const timespec settle = absl::ToTimespec(absl::Milliseconds(500));
      return std::max(sigtimedwait(&stop_signals, nullptr, &settle), 0);
    }
    if (waited > absl::Hours(1)) return 0;
    const int signal_number = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal_number > 0) return signal_number;
  }
}

// Until every host's processes have marked the capture's last step or ended (or a signal, or an
// hour); a process that ended before the last step is said. A host that stops answering is left
// out, said in one line, and waited for no more.
int AwaitSteps(std::vector<Host>* hosts, const CaptureWindow& window,
               const sigset_t& stop_signals) {
  for (Host& h : *hosts) {
    h.steps.emplace(window.pids, h.started.first_step() + window.iterations - 1);
  }
  const int signal_number = AwaitStepsOnEveryHost(hosts, window, stop_signals);
  for (const Host& h : *hosts) {
    for (const std::string& line : h.steps->EndedEarly()) {
      Say(absl::StrCat("host ", h.name, ": ", line));
    }
  }
  return signal_number;
}

std::string CaptureId() {
  const time_t now = time(nullptr);
  tm local;
  localtime_r(&now, &local);
  char id[64];
  strftime(id, sizeof(id), "hosts-%Y%m%d-%H%M%S", &local);
  return id;
}

// DIR/trace.pftrace and DIR/summary.{txt,json} from the hosts' fetched files; the summary text
// in *summary.
absl::Status WriteMerged(const std::vector<Host>& hosts, const std::string& capture_id,
                         const std::string& out, std::string* summary) {
  std::vector<HostTrace> traces;
  std::vector<HostSummary> summaries;
  for (const Host& h : hosts) {
    if (!h.in()) continue;
    // Its summary, read as `nrtprof summary` would (its trace checked to read back).
    absl::StatusOr<daemon::Summary> s = ReadCaptureSummary(h.folder);
    if (!s.ok()) return s.status();
    summaries.push_back({h.name, *std::move(s)});
    std::ifstream in(h.folder + "/trace.pftrace", std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    traces.push_back({h.name, h.hostname, bytes.str(), h.clock.monotonic_offset_ns,
                      h.clock.realtime_offset_ns, h.clock.error_bound_ns});
  }
  absl::StatusOr<std::string> merged = MergeHostTraces(
      traces, static_cast<int64_t>(RealtimeNs()) - static_cast<int64_t>(MonotonicNs()));
  if (!merged.ok()) return merged.status();
  if (absl::Status s = daemon::WriteFileAtomically(out + "/trace.pftrace", *merged); !s.ok()) {
    return s;
  }
  const daemon::Summary overall = MergeSummaries(capture_id, summaries);
  *summary = FormatHostsSummary(overall, summaries);
  if (absl::Status s = daemon::WriteFileAtomically(out + "/summary.txt", *summary); !s.ok()) {
    return s;
  }
  return daemon::WriteFileAtomically(
      out + "/summary.json",
      daemon::FormatSummary(overall, daemon::SummarySortKey::kSelfDevice,
                            daemon::SummaryFormat::kJson));
}

std::string WindowText(const CaptureWindow& window) {
  if (window.iterations != 0) {
    return absl::StrCat(window.iterations, " whole step", window.iterations == 1 ? "" : "s",
                        ", waiting at most ", absl::FormatDuration(window.step_timeout),
                        " for a process that marks steps (--step_timeout); Ctrl-C ends it early");
  }
  std::string text;
  if (window.last != absl::ZeroDuration()) {
    text = absl::StrCat("the last ", absl::FormatDuration(window.last), " from the flight recorder");
  }
  if (window.duration != absl::ZeroDuration()) {
    absl::StrAppend(&text, text.empty() ? "" : " and ", "recording for ",
                    absl::FormatDuration(window.duration), "; Ctrl-C ends it early");
  }
  return text;
}

// Connects to every host at once, then measures their clocks one at a time: the round trips
// of several at once would delay each other on this machine's cores, and the bound is half the
// shortest one.
void ConnectAll(std::vector<Host>* hosts) {
  const TlsPaths tls = TlsPathsFromFlags();
  ForEachHost(hosts, [&tls](Host* h) { Connect(tls, h); });
  for (Host& h : *hosts) {
    if (!h.in()) continue;
    MeasureHostClock(&h);
    if (!h.in()) Say(absl::StrCat("host ", h.name, " is left out: ", h.failure));
  }
}

// Starts the capture on every host at one instant of our clock, named to each in its own;
// returns that instant.
uint64_t StartAll(const CaptureWindow& window, const std::string& capture_id,
                  std::vector<Host>* hosts) {
  uint64_t slowest = 0;
  for (const Host& h : *hosts) {
    if (h.in()) slowest = std::max(slowest, h.clock.max_round_trip_ns);
  }
  const absl::Duration lead =
      std::min(kMaxStartLead, kMinStartLead + 2 * absl::Nanoseconds(slowest));
  const uint64_t local_start = MonotonicNs() + absl::ToInt64Nanoseconds(lead);
  StartCaptureRequest request;
  request.set_capture_id(capture_id);
  request.set_stack_depth(window.stacks);
  for (uint32_t pid : window.pids) request.add_pids(pid);
  request.set_last_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(window.last)));
  request.set_iterations(window.iterations);
  request.set_step_multiple(window.step_multiple);
  for (CaptureFileKind kind : window.files) request.add_files(kind);
  request.set_fetch(true);
  ForEachHost(hosts, [&](Host* h) { Start(request, local_start, h); });
  return local_start;
}

// Whole steps: every host takes the same ones, the latest host's next, when the hosts' next
// steps are at most kMaxStepSpread apart (StopCaptureRequest.first_step tells each daemon at the
// stop; its flight recorder holds them). A host whose daemon has seen no step yet says 0, its
// processes' first: a job that has just begun, whose steps reach that daemon up to a batch late
// (500 ms), while another host's daemon has seen a few. It takes the latest host's next too;
// left at 0, it captured steps 0 to 2 and the other host 3 to 5 (a loaded CI run).
void AlignSteps(const CaptureWindow& window, std::vector<Host>* hosts) {
  if (window.iterations == 0) return;
  uint64_t first = UINT64_MAX, last = 0;
  for (const Host& h : *hosts) {
    if (!h.in()) continue;
    first = std::min<uint64_t>(first, h.started.first_step());
    last = std::max<uint64_t>(last, h.started.first_step());
  }
  if (first == UINT64_MAX || first == last || last - first > kMaxStepSpread) return;
  for (Host& h : *hosts) {
    if (h.in()) h.started.set_first_step(last);
  }
}

// What started where: a line per host with its clock (and steps, and a late start).
void SayStarted(const std::vector<Host>& hosts, const CaptureWindow& window,
                const std::string& capture_id, const std::string& out, uint64_t local_start) {
  fprintf(stderr, "nrtprof: capture %s on %zu host%s -> %s: %s\n", capture_id.c_str(),
          HostsIn(hosts), HostsIn(hosts) == 1 ? "" : "s", out.c_str(), WindowText(window).c_str());
  std::set<uint64_t> first_steps;
  for (const Host& h : hosts) {
    if (!h.in()) continue;
    std::string line = absl::StrCat("  ", h.name, " (", h.hostname, "): clock ",
                                    FormatOffset(h.clock.realtime_offset_ns,
                                                 h.clock.error_bound_ns));
    if (window.iterations != 0) {
      first_steps.insert(h.started.first_step());
      absl::StrAppend(&line, ", steps ", h.started.first_step(), " to ",
                      h.started.first_step() + window.iterations - 1);
    }
    // A window opened late is said: the hosts' windows differ by that much at their start.
    if (const uint64_t late = LateBy(h, local_start); late > kLateStartNs) {
      absl::StrAppend(&line, "; its window began ", daemon::FormatDuration(late),
                      " late (the start reached it after the instant named)");
    }
    fprintf(stderr, "%s\n", line.c_str());
  }
  if (first_steps.size() > 1) {
    Say("the hosts' processes were not in step: they record different step numbers (a larger "
        "--step_multiple puts them on the same ones)");
  }
}

// The window: its duration, or until every host's processes made the last step; Ctrl-C or
// SIGTERM ends it early (said).
void AwaitWindow(std::vector<Host>* hosts, const CaptureWindow& window,
                 const sigset_t& stop_signals) {
  const absl::Time began = absl::Now();
  int signal_number = 0;
  if (window.iterations != 0) {
    signal_number = AwaitSteps(hosts, window, stop_signals);
  } else if (window.duration != absl::ZeroDuration()) {
    const timespec wait = absl::ToTimespec(window.duration);
    signal_number = std::max(sigtimedwait(&stop_signals, nullptr, &wait), 0);
  }
  if (signal_number > 0) {
    Say(absl::StrCat(signal_number == SIGINT ? "interrupted" : "terminated", " after ",
                     absl::FormatDuration(absl::Trunc(absl::Now() - began,
                                                      absl::Milliseconds(100))),
                     ": ending the window early"));
  }
}

// The end, as `nrtprof capture` says it for one host: the hosts' notes, why a host's part is
// empty, the table, the totals and where the files are. Returns the events of every host.
uint64_t SayWritten(const std::vector<Host>& hosts, const CaptureWindow& window,
                    const std::string& out, const std::string& summary) {
  uint64_t events = 0, dropped = 0, processes = 0;
  for (const Host& h : hosts) {
    if (!h.in()) continue;
    events += h.files.events();
    dropped += h.files.events_dropped();
    processes += h.files.processes();
    // A note may quote what a process sent (its executable): visible text only.
    for (const std::string& note : h.files.notes()) {
      Say(absl::StrCat(h.name, ": ", TerminalText(note)));
    }
    if (h.files.events() == 0) {
      Say(absl::StrCat("host ", h.name, ": its part of the capture is empty: ",
                       EmptyCaptureWhy(h.files, window.pids, h.started, window.iterations)));
    }
  }
  fprintf(stderr, "\n%s\n", summary.c_str());
  fprintf(stderr,
          "nrtprof: %llu events from %llu process%s on %zu of %zu hosts, %llu dropped; files in "
          "%s:\n",
          static_cast<unsigned long long>(events), static_cast<unsigned long long>(processes),
          processes == 1 ? "" : "es", HostsIn(hosts), hosts.size(),
          static_cast<unsigned long long>(dropped), out.c_str());
  fprintf(stderr, "  trace.pftrace (every host, on this machine's clock)\n  summary.txt\n");
  for (const Host& h : hosts) {
    if (h.in()) fprintf(stderr, "  %s/\n", h.folder.substr(out.size() + 1).c_str());
  }
  fprintf(stderr,
          "nrtprof: open %s/trace.pftrace in the Perfetto UI (https://ui.perfetto.dev, \"Open "
          "trace file\")\n",
          out.c_str());
  return events;
}

}  // namespace

bool StepWatch::Done(const StatusReply& status) {
  std::set<uint32_t> present;
  bool done = true;
  connected_ = 0;
  for (const ConnectedProcess& p : status.processes()) {
    if (!pids_.empty() && std::find(pids_.begin(), pids_.end(), p.pid()) == pids_.end()) continue;
    ++connected_;
    if (p.last_step() < 0) continue;
    present.insert(p.pid());
    gone_.erase(p.pid());  // back (a stream that broke and came again)
    last_step_[p.pid()] = p.last_step();
    done = done && p.last_step() >= static_cast<int64_t>(final_step_);
  }
  for (const auto& [pid, step] : last_step_) {
    if (present.count(pid) == 0) gone_.insert(pid);
  }
  return !last_step_.empty() && done;
}

std::string StepWatch::NoStepsYet(absl::Duration left) const {
  const std::string who =
      pids_.empty() ? "no process connected marks steps"
                    : absl::StrCat("none of the pids (", absl::StrJoin(pids_, ", "),
                                   ") marks steps");
  const std::string connected =
      connected_ == 0 ? (pids_.empty() ? "none is connected" : "none of them is connected")
                      : absl::StrCat(connected_, " connected, none has marked one");
  return absl::StrCat(who, " (nrtprof_step): ", connected, "; waiting ",
                      absl::FormatDuration(absl::Ceil(left, absl::Seconds(1))),
                      " more for one (--step_timeout)");
}

std::vector<std::string> StepWatch::EndedEarly() const {
  std::vector<std::string> lines;
  for (uint32_t pid : gone_) {
    const int64_t step = last_step_.at(pid);
    if (step >= static_cast<int64_t>(final_step_)) continue;
    lines.push_back(absl::StrCat("pid ", pid, " ended before step ", final_step_));
  }
  return lines;
}

int CaptureOnHosts(const std::string& list, const CaptureWindow& window, const std::string& out,
                   const sigset_t& stop_signals) {
  if (out.empty()) {
    Say("--hosts needs --out DIR: the folder on this machine where every host's files go");
    return 2;
  }
  absl::StatusOr<std::vector<Host>> parsed = ParseHosts(list, out);
  if (!parsed.ok()) {
    Say(std::string(parsed.status().message()));
    return 2;
  }
  std::vector<Host>& hosts = *parsed;
  // Before any host records: a folder already holding a capture would refuse its files after.
  absl::Status free = CheckCaptureFolderFree(out);
  for (const Host& h : hosts) {
    if (free.ok()) free = CheckCaptureFolderFree(h.folder);
  }
  if (!free.ok()) {
    Say(std::string(free.message()));
    return 2;
  }
  ConnectAll(&hosts);
  if (HostsIn(hosts) == 0) {
    Say("no host could be reached; nothing was captured");
    return 1;
  }
  const std::string capture_id = CaptureId();
  const uint64_t local_start = StartAll(window, capture_id, &hosts);
  if (HostsIn(hosts) == 0) {
    Say("no host started the capture; nothing was captured");
    return 1;
  }
  AlignSteps(window, &hosts);
  SayStarted(hosts, window, capture_id, out, local_start);
  AwaitWindow(&hosts, window, stop_signals);
  // As for one host: what the programs made by the window's end arrives within 100 ms.
  const uint32_t wait_ms = 100;
  ForEachHost(&hosts, [wait_ms](Host* h) { StopAndFetch(wait_ms, h); });
  if (HostsIn(hosts) == 0) {
    Say("no host's capture was written");
    return 1;
  }
  std::string summary;
  if (absl::Status s = WriteMerged(hosts, capture_id, out, &summary); !s.ok()) {
    Say(absl::StrCat("the hosts' files are in ", out, " but were not merged: ", s.message()));
    return 1;
  }
  // Written, but with nothing in it from any host: a script tells that from success by the code.
  return SayWritten(hosts, window, out, summary) == 0 ? kEmptyCaptureExit : 0;
}

}  // namespace nrtprof::cli
