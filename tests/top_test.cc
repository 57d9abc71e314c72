// `nrtprof top` as a user meets it: in a terminal (a real tmux, started by the test: its screen
// read with capture-pane, keys typed with send-keys) it shows the ops, models and process of a
// program that streamed to the standing daemon, and q quits it; piped, it prints plain blocks;
// a daemon without a flight recorder is one line.
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
// recorder, no capture asked).
void RunProgram(const Daemon& daemon) {
  const Result r = RunProcess({Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "20"},
                              {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                               {"NRTPROF_ADDR", daemon.addr()},
                               {"NRT_SIM_TIME_SCALE", "0"},
                               {"RANK", "5"}});  // as torchrun gives a worker its rank
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// A tmux server of the test's own, on a socket in a fresh /tmp folder (socket paths are
// limited to 107 bytes: TEST_TMPDIR is too deep).
// Waits until top shows the program: its window ends a second before now, when the device
// events of the last executions have come in.
void AwaitInTop(const Daemon& daemon) {
  for (int i = 0; i < 100; ++i) {
    const Result r = RunProcess({Runfile("client/nrtprof"), "top", "--addr", daemon.addr(),
                                 "--window", "30s", "--iterations", "1"},
                                kCliEnv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (absl::StrContains(r.out, "\naten::mul ")) return;
    usleep(100'000);
  }
  FAIL() << "nrtprof top never showed the program's aten::mul";
}

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
  AwaitInTop(daemon);
  Tmux tmux;
  const Result started =
      tmux.Run({"new-session", "-d", "-s", "top", "-x", "150", "-y", "60",
                Runfile("client/nrtprof") + " top --addr " + daemon.addr() +
                    " --window 30s --interval 500ms; echo nrtprof-top-exited-$?; sleep 60"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const std::string screen = tmux.AwaitScreen("aten::mul");
  EXPECT_TRUE(absl::StrContains(screen, "nrtprof top - ")) << screen;
  EXPECT_TRUE(absl::StrContains(screen, " rmsnorm (rank 5) ")) << screen;  // the process
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
