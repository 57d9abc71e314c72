// The profiler across TCP, as a user runs it against a remote daemon: a standing nrtprofd with
// --listen on 127.0.0.1 (port 0), TLS and a bearer token, certificates made with openssl for
// the test; `nrtprof status` and `nrtprof run --addr 127.0.0.1:PORT` with the real shim and the
// simulated runtime; programs with a wrong token or without TLS settings. As root (CI) the
// daemon runs as nobody, which the sandbox does not allow: the target runs unsandboxed.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace nrtprof {
namespace {

using testing::CallsByName;
using testing::Exists;
using testing::ReadFile;
using testing::Result;
using testing::Runfile;
using testing::RunProcess;
using testing::TempDir;
using testing::TlsFiles;

// The simulated device answers at once; no daemon or TLS setting from the machine interferes.
const std::map<std::string, std::string> kEnv = {
    {"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""},       {"LD_PRELOAD", ""},
    {"NRTPROF_TLS_CA", ""},      {"NRTPROF_TOKEN_FILE", ""}, {"NRTPROF_TLS_CERT", ""},
    {"NRTPROF_TLS_KEY", ""}};

// The daemon's own unix socket, for its counts: as root the daemon runs as nobody, a service
// the CLI must be told to trust.
const std::map<std::string, std::string> kLocalEnv = {
    {"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""},
    {"NRTPROF_SERVICE_USER", "nobody"}};

std::map<std::string, std::string> With(std::map<std::string, std::string> extra) {
  std::map<std::string, std::string> env = kEnv;
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

size_t CountLines(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, part);
  return n;
}

// A standing daemon on a unix socket and 127.0.0.1:PORT with TLS and the token.
class TcpEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(testing::MakeTlsFiles(TempDir("tls"), &tls_, &error)) << error;
    // Socket paths are limited to 107 bytes; as nobody, the daemon must be able to write here.
    char folder[] = "/tmp/nrtprof-tcp-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(folder), nullptr);
    folder_ = folder;
    // Sticky, as /tmp: the CLI trusts a socket below it (common/socket_trust.h).
    ASSERT_EQ(chmod(folder_.c_str(), 01777), 0);
    socket_ = folder_ + "/sock/nrtprofd.sock";
    StartDaemon("127.0.0.1:0");
  }

  // Starts nrtprofd listening on `listen` (port 0: any) and sets addr_ to where it listens.
  void StartDaemon(const std::string& listen) {
    std::vector<std::string> args = {Runfile("daemon/nrtprofd"),
                                     "--socket=" + socket_,
                                     "--output_root=" + folder_ + "/captures",
                                     "--spool_dir=" + folder_ + "/daemon-spool",
                                     "--listen=" + listen,
                                     "--tls_cert=" + tls_.server_cert,
                                     "--tls_key=" + tls_.server_key,
                                     "--token_file=" + tls_.token_file};
    if (geteuid() == 0) args.push_back("--user=nobody");
    int ready[2], err[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(err), 0);
    args.push_back(absl::StrCat("--ready_fd=", ready[1]));
    daemon_ = fork();
    if (daemon_ == 0) {
      close(ready[0]);
      close(err[0]);
      dup2(err[1], STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(ready[1]);
    close(err[1]);
    daemon_stderr_ = err[0];
    char buf[64] = {};
    pollfd pfd{ready[0], POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 20000), 1);
    ASSERT_GT(read(ready[0], buf, sizeof(buf) - 1), 0);
    close(ready[0]);
    const std::string line = buf;  // "ready 127.0.0.1:PORT\n"
    ASSERT_TRUE(absl::StartsWith(line, "ready 127.0.0.1:")) << line;
    addr_ = line.substr(6, line.size() - 7);
  }

  void TearDown() override {
    if (daemon_ > 0) StopDaemon();
    testing::RunProcess({"/bin/rm", "-rf", folder_});
  }

  // SIGTERM (or `sig`); returns the daemon's stderr.
  std::string StopDaemon(int sig = SIGTERM) {
    kill(daemon_, sig);
    int status = 0;
    waitpid(daemon_, &status, 0);
    daemon_ = -1;
    if (sig == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    std::string err;
    char buf[4096];
    ssize_t n;
    while ((n = read(daemon_stderr_, buf, sizeof(buf))) > 0) err.append(buf, n);
    close(daemon_stderr_);
    return err;
  }

  Result Status(const std::vector<std::string>& flags,
                const std::map<std::string, std::string>& env = kEnv) {
    std::vector<std::string> argv = {Runfile("client/nrtprof"), "status"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunProcess(argv, env);
  }

  // A program run directly under the shim, as a remote machine would run it.
  Result Preloaded(const std::map<std::string, std::string>& shim_env) {
    std::map<std::string, std::string> env = With(shim_env);
    env["LD_PRELOAD"] = Runfile("shim/libnrtprof_shim.so");
    env["NRTPROF_ADDR"] = addr_;
    return RunProcess({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"}, env);
  }

  TlsFiles tls_;
  std::string folder_, socket_, addr_;
  pid_t daemon_ = -1;
  int daemon_stderr_ = -1;
};

TEST_F(TcpEndToEnd, RunOverTlsWithTheTokenWritesTheTrace) {
  const Result before =
      Status({"--addr", addr_, "--tls_ca", tls_.ca, "--token_file", tls_.token_file});
  EXPECT_EQ(before.exit_code, 0) << before.err;
  EXPECT_TRUE(absl::StrContains(before.out, "captures written:    0")) << before.out;
  EXPECT_TRUE(
      absl::StrContains(before.out, "daemon:              " + addr_ + " over TLS (nrtprofd "))
      << before.out;

  const std::string out = folder_ + "/remote-capture";  // written by the daemon, as nobody
  const Result run = RunProcess({Runfile("client/nrtprof"), "run", "--addr", addr_, "--tls_ca",
                                 tls_.ca, "--token_file", tls_.token_file, "--out", out, "--",
                                 Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"},
                                kEnv);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "-> OK")) << run.out;  // the program's own output
  EXPECT_TRUE(absl::StrContains(run.err, "(daemon " + addr_ + ")")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "from 1 process, 0 dropped")) << run.err;
  EXPECT_TRUE(Exists(out + "/trace.pftrace"));
  // The framework op, its runtime call and its device time came over TCP.
  const std::string summary = ReadFile(out + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "rmsnorm")) << summary;
  EXPECT_FALSE(absl::StrContains(summary, "Self NEURON time total: 0.000us")) << summary;

  // The same through the environment instead of flags.
  const Result after = Status({}, With({{"NRTPROF_ADDR", addr_},
                                        {"NRTPROF_TLS_CA", tls_.ca},
                                        {"NRTPROF_TOKEN_FILE", tls_.token_file}}));
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_TRUE(absl::StrContains(after.out, "captures written:    1")) << after.out;
  EXPECT_EQ(CountLines(StopDaemon(), "refused"), 0u);
}

// Lossless across TCP: the daemon cannot read this machine's spool, so the shim sends it what
// it missed from there. Killed -9 mid-capture and started again on the same port, the daemon
// carries the capture on and the trace holds every call the program made.
TEST_F(TcpEndToEnd, LosslessAcrossTcpLosesNothingToADaemonKilledMidCapture) {
  const std::vector<std::string> program = {Runfile("examples/rmsnorm"), "--variant",
                                            "naive", "--iters", "500"};
  auto run_argv = [&](const std::string& out, const std::string& mode) {
    std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", addr_,
                                     "--tls_ca", tls_.ca, "--token_file", tls_.token_file,
                                     "--mode", mode, "--out", out, "--"};
    argv.insert(argv.end(), program.begin(), program.end());
    return argv;
  };
  // The calls the program makes, from an undisturbed run (nothing dropped).
  const std::string steady = folder_ + "/steady-capture";
  const Result reference = RunProcess(run_argv(steady, "best_effort"), kEnv);
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  ASSERT_TRUE(absl::StrContains(ReadFile(steady + "/summary.txt"), "Events dropped: 0"));
  const std::map<std::string, int64_t> expected = CallsByName(steady);
  int64_t rows_calls = 0;
  for (const auto& [name, n] : expected) rows_calls += n;
  ASSERT_GT(rows_calls, 1000) << ReadFile(steady + "/summary.csv");

  const std::string shim_spool = TempDir("shim-spool");  // never read by the daemon
  const std::string out = folder_ + "/lossless-capture";
  testing::Background run(run_argv(out, "lossless"),
                          With({{"NRT_SIM_TIME_SCALE", "1"}, {"NRTPROF_SPOOL_DIR", shim_spool}}),
                          TempDir("lossless-run"));
  usleep(400 * 1000);
  ASSERT_TRUE(run.Running());
  StopDaemon(SIGKILL);
  usleep(300 * 1000);
  const std::string port = addr_;
  StartDaemon(port);  // the same address
  ASSERT_EQ(addr_, port);
  EXPECT_EQ(run.Wait(), 0) << run.err();
  EXPECT_TRUE(absl::StrContains(run.out(), "-> OK")) << run.out();
  EXPECT_EQ(CallsByName(out), expected) << run.err();
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"))
      << ReadFile(out + "/summary.txt");
  // All of it acknowledged, the shim's spool file is gone; the daemon's folder holds none.
  EXPECT_EQ(RunProcess({"/bin/ls", "-A", shim_spool}).out, "");
}

TEST_F(TcpEndToEnd, AWrongTokenIsRefusedAndTheProgramRunsUnprofiled) {
  // The CLI is refused before it runs anything.
  const std::string out = TempDir("wrong") + "/capture";
  const Result run = RunProcess({Runfile("client/nrtprof"), "run", "--addr", addr_, "--tls_ca",
                                 tls_.ca, "--token_file", tls_.wrong_token_file, "--out", out, "--",
                                 Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"},
                                kEnv);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "nrtprof run: nrtprofd refused the call: wrong bearer token\n");
  EXPECT_EQ(run.out, "");
  EXPECT_FALSE(Exists(out));

  // A program whose shim has the wrong token runs as without the profiler, says so once, and
  // the daemon stores nothing of it.
  const Result plain =
      RunProcess({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"}, kEnv);
  const Result refused = Preloaded({{"NRTPROF_TLS_CA", tls_.ca},
                                    {"NRTPROF_TOKEN_FILE", tls_.wrong_token_file},
                                    {"NRTPROF_CAPTURE", "uninvited"}});
  EXPECT_EQ(refused.exit_code, 0) << refused.err;
  EXPECT_EQ(refused.out, plain.out);
  EXPECT_EQ(refused.err, "nrtprof: the daemon at " + addr_ +
                             " refused this process's credentials (UNAUTHENTICATED); not "
                             "profiling it\n");
  const Result status = Status({"--addr", "unix:" + socket_}, kLocalEnv);
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.out, "connected processes: 0\n")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "events received:     0\n")) << status.out;

  const std::string err = StopDaemon();
  // One line per refused call: the CLI's Status, the shim's one stream.
  EXPECT_EQ(CountLines(err, "nrtprofd: refused /nrtprof.Control/Status from ipv4:127.0.0.1:"), 1u)
      << err;
  EXPECT_EQ(CountLines(err, "nrtprofd: refused /nrtprof.Collector/Stream from ipv4:127.0.0.1:"), 1u)
      << err;
  EXPECT_EQ(CountLines(err, ": wrong bearer token"), 2u) << err;
  EXPECT_FALSE(absl::StrContains(err, tls_.token));
  EXPECT_FALSE(absl::StrContains(err, tls_.wrong_token));
}

TEST_F(TcpEndToEnd, WithoutTlsSettingsTcpIsRefusedByTheShimAndTheCli) {
  const Result plain =
      RunProcess({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"}, kEnv);
  const Result shim = Preloaded({{"NRTPROF_TOKEN_FILE", tls_.token_file}});  // no CA
  EXPECT_EQ(shim.exit_code, 0);
  EXPECT_EQ(shim.out, plain.out);
  EXPECT_EQ(shim.err, "nrtprof: NRTPROF_ADDR=" + addr_ +
                          " is a TCP address, which needs TLS: set NRTPROF_TLS_CA (the CA that "
                          "signed the daemon's certificate) and NRTPROF_TOKEN_FILE (or "
                          "NRTPROF_TLS_CERT and NRTPROF_TLS_KEY); not profiling this process\n");

  const Result cli = Status({"--addr", addr_, "--tls_ca", tls_.ca});  // no token
  EXPECT_EQ(cli.exit_code, 2);
  EXPECT_EQ(CountLines(cli.err, ""), 2u) << cli.err;  // one line and the final empty one
  EXPECT_TRUE(
      absl::StartsWith(cli.err, "nrtprof status: " + addr_ + " is a TCP address, which needs TLS"))
      << cli.err;

  // A token file others can read is refused by the shim as by the daemon.
  ASSERT_EQ(chmod(tls_.wrong_token_file.c_str(), 0644), 0);
  const Result open_token =
      Preloaded({{"NRTPROF_TLS_CA", tls_.ca}, {"NRTPROF_TOKEN_FILE", tls_.wrong_token_file}});
  EXPECT_EQ(open_token.exit_code, 0);
  EXPECT_EQ(open_token.out, plain.out);
  EXPECT_TRUE(
      absl::StartsWith(open_token.err, "nrtprof: NRTPROF_TOKEN_FILE: " + tls_.wrong_token_file +
                                           " is accessible by group or others"))
      << open_token.err;
  EXPECT_EQ(CountLines(open_token.err, ""), 2u) << open_token.err;
  // None of them reached the daemon.
  EXPECT_EQ(CountLines(StopDaemon(), "refused"), 0u);
}

TEST_F(TcpEndToEnd, AShimThatDoesNotTrustTheDaemonSendsNothing) {
  const Result plain =
      RunProcess({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"}, kEnv);
  const Result shim =
      Preloaded({{"NRTPROF_TLS_CA", tls_.other_ca}, {"NRTPROF_TOKEN_FILE", tls_.token_file}});
  EXPECT_EQ(shim.exit_code, 0);
  EXPECT_EQ(shim.out, plain.out);
  // gRPC's handshake errors come out as one line of ours, whatever the number of attempts.
  EXPECT_EQ(CountLines(shim.err, ""), 2u) << shim.err;
  EXPECT_TRUE(absl::StartsWith(shim.err, "nrtprof: TLS with the daemon at " + addr_ + " failed"))
      << shim.err;
  const Result status = Status({"--addr", "unix:" + socket_}, kLocalEnv);
  EXPECT_TRUE(absl::StrContains(status.out, "events received:     0\n")) << status.out;
}

}  // namespace
}  // namespace nrtprof
