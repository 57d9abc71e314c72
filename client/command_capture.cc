// `nrtprof capture [--last L] [--duration D] [--pid PID]... [--out DIR]`: records, on a
// standing daemon, every process connected now or connecting within the window (or only the
// named pids) for D, then writes the capture as `nrtprof run` does; with --last, the window
// starts L before now, from the daemon's flight recorder (--last alone: written at once).
// Ctrl-C (or SIGTERM) ends the window early and still writes it. Nothing is started: the
// programs must already stream to the daemon (run with the shim preloaded). Exits 0, 1 on an
// error, 2 on a usage error, and kEmptyCaptureExit (3) for a capture written but empty.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/capture_hosts.h"
#include "client/capture_report.h"
#include "client/commands.h"
#include "client/progress.h"
#include "client/daemon_connection.h"
#include "client/daemon_credentials.h"
#include "client/flags.h"
#include "client/locate.h"
#include "common/address.h"
#include "common/terminal_text.h"

ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "how long to record, as 10s, 1m30s or 500ms (at most 24h)");
ABSL_FLAG(absl::Duration, last, absl::ZeroDuration(),
          "also the time before now, as 30s, from the daemon's flight recorder (at most 24h)");
// Shared with top, whose --help says its own meaning (cli_main.cc).
ABSL_FLAG(uint32_t, iterations, 0,
          "N whole training steps (nrtprof_step) of each process instead of a time window");
ABSL_FLAG(uint32_t, step_multiple, 1,
          "with --iterations: start at the next step number that is a multiple of this, so that "
          "processes in step record the same steps");
ABSL_FLAG(absl::Duration, step_timeout, absl::Seconds(60),
          "with --iterations: how long to wait while no process connected marks steps "
          "(nrtprof_step), said every 10s; then the capture ends, empty (exit 3). At most 1h");
ABSL_FLAG(std::string, hosts, "",
          "capture on these daemons at one instant, as HOST:PORT,HOST:PORT,... (TCP, with the "
          "same --tls_ca and --token_file or client certificate for each); their files come "
          "to --out, one folder per host, with a merged trace.pftrace and summary.txt");
ABSL_FLAG(std::string, pid, "",
          "record only these processes: a pid, or several (--pid 1,2 or --pid 1 --pid 2)");

namespace nrtprof::cli {
namespace {

constexpr char kCaptureUsage[] =
    "nrtprof capture (--duration D | --last L [--duration D] | --iterations N "
    "[--step_multiple K] [--step_timeout T]) [--pid PID]... [--out DIR] "
    "[--stacks N] [--addr ADDRESS | --hosts HOST:PORT,... --out DIR] "
    "[--tls_ca PEM --token_file PATH]";

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof capture: %s\n", line.c_str());
  return code;
}

// absl keeps only the last of a repeated flag: every --pid joins one list first.
std::vector<char*> JoinPidFlags(int argc, char** argv, std::string* joined) {
  std::vector<std::string> pids;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") {
      for (; i < argc; ++i) rest.push_back(argv[i]);
      break;
    }
    if ((a == "--pid" || a == "-pid") && i + 1 < argc) {
      pids.push_back(argv[++i]);
    } else if (absl::StartsWith(a, "--pid=") || absl::StartsWith(a, "-pid=")) {
      pids.push_back(std::string(a.substr(a.find('=') + 1)));
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!pids.empty()) {
    *joined = absl::StrCat("--pid=", absl::StrJoin(pids, ","));
    rest.push_back(joined->data());
  }
  return rest;
}

