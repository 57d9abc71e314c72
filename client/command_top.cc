// `nrtprof top [--interval D] [--window D] [--iterations N] [--addr ADDRESS ...]`: a live view
// of the host, as top(1) gives one: the processes, models and ops with the most device time in
// the last few seconds, from the standing daemon's flight recorder (Control.Top), refreshed
// every --interval. On a terminal it redraws one screen and `q` (or Ctrl-C) quits; otherwise
// it prints plain blocks of lines, one per refresh, with no terminal codes.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "common/terminal_text.h"
#include "trace/summary.h"

ABSL_FLAG(absl::Duration, interval, absl::Seconds(2), "time between refreshes (at least 100ms)");
ABSL_FLAG(absl::Duration, window, absl::Seconds(5),
          "how far back each refresh looks, in the standing daemon's flight recorder (100ms to "
          "the recorder's span)");
ABSL_DECLARE_FLAG(uint32_t, iterations);  // command_capture.cc (top's help: cli_main.cc)

namespace nrtprof::cli {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

// The terminal in non-canonical mode without echo while top runs (a key is read at once),
// restored when it goes.
class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    struct termios raw = saved_;
    raw.c_lflag &= ~(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  struct termios saved_;
  bool active_ = false;
};

std::string Busy(uint64_t device_ns, uint64_t window_ns) {
  return window_ns == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * device_ns / window_ns);
}

// A name as a column shows it: whatever bytes the process sent, one line of visible text
// (an ESC sequence in a model's name must not drive the terminal: terminal_text.h), cut to
// `width`.
std::string Clip(const std::string& s, size_t width) { return TerminalTextClipped(s, width); }

// One screen: a header line, then the three lists, at most `rows` lines each. `columns`: the
// terminal's width, which a process's job is cut to (0: not a terminal, nothing cut).
std::string Screen(const TopReply& top, const std::string& address, size_t rows, size_t columns) {
  char now[32];
  const time_t t = time(nullptr);
  struct tm local;
  localtime_r(&t, &local);
  strftime(now, sizeof(now), "%H:%M:%S", &local);
  std::string out = absl::StrFormat(
      "nrtprof top - %s - %s - the last %.1f s: %d process%s, %llu events\n\n", now, address,
      top.window_ns() / 1e9, top.processes_size(), top.processes_size() == 1 ? "" : "es",
      static_cast<unsigned long long>(top.events()));
  // A process by its executable's base name, its rank and its job as `nrtprof status` and
  // `nrtprof fleet top --by rank` show them ("-": it said none); the name and rank together as
  // wide as a model's name, so that the times line up. The job last, as it may be long.
  absl::StrAppend(&out, absl::StrFormat("%-8s %-27s %4s %12s %7s %14s  %s\n", "PID", "PROCESS",
                                        "RANK", "DEVICE TIME", "BUSY", "RUNTIME CALLS", "JOB"));
  for (int i = 0; i < top.processes_size() && i < static_cast<int>(rows); ++i) {
    const TopRow& p = top.processes(i);
    std::string line = absl::StrFormat("%-8u %-27s %4s %12s %7s %14u  ", p.pid(),
                                       Clip(p.name().substr(p.name().rfind('/') + 1), 27),
                                       p.has_rank() ? std::to_string(p.rank()) : "-",
                                       daemon::FormatDuration(p.device_ns()),
                                       Busy(p.device_ns(), top.window_ns()), p.calls());
    // On a terminal the job is cut to the width left (at least 16 characters), so that a line
    // does not wrap and push the screen down; piped, it is whole.
    const size_t room = columns > line.size() + 16 ? columns - line.size() : 16;
    const std::string job = p.job().empty() ? "-" : p.job();
    absl::StrAppend(&line, columns == 0 ? TerminalText(job) : Clip(job, room), "\n");
    out += line;
  }
  // Device time the window cannot show yet: the program holds it (its own system trace).
  for (int i = 0; i < top.processes_size() && i < static_cast<int>(rows); ++i) {
    const TopRow& p = top.processes(i);
    if (p.executions_held_by_program() == 0) continue;
    absl::StrAppend(
        &out, absl::StrFormat(
                  p.executions_held_lost()
                      ? "  pid %u: %u executions without device time: the program ran the "
                        "runtime's system trace itself and ended without fetching them\n"
                      : "  pid %u: %u executions without device time yet: the program runs the "
                        "runtime's system trace itself, and nrtprof receives its device events "
                        "only as it fetches them\n",
                  p.pid(), p.executions_held_by_program()));
  }
  out += "\n";
  absl::StrAppend(&out, absl::StrFormat("%-8s %-32s %12s %7s %14s\n", "PID", "MODEL", "DEVICE TIME",
                                        "BUSY", "EXECUTIONS"));
  for (int i = 0; i < top.models_size() && i < static_cast<int>(rows); ++i) {
    const TopRow& m = top.models(i);
    absl::StrAppend(&out, absl::StrFormat("%-8u %-32s %12s %7s %14u\n", m.pid(), Clip(m.name(), 32),
                                          daemon::FormatDuration(m.device_ns()),
                                          Busy(m.device_ns(), top.window_ns()), m.calls()));
  }
  absl::StrAppend(&out, absl::StrFormat("\n%-41s %12s %7s %14s %12s\n", "OP", "SELF NEURON", "BUSY",
                                        "CALLS", "SELF CPU"));
  for (int i = 0; i < top.ops_size() && i < static_cast<int>(rows); ++i) {
    const TopRow& o = top.ops(i);
    absl::StrAppend(&out, absl::StrFormat("%-41s %12s %7s %14u %12s\n", Clip(o.name(), 41),
                                          daemon::FormatDuration(o.device_ns()),
                                          Busy(o.device_ns(), top.window_ns()), o.calls(),
                                          daemon::FormatDuration(o.host_ns())));
  }
  if (top.processes_size() == 0) {
    absl::StrAppend(&out,
                    "\n(no process sent events in the window: programs stream to this "
                    "daemon when started with the shim preloaded)\n");
  }
  return out;
}

