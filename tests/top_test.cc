// `nrtprof top` as a user meets it: in a terminal (a real tmux, started by the test: its screen
// read with capture-pane, keys typed with send-keys) it shows the ops, models and process of a
// program that streamed to the standing daemon, and q quits it; piped, it prints plain blocks;
// a daemon without a flight recorder is one line; names a program gave (any bytes) are shown as
// visible text, in top and in status.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Daemon;
using testing::Result;
using testing::Runfile;
using testing::RunProcess;

const std::map<std::string, std::string> kCliEnv = {{"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

// The RMSNorm demo's naive variant, streaming to `daemon` (which records it in its flight
// recorder, no capture asked), as rank 5 of a job: torchrun gives a worker its rank in RANK, and
// the Neuron runtime the job's collective root in NEURON_RT_ROOT_COMM_ID. `env` adds to that.
const char kRootCommId[] = "10.1.2.3:62182";
void RunProgram(const Daemon& daemon, std::map<std::string, std::string> env = {}) {
  env.insert({{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
              {"NRTPROF_ADDR", daemon.addr()},
              {"NRT_SIM_TIME_SCALE", "0"},
              {"RANK", "5"},
              {"NEURON_RT_ROOT_COMM_ID", kRootCommId}});
  const Result r =
      RunProcess({Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "20"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// The process row of `rank` in top's output (its lines up to the blank line after the
// processes), without its pid; empty if there is none.
std::string ProcessRow(const std::string& out, const std::string& rank) {
  const size_t start = out.find("\nPID ");
  if (start == std::string::npos) return "";
  const std::vector<std::string> lines =
      absl::StrSplit(out.substr(start + 1, out.find("\n\n", start) - start - 1), '\n');
  for (const std::string& line : lines) {
    const size_t name = line.find(' ');
    if (name == std::string::npos) continue;
    const std::string row(absl::StripLeadingAsciiWhitespace(line.substr(name)));
    if (absl::StartsWith(row, "rmsnorm ") &&
        absl::StartsWith(absl::StripLeadingAsciiWhitespace(row.substr(8)), rank + " ")) {
      return row;
    }
  }
  return "";
}

// Waits until top shows the program, as each of `ranks`: its window ends a second before now,
// when the device events of the last executions have come in.
void AwaitInTop(const Daemon& daemon, const std::vector<std::string>& ranks = {"5"}) {
  for (int i = 0; i < 100; ++i) {
    const Result r = RunProcess({Runfile("client/nrtprof"), "top", "--addr", daemon.addr(),
                                 "--window", "30s", "--iterations", "1"},
                                kCliEnv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    bool all = absl::StrContains(r.out, "\naten::mul ");
    for (const std::string& rank : ranks) all = all && !ProcessRow(r.out, rank).empty();
    if (all) return;
    usleep(100'000);
  }
  FAIL() << "nrtprof top never showed the program's aten::mul and its ranks";
}

// A tmux server of the test's own, on a socket in a fresh /tmp folder (socket paths are
// limited to 107 bytes: TEST_TMPDIR is too deep).
class Tmux {
 public:
  Tmux() {
    char dir[] = "/tmp/nrtprof-tmux-XXXXXX";
    dir_ = mkdtemp(dir) != nullptr ? dir : "/tmp";
    socket_ = dir_ + "/tmux.sock";
  }
  ~Tmux() {
    Run({"kill-server"});
    unlink(socket_.c_str());
    rmdir(dir_.c_str());
  }
  Result Run(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/tmux", "-S", socket_, "-f", "/dev/null"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, kCliEnv);
  }
  std::string Screen() { return Run({"capture-pane", "-p", "-t", "top"}).out; }
  // Polls the screen until it shows `text` (10 s at most); the last screen.
  std::string AwaitScreen(const std::string& text) {
    std::string screen;
    for (int i = 0; i < 200 && !absl::StrContains(screen, text); ++i) {
      usleep(50'000);
      screen = Screen();
    }
    return screen;
  }

 private:
  std::string dir_, socket_;
};

TEST(TopTest, ShowsTheProgramsOpsInATerminalAndQQuits) {
  if (access("/usr/bin/tmux", X_OK) != 0) {
    GTEST_SKIP() << "SKIPPED: tmux is not installed (third_party/install_debian_deps.sh installs "
                    "it): nrtprof top was not checked in a terminal";
  }
  Daemon daemon("top-tmux");
  ASSERT_TRUE(daemon.Start());
  RunProgram(daemon);
  // Another rank, whose job the operator named at length: on the terminal it is cut to fit.
  const std::string long_job(120, 'j');
  RunProgram(daemon, {{"RANK", "6"}, {"NRTPROF_JOB", long_job}});
  AwaitInTop(daemon, {"5", "6"});
  Tmux tmux;
  const Result started =
      tmux.Run({"new-session", "-d", "-s", "top", "-x", "150", "-y", "60",
                Runfile("client/nrtprof") + " top --addr " + daemon.addr() +
                    " --window 30s --interval 500ms; echo nrtprof-top-exited-$?; sleep 60"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const std::string screen = tmux.AwaitScreen("aten::mul");
  EXPECT_TRUE(absl::StrContains(screen, "nrtprof top - ")) << screen;
  // The processes: each with its rank and job; the named job cut to the screen's 150 columns.
  EXPECT_TRUE(absl::StrContains(screen, " RANK  DEVICE TIME    BUSY  RUNTIME CALLS  JOB\n"))
      << screen;
  EXPECT_TRUE(absl::EndsWith(ProcessRow(screen, "5"), absl::StrCat("  ", kRootCommId))) << screen;
  const std::string cut = ProcessRow(screen, "6");
  EXPECT_TRUE(absl::EndsWith(cut, absl::StrCat("  ", long_job.substr(0, 68), "..."))) << screen;
  EXPECT_LE(cut.size() + 9, 150u) << screen;
  EXPECT_TRUE(absl::StrContains(screen, "aten_mul_square")) << screen;  // a model
  EXPECT_TRUE(absl::StrContains(screen, "aten::rsqrt")) << screen;      // an op
  EXPECT_TRUE(absl::StrContains(screen, "q quits")) << screen;
  ASSERT_EQ(tmux.Run({"send-keys", "-t", "top", "q"}).exit_code, 0);
  const std::string after = tmux.AwaitScreen("nrtprof-top-exited-");
  EXPECT_TRUE(absl::StrContains(after, "nrtprof-top-exited-0")) << after;
  EXPECT_FALSE(absl::StrContains(after, "aten::mul")) << "the screen was not given back: " << after;
}

TEST(TopTest, PipedItPrintsPlainBlocksAndStops) {
  Daemon daemon("top-piped");
  ASSERT_TRUE(daemon.Start());
  RunProgram(daemon);
  AwaitInTop(daemon);
  const Result r = RunProcess({Runfile("client/nrtprof"), "top", "--addr", daemon.addr(),
                               "--window", "30s", "--interval", "200ms", "--iterations", "2"},
                              kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "terminal codes in piped output";
  const size_t first = r.out.find("nrtprof top - ");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nrtprof top - ", first + 1), std::string::npos) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\naten::mul ")) << r.out;
  // The process's rank and job, whole.
  EXPECT_TRUE(absl::EndsWith(ProcessRow(r.out, "5"), absl::StrCat("  ", kRootCommId))) << r.out;
  EXPECT_EQ(r.err, "");
}

// The mlp example runs the runtime's system trace itself and fetches it only at its end: top
// shows its executions without device time, and says why under the processes.
TEST(TopTest, SaysWhoseDeviceTimeTheProgramHolds) {
  Daemon daemon("top-held");
  ASSERT_TRUE(daemon.Start());
  testing::Background mlp({Runfile("examples/mlp"), "--iters", "2000"},
                          {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                           {"NRTPROF_ADDR", daemon.addr()},
                           {"NRT_SIM_TIME_SCALE", "5"}},
                          ::testing::TempDir());
  const std::string line = absl::StrCat("\n  pid ", mlp.pid(), ": ");
  const std::string why =
      " executions without device time yet: the program runs the runtime's system trace itself, "
      "and nrtprof receives its device events only as it fetches them\n";
  std::string out;
  for (int i = 0; i < 100 && !absl::StrContains(out, line); ++i) {
    usleep(100'000);
    out = RunProcess({Runfile("client/nrtprof"), "top", "--addr", daemon.addr(), "--window", "30s",
                      "--iterations", "1"},
                     kCliEnv)
              .out;
  }
  const size_t at = out.find(line);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string rest =
      out.substr(at + line.size(), out.find('\n', at + 1) - at - line.size() + 1);
  EXPECT_TRUE(absl::EndsWith(rest, why)) << out;
  EXPECT_TRUE(mlp.Running());

  // Killed before its end, where it fetches: the executions will never have device time.
  const pid_t mlp_pid = mlp.pid();
  kill(mlp_pid, SIGKILL);
  EXPECT_EQ(mlp.Wait(), 128 + SIGKILL);
  const std::string lost = absl::StrCat("\n  pid ", mlp_pid, ": ");
  const std::string lost_why =
      " executions without device time: the program ran the runtime's system trace itself and "
      "ended without fetching them\n";
  bool said = false;
  for (int i = 0; i < 100 && !said; ++i) {
    out = RunProcess({Runfile("client/nrtprof"), "top", "--addr", daemon.addr(), "--window", "30s",
                      "--iterations", "1"},
                     kCliEnv)
              .out;
    const size_t line_at = out.find(lost);
    said = line_at != std::string::npos &&
           absl::EndsWith(out.substr(0, out.find('\n', line_at + 1) + 1), lost_why);
    if (!said) usleep(100'000);
  }
  EXPECT_TRUE(said) << out;
}

// A name is whatever bytes the program gave it, and any client of the daemon's socket may send
// any: an ESC sequence in an op's or an executable's name must reach the screen as visible text,
// never as a command to the terminal of whoever runs top or status (retitle it, clear it).
TEST(TopTest, NamesAProgramGaveAreShownAsVisibleText) {
  Daemon daemon("top-names");
  ASSERT_TRUE(daemon.Start());
  // The program under a name of its own, which the shim sends as the executable: a copy, run
  // with the folder of libnrt.so.1 as the loader's path, since its own is relative to itself.
  const std::string dir = testing::TempDir("top-names");
  const std::string exe = dir + "/named\x1b]0;pwned\x07";
  const std::string runtime = Runfile("sim/libnrt.so.1");
  std::error_code error;
  std::filesystem::copy_file(Runfile("tests/named_range"), exe, error);
  ASSERT_FALSE(error) << error.message();
  ASSERT_EQ(chmod(exe.c_str(), 0755), 0);
  testing::Background program(
      {exe, "aten::\x1b[2Jmul\xc2\x9b" "31m", "60"},
      {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
       {"LD_LIBRARY_PATH", runtime.substr(0, runtime.rfind('/'))},
       {"NRTPROF_ADDR", daemon.addr()},
       {"NRT_SIM_TIME_SCALE", "0"},
       {"RANK", "3"}},
      dir);
  Result top;
  for (int i = 0; i < 100 && !absl::StrContains(top.out, "\naten::"); ++i) {
    usleep(100'000);
    top = RunProcess({Runfile("client/nrtprof"), "top", "--addr", daemon.addr(), "--window",
                      "30s", "--iterations", "1"},
                     kCliEnv);
    ASSERT_EQ(top.exit_code, 0) << top.err;
  }
  ASSERT_TRUE(absl::StrContains(top.out, "\naten::")) << top.out << program.err();
  EXPECT_EQ(top.out.find('\x1b'), std::string::npos) << "an ESC reached the screen: " << top.out;
  EXPECT_TRUE(absl::StrContains(top.out, "\naten::\\x1b[2Jmul\\u009b31m ")) << top.out;
  EXPECT_TRUE(absl::StrContains(top.out, " named\\x1b]0;pwned\\x07 ")) << top.out;

  const Result status =
      RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.out.find('\x1b'), std::string::npos) << "an ESC reached the screen: "
                                                        << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "/named\\x1b]0;pwned\\x07\n")) << status.out;
  // Its rank (RANK), as top shows it.
  EXPECT_TRUE(absl::StrContains(status.out, absl::StrCat("  pid ", program.pid())))
      << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, " rank 3     events ")) << status.out;
}

TEST(TopTest, WithoutAFlightRecorderItSaysWhy) {
  Daemon daemon("top-no-recorder");
  ASSERT_TRUE(daemon.Start({"--flight_recorder_seconds=0"}));
  const Result r = RunProcess(
      {Runfile("client/nrtprof"), "top", "--addr", daemon.addr(), "--iterations", "1"}, kCliEnv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "nrtprof top: the daemon keeps no flight recorder (nrtprofd --flight_recorder_seconds "
            "0), so it has no recent events to show\n");
  const Result bad = RunProcess(
      {Runfile("client/nrtprof"), "top", "--addr", daemon.addr(), "--interval", "1ms"}, kCliEnv);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "nrtprof top: --interval must be at least 100ms\n");
}

}  // namespace
}  // namespace nrtprof