// The capture's window and files from the flags (after ParseCommandLine): 0, or the exit code
// after one line on stderr saying what is wrong.
int WindowFromFlags(CaptureWindow* window, std::string* out_dir) {
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration last = absl::GetFlag(FLAGS_last);
  // A flag given with its default's value (--last 0s, --iterations 0) was still asked for: its
  // own error, not the one for a capture without a window.
  if (last < absl::ZeroDuration() || last > absl::Hours(24) ||
      (FlagGiven("last") && last == absl::ZeroDuration())) {
    return Fail(
        absl::StrCat("--last must be more than 0 and at most 24h (as 30s); usage: ", kCaptureUsage),
        2);
  }
  const uint32_t iterations = absl::GetFlag(FLAGS_iterations);
  if (FlagGiven("iterations") && iterations == 0) {
    return Fail("--iterations must be from 1 to 100000", 2);
  }
  if (FlagGiven("step_multiple") && iterations == 0) {
    return Fail(absl::StrCat("--step_multiple goes with --iterations (it picks the first step); "
                             "usage: ",
                             kCaptureUsage),
                2);
  }
  const absl::Duration step_timeout = absl::GetFlag(FLAGS_step_timeout);
  if (FlagGiven("step_timeout") && iterations == 0) {
    return Fail(absl::StrCat("--step_timeout goes with --iterations (the wait for a process that "
                             "marks steps); usage: ",
                             kCaptureUsage),
                2);
  }
  if (step_timeout <= absl::ZeroDuration() || step_timeout > absl::Hours(1)) {
    return Fail("--step_timeout must be more than 0 and at most 1h (as 60s)", 2);
  }
  if (iterations != 0 && (duration != absl::ZeroDuration() || last != absl::ZeroDuration())) {
    return Fail(absl::StrCat("--iterations takes whole steps: not with --duration or --last; "
                             "usage: ",
                             kCaptureUsage),
                2);
  }
  if (iterations > 100000 || absl::GetFlag(FLAGS_step_multiple) == 0 ||
      absl::GetFlag(FLAGS_step_multiple) > 1000000) {
    return Fail("--iterations must be from 1 to 100000 and --step_multiple from 1 to 1000000", 2);
  }
  if (iterations == 0 &&
      (duration < absl::ZeroDuration() || duration > absl::Hours(24) ||
       (duration == absl::ZeroDuration() && last == absl::ZeroDuration()))) {
    return Fail(absl::StrCat("--duration must be more than 0 and at most 24h (as 10s), or "
                             "give --last; usage: ",
                             kCaptureUsage),
                2);
  }
  std::vector<uint32_t> pids;
  if (const std::string list = absl::GetFlag(FLAGS_pid); !list.empty()) {
    for (absl::string_view p : absl::StrSplit(list, ',')) {
      uint32_t pid = 0;
      if (!absl::SimpleAtoi(p, &pid) || pid == 0) {
        return Fail(absl::StrCat("--pid '", p, "' is not a process id"), 2);
      }
      pids.push_back(pid);
    }
  }
  const int stacks = std::max(absl::GetFlag(FLAGS_stacks), 0);  // -1: not given
  if (stacks > 64) return Fail("--stacks must be from 0 to 64", 2);
  const absl::StatusOr<std::vector<CaptureFileKind>> kinds = FileKindsFromFlag();
  if (!kinds.ok()) return Fail(std::string(kinds.status().message()), 2);
  *window = CaptureWindow{duration, last, iterations, absl::GetFlag(FLAGS_step_multiple),
                         pids, static_cast<uint32_t>(stacks), *kinds, step_timeout};
  *out_dir = Absolute(absl::GetFlag(FLAGS_out));
  return 0;
}