// Waits `d`; true if the user asked to quit (q, or Ctrl-C) meanwhile.
bool WaitOrQuit(absl::Duration d, bool keys) {
  const absl::Time until = absl::Now() + d;
  while (!g_interrupted) {
    const int64_t left_ms = absl::ToInt64Milliseconds(until - absl::Now());
    if (left_ms <= 0) return false;
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    if (poll(&p, keys ? 1 : 0, static_cast<int>(left_ms)) > 0 && (p.revents & POLLIN)) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) return true;
    }
  }
  return true;
}

}  // namespace

int TopCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    fprintf(stderr, "nrtprof top: unexpected argument '%s' (see nrtprof top --help)\n", args[1]);
    return 2;
  }
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  const absl::Duration window = absl::GetFlag(FLAGS_window);
  const int64_t iterations = absl::GetFlag(FLAGS_iterations);
  if (interval < absl::Milliseconds(100)) {
    fprintf(stderr, "nrtprof top: --interval must be at least 100ms\n");
    return 2;
  }
  if (window < absl::Milliseconds(100) || window > absl::Hours(1)) {
    fprintf(stderr, "nrtprof top: --window must be from 100ms to 1h\n");
    return 2;
  }
  int exit_code = 0;
  std::string address;
  std::unique_ptr<DaemonConnection> connection =
      ConnectToStandingDaemon("top", &exit_code, &address);
  if (connection == nullptr) return exit_code;

  const bool terminal = isatty(STDOUT_FILENO) == 1;
  const bool keys = terminal && isatty(STDIN_FILENO) == 1;
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  RawTerminal* raw = keys ? new RawTerminal() : nullptr;
  if (terminal) fputs("\x1b[?1049h\x1b[?25l", stdout);  // the alternate screen, no cursor
  int code = 0;
  for (int64_t i = 0; iterations == 0 || i < iterations; ++i) {
    TopRequest request;
    request.set_window_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(window)));
    TopReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = connection->stub()->Top(&context, request, &reply);
    if (!status.ok()) {
      if (terminal) fputs("\x1b[?25h\x1b[?1049l", stdout);
      fprintf(stderr, "nrtprof top: %s\n", status.error_message().c_str());
      code = 1;
      break;
    }
    size_t rows = 10, columns = 0;
    if (struct winsize ws;
        terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
      rows = std::max<size_t>(2, (ws.ws_row - 9) / 3);
      columns = ws.ws_col;
    }
    std::string screen = Screen(reply, address, rows, columns);
    if (terminal) {
      absl::StrAppend(&screen, "\n", keys ? "q quits" : "Ctrl-C quits", "; refreshed every ",
                      absl::FormatDuration(interval));
      fputs("\x1b[H\x1b[2J", stdout);
    } else {
      screen += "\n";
    }
    fputs(screen.c_str(), stdout);
    fflush(stdout);
    if ((iterations != 0 && i + 1 == iterations) || WaitOrQuit(interval, keys)) break;
  }
  if (terminal && code == 0) fputs("\x1b[?25h\x1b[?1049l", stdout);
  fflush(stdout);
  delete raw;
  return code;
}

}  // namespace nrtprof::cli