// The daemon at `address`, or null with the exit code after one line on stderr.
std::unique_ptr<DaemonConnection> ConnectForCapture(const std::string& address, int* code) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      CredentialsFor(address, TlsPathsFromFlags());
  if (!credentials.ok()) {
    *code = Fail(std::string(credentials.status().message()),
                 credentials.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<DaemonConnection>> connected =
      DaemonConnection::Connect(address, 2000, *credentials);
  if (!connected.ok()) {
    const bool absent = connected.status().code() == absl::StatusCode::kUnavailable ||
                        connected.status().code() == absl::StatusCode::kNotFound;
    *code = Fail(absl::StrCat(connected.status().message(),
                              absent ? " (capture records programs streaming to a standing "
                                       "daemon: start nrtprofd first, or use nrtprof run)"
                                     : ""),
                 connected.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
    return nullptr;
  }
  return *std::move(connected);
}

// Says which of the pids asked for are not connected (yet): they are recorded if they connect
// within the window.
void SayWhichPidsAreAbsent(DaemonConnection& connection, const std::vector<uint32_t>& pids,
                           const std::string& address) {
  absl::StatusOr<StatusReply> before = connection.Status(2000);
  std::set<uint32_t> connected_pids;
  if (before.ok()) {
    for (const ConnectedProcess& p : before->processes()) connected_pids.insert(p.pid());
  }
  for (uint32_t pid : pids) {
    if (connected_pids.count(pid) == 0) {
      fprintf(stderr,
              "nrtprof capture: pid %u is not connected to the daemon at %s; it is recorded if it "
              "connects within the window\n",
              pid, address.c_str());
    }
  }
}

}  // namespace

int CaptureCommand(int argc, char** argv) {
  // Before any gRPC thread exists, so that none of them takes the signals: they end the window.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::string joined;
  std::vector<char*> joined_argv = JoinPidFlags(argc, argv, &joined);
  const std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(joined_argv.size()), joined_argv.data());
  if (args.size() > 1) {
    return Fail(absl::StrCat("unexpected argument '", args[1], "'; usage: ", kCaptureUsage), 2);
  }
  CaptureWindow window;
  std::string out;
  if (const int code = WindowFromFlags(&window, &out); code != 0) return code;
  const absl::Duration duration = window.duration;
  const absl::Duration last = window.last;
  const uint32_t iterations = window.iterations;
  const absl::Duration step_timeout = window.step_timeout;
  const std::vector<uint32_t>& pids = window.pids;
  const std::vector<CaptureFileKind>& kinds = window.files;
  if (const std::string hosts = absl::GetFlag(FLAGS_hosts); !hosts.empty()) {
    if (!absl::GetFlag(FLAGS_addr).empty()) {
      return Fail("--hosts names every daemon: not with --addr", 2);
    }
    auto has = [&](CaptureFileKind k) {
      return kinds.empty() || std::find(kinds.begin(), kinds.end(), k) != kinds.end();
    };
    if (!has(CAPTURE_FILE_KIND_PFTRACE) || !has(CAPTURE_FILE_KIND_SUMMARY)) {
      return Fail("--hosts merges every host's trace.pftrace and summary: --files must name "
                  "pftrace and summary",
                  2);
    }
    return CaptureOnHosts(hosts, window, out, stop_signals);
  }

  const std::string flag = absl::GetFlag(FLAGS_addr);
  const std::string address = flag.empty() ? DaemonAddress() : ToGrpcTarget(flag);
  int code = 0;
  const std::unique_ptr<DaemonConnection> connected = ConnectForCapture(address, &code);
  if (connected == nullptr) return code;
  DaemonConnection& connection = *connected;

  SayWhichPidsAreAbsent(connection, pids, address);

  StartCaptureRequest start;
  start.set_output_dir(out);
  start.set_stack_depth(window.stacks);
  for (uint32_t pid : pids) start.add_pids(pid);
  start.set_last_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(last)));
  start.set_iterations(iterations);
  start.set_step_multiple(absl::GetFlag(FLAGS_step_multiple));
  for (CaptureFileKind kind : kinds) start.add_files(kind);
  StartCaptureReply capture;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const absl::Status s =
        FromGrpc(connection.stub()->StartCapture(&context, start, &capture), address);
    if (!s.ok()) return Fail(absl::StrCat("cannot start a capture: ", s.message()));
  }
  const std::string past =
      last == absl::ZeroDuration() ? "" : absl::StrCat("the last ", absl::FormatDuration(last));
  int signal_number = 0;
  const absl::Time began = absl::Now();
  if (iterations != 0) {
    const uint64_t first = capture.first_step(), final_step = first + iterations - 1;
    fprintf(stderr,
            "nrtprof: capture %s -> %s (daemon %s): steps %llu to %llu of each process, waiting "
            "at most %s for a process that marks steps (--step_timeout); Ctrl-C ends it early\n",
            capture.capture_id().c_str(), CaptureDestination(capture, out).c_str(),
            address.c_str(), static_cast<unsigned long long>(first),
            static_cast<unsigned long long>(final_step),
            absl::FormatDuration(step_timeout).c_str());
    // Until every process that marks steps (of the pids, if named) has marked the last one, or
    // has ended; at most an hour. While none marks steps the user hears so at once and every
    // kNoStepsNoticeEvery, and after --step_timeout the capture ends by itself: a capture of
    // steps no process makes would otherwise wait the hour, silent.
    const timespec tick = absl::ToTimespec(absl::Milliseconds(200));
    StepWatch steps(pids, final_step);
    absl::Time next_notice = began;
    for (;;) {
      absl::StatusOr<StatusReply> now = connection.Status(2000);
      if (!now.ok()) break;  // StopCapture below says what is wrong
      if (steps.Done(*now)) {
        // The steps' device events come after their calls (the runtime's trace is fetched
        // every so often): a moment for them.
        const timespec settle = absl::ToTimespec(absl::Milliseconds(500));
        signal_number = sigtimedwait(&stop_signals, nullptr, &settle);
        break;
      }
      const absl::Duration waited = absl::Now() - began;
      if (!steps.SeenSteps()) {
        // The first notice comes before the bound is looked at: said at once, whatever the
        // first status cost.
        if (absl::Now() >= next_notice) {
          fprintf(stderr, "nrtprof capture: %s\n",
                  steps.NoStepsYet(std::max(step_timeout - waited, absl::ZeroDuration())).c_str());
          next_notice += kNoStepsNoticeEvery;
        }
        if (waited >= step_timeout) {
          fprintf(stderr,
                  "nrtprof capture: %s marked steps (nrtprof_step) within %s (--step_timeout): "
                  "the capture ends\n",
                  pids.empty() ? "no process" : "none of the pids",
                  absl::FormatDuration(step_timeout).c_str());
          break;
        }
      }
      if (waited > absl::Hours(1)) break;
      signal_number = sigtimedwait(&stop_signals, nullptr, &tick);
      if (signal_number > 0) break;
    }
    for (const std::string& line : steps.EndedEarly()) {
      fprintf(stderr, "nrtprof capture: %s\n", line.c_str());
    }
  } else if (Quiet()) {
  } else if (duration == absl::ZeroDuration()) {
    fprintf(stderr, "nrtprof: capture %s -> %s (daemon %s): %s, from the flight recorder\n",
            capture.capture_id().c_str(), CaptureDestination(capture, out).c_str(),
            address.c_str(), past.c_str());
  } else {
    fprintf(stderr,
            "nrtprof: capture %s -> %s (daemon %s): %s%srecording for %s; Ctrl-C ends it "
            "early\n",
            capture.capture_id().c_str(), CaptureDestination(capture, out).c_str(),
            address.c_str(), past.c_str(), past.empty() ? "" : " and ",
            absl::FormatDuration(duration).c_str());
  }

  if (iterations == 0 && duration != absl::ZeroDuration()) {
    const timespec wait = absl::ToTimespec(duration);
    signal_number = sigtimedwait(&stop_signals, nullptr, &wait);
  }
  if (signal_number > 0) {
    fprintf(stderr, "nrtprof capture: %s after %s: ending the window early\n",
            signal_number == SIGINT ? "interrupted" : "terminated",
            absl::FormatDuration(absl::Trunc(absl::Now() - began, absl::Milliseconds(100)))
                .c_str());
  }

  StopCaptureRequest stop;
  stop.set_capture_id(capture.capture_id());
  // The stop asks running programs for what they recorded up to it (they answer within a
  // few ms; a program that is exiting sends its final batch), and the daemon waits for them at
  // most this long; `--last` alone too, so that it holds the last instants before the request.
  // Longer would stretch the window: with the flight recorder on, the programs go on recording.
  stop.set_wait_ms(100);
  CaptureFiles files;
  {
    Progress progress("writing the capture");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const absl::Status s =
        FromGrpc(connection.stub()->StopCapture(&context, stop, &files), address);
    if (!s.ok()) return Fail(absl::StrCat("the capture was not written: ", s.message()));
  }
  for (const std::string& note : files.notes()) {
    fprintf(stderr, "nrtprof capture: %s\n", TerminalText(note).c_str());  // quotes executables
  }
  const bool empty = files.events() == 0;
  if (empty) {
    fprintf(stderr, "nrtprof capture: the capture is empty: %s\n",
            EmptyCaptureWhy(files, pids, capture, iterations).c_str());
  }
  if (!ReportCapture(connection, capture, out, std::move(files), "nrtprof capture")) return 1;
  // Written, but with nothing in it: a script tells that from success by the code.
  return empty ? kEmptyCaptureExit : 0;
}

}  // namespace nrtprof::cli
