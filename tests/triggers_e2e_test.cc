// Triggered look-back captures (issue 41) as an operator meets them: a standing nrtprofd with
// --trigger rules, a training loop under the shim and the simulated runtime, nobody asking for
// a capture. What must be left behind: exactly the capture of the anomaly (a 4x slow step among
// 2,000; a failed execution), with the steps before it, its reason in the summary and trace;
// one capture for a burst, the rest counted as suppressed in /metrics; the disk budget kept
// under 100 triggers; `nrtprof captures` and `nrtprof status` showing them.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"

namespace nrtprof {
namespace {

using testing::Daemon;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;

const std::map<std::string, std::string> kCliEnv = {{"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

// trigger_steps with ARGS, streaming to `daemon`'s flight recorder; nobody asks for a capture.
Result RunSteps(const Daemon& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {Runfile("tests/trigger_steps")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                           {"NRTPROF_ADDR", daemon.addr()},
                           {"NRT_SIM_TIME_SCALE", "0"}});
}

// The daemon's /metrics address, from its log's "metrics at URL" line.
std::string MetricsUrl(const Daemon& daemon) {
  const std::string log = daemon.log();
  const size_t at = log.find("metrics at ");
  if (at == std::string::npos) return "";
  const size_t start = at + strlen("metrics at ");
  return log.substr(start, log.find('\n', start) - start);
}

std::string Scrape(const std::string& url) {
  return RunProcess({"/usr/bin/curl", "-sf", url}, kCliEnv).out;
}

// A sample's value in the exposition text ("NAME{LABELS} VALUE"); -1 if absent.
int64_t Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, series + " ")) {
      int64_t v = -1;
      return absl::SimpleAtoi(line, &v) ? v : -1;
    }
  }
  return -1;
}

// Scrapes until `series` reaches `at_least` (60 s at most); the last scrape.
std::string AwaitSample(const std::string& url, const std::string& series, int64_t at_least) {
  std::string text;
  for (int i = 0; i < 600; ++i) {
    text = Scrape(url);
    if (Sample(text, series) >= at_least) return text;
    usleep(100'000);
  }
  ADD_FAILURE() << series << " never reached " << at_least << ":\n" << text;
  return text;
}

// The folders of `root` holding a triggered capture (their trigger.json), by name.
std::vector<std::string> TriggeredFolders(const std::string& root) {
  std::vector<std::string> found;
  if (DIR* d = opendir(root.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (testing::Exists(root + "/" + name + "/trigger.json")) found.push_back(root + "/" + name);
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  return found;
}

uint64_t FolderBytes(const std::string& dir) {
  uint64_t bytes = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      struct stat st;
      const std::string path = dir + "/" + e->d_name;
      if (e->d_name[0] != '.' && lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        bytes += st.st_size;
      }
    }
    closedir(d);
  }
  return bytes;
}

// A slice's duration in trace.json ("dur" in µs) by its name; -1 if the trace has none.
double SliceDurationUs(const std::string& trace, const std::string& name) {
  const size_t at = trace.find("\"name\":\"" + name + "\"");
  if (at == std::string::npos) return -1;
  const size_t dur = trace.find("\"dur\":", at);
  const size_t end = trace.find('}', at);
  if (dur == std::string::npos || dur > end) return -1;
  double us = -1;
  const std::string value = trace.substr(dur + 6, trace.find_first_of(",}", dur + 6) - dur - 6);
  return absl::SimpleAtod(value, &us) ? us : -1;
}

bool HasSlice(const std::string& trace, const std::string& name) {
  return absl::StrContains(trace, "\"name\":\"" + name + "\"");
}

constexpr char kSlowRule[] = "slow-step: step > 3 x median before 10s after 2s every 10m";

TEST(TriggersTest, OneSlowStepAmong2000LeavesExactlyItsCapture) {
  Daemon daemon("triggers-slow");
  ASSERT_TRUE(daemon.Start({std::string("--trigger=") + kSlowRule, "--trigger_check_ms=500",
                            "--metrics_listen=127.0.0.1:0"}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  ASSERT_FALSE(url.empty()) << daemon.log();
  EXPECT_TRUE(absl::StrContains(daemon.log(), std::string("trigger rule ") + kSlowRule))
      << daemon.log();
  // 2,000 steps of 15 ms; step 1500 takes 60 ms.
  const Result run = RunSteps(daemon, {"2000", "15", "--slow", "1500"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_TRUE(absl::StrContains(run.out, "slow: 1500\n")) << run.out;
  SCOPED_TRACE(run.out);  // the longest other step: a stall of the machine's, if one fired
  const std::string metrics =
      AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"slow-step\"}", 1);
  EXPECT_EQ(Sample(metrics, "nrtprof_triggers_total{rule=\"slow-step\"}"), 1) << metrics;
  EXPECT_EQ(Sample(metrics, "nrtprof_triggers_suppressed_total{rule=\"slow-step\"}"), 0);
  EXPECT_EQ(Sample(metrics, "nrtprof_triggered_captures_failed_total{rule=\"slow-step\"}"), 0);

  const std::vector<std::string> folders = TriggeredFolders(daemon.dir() + "/captures");
  ASSERT_EQ(folders.size(), 1u) << daemon.log();
  const std::string dir = folders[0];
  EXPECT_TRUE(absl::StrContains(dir, "/captures/slow-step-")) << dir;
  // The reason, in the summary's header: the step, the factor, the median of the last 100.
  const std::string summary = ReadFile(dir + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, std::string("Triggered by rule slow-step (") +
                                             kSlowRule + "): pid "))
      << summary;
  std::smatch m;
  const std::regex reason(
      R"(\(trigger_steps\): step 1500 took ([0-9.]+)x the median of the last 100 \(([0-9.]+) ms vs ([0-9.]+) ms\))");
  ASSERT_TRUE(std::regex_search(summary, m, reason)) << summary;
  EXPECT_GT(std::stod(m[1]), 3.0) << summary;
  EXPECT_GE(std::stod(m[2]), 60.0) << summary;
  EXPECT_TRUE(absl::StrContains(ReadFile(dir + "/summary.json"), "\"rule\": \"slow-step\""));
  // Every file of a capture: the trace holds the slow step whole, the 10 s before it and the
  // 2 s after it, and names the rule too.
  for (const char* f : {"trace.pftrace", "trace.json", "summary.csv", "summary.json"}) {
    EXPECT_TRUE(testing::Exists(dir + "/" + f)) << f;
  }
  const std::string trace = ReadFile(dir + "/trace.json");
  EXPECT_GE(SliceDurationUs(trace, "ProfilerStep#1500"), 60'000) << "the slow step, whole";
  for (int step : {1499, 1400, 1000, 1501, 1550}) {
    EXPECT_TRUE(HasSlice(trace, absl::StrCat("ProfilerStep#", step))) << step;
  }
  EXPECT_TRUE(absl::StrContains(trace, "\"trigger\":{\"rule\":\"slow-step\"")) << "otherData";
  // nrtprof report's page says it among the capture's facts.
  const Result report = RunProcess(
      {Runfile("client/nrtprof"), "report", dir, "-o", dir + "/report.html"}, kCliEnv);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(absl::StrContains(ReadFile(dir + "/report.html"),
                                std::string("\"trigger\":\"rule slow-step (") + kSlowRule +
                                    "): pid "));

  // The listing and the status say it.
  const Result listed =
      RunProcess({Runfile("client/nrtprof"), "captures", "--addr", daemon.addr()}, kCliEnv);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, "triggered captures: 1,")) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, dir)) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, "step 1500 took ")) << listed.out;
  EXPECT_TRUE(absl::StrContains(
      listed.out, "1 triggered, 0 suppressed, 1 captured, 0 failed, 0 removed"))
      << listed.out;
  const Result status =
      RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.out, "triggered captures:  1 kept")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "rule slow-step")) << status.out;
}

TEST(TriggersTest, ABurstOfSlowStepsIsOneCaptureTheRestSuppressed) {
  Daemon daemon("triggers-burst");
  ASSERT_TRUE(daemon.Start({std::string("--trigger=") + kSlowRule, "--trigger_check_ms=500",
                            "--metrics_listen=127.0.0.1:0"}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  const Result run =
      RunSteps(daemon, {"500", "15", "--slow", "300,301,302,303,304,305,306,307"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  SCOPED_TRACE(run.out);
  // Every step of the burst is seen (a 4x step raises the median of 100 little).
  const std::string metrics = AwaitSample(url, "nrtprof_triggers_total{rule=\"slow-step\"}", 8);
  AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"slow-step\"}", 1);
  const int64_t triggers = Sample(metrics, "nrtprof_triggers_total{rule=\"slow-step\"}");
  EXPECT_EQ(Sample(metrics, "nrtprof_triggers_suppressed_total{rule=\"slow-step\"}"),
            triggers - 1)
      << metrics;
  const std::vector<std::string> folders = TriggeredFolders(daemon.dir() + "/captures");
  ASSERT_EQ(folders.size(), 1u) << daemon.log();
  const std::string summary = ReadFile(folders[0] + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "step 300 took ")) << summary;
  // The whole burst is in the capture (its 2 s after the first step).
  const std::string trace = ReadFile(folders[0] + "/trace.json");
  for (int step = 299; step <= 308; ++step) {
    EXPECT_TRUE(HasSlice(trace, absl::StrCat("ProfilerStep#", step))) << step;
  }
}

TEST(TriggersTest, AFailedExecutionIsCapturedWithItsStatus) {
  Daemon daemon("triggers-error");
  ASSERT_TRUE(daemon.Start({"--trigger=errors: status != ok before 2s after 1s every 10m",
                            "--trigger_check_ms=500", "--metrics_listen=127.0.0.1:0"}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  const Result run = RunSteps(daemon, {"300", "10", "--fail", "200"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.out, m, std::regex("step 200: nrt_execute returned ([0-9]+)")))
      << run.out;
  const std::string status = m[1];
  ASSERT_NE(status, "0");
  AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"errors\"}", 1);
  const std::vector<std::string> folders = TriggeredFolders(daemon.dir() + "/captures");
  ASSERT_EQ(folders.size(), 1u) << daemon.log();
  const std::string summary = ReadFile(folders[0] + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "): nrt_execute returned status " + status + " (NRT_"))
      << summary;
  // The failed call itself, with its status, and the steps around it.
  const std::string trace = ReadFile(folders[0] + "/trace.json");
  EXPECT_TRUE(absl::StrContains(trace, "\"status\":" + status)) << "the failed call's status";
  EXPECT_TRUE(HasSlice(trace, "ProfilerStep#199"));
  EXPECT_TRUE(HasSlice(trace, "ProfilerStep#200"));
}

TEST(TriggersTest, TheDiskBudgetHoldsUnder100Triggers) {
  Daemon daemon("triggers-budget");
  constexpr uint64_t kBudget = 1 << 20;
  ASSERT_TRUE(daemon.Start({"--trigger=slow: step > 15 ms before 1s after 0s every 0s "
                            "files pftrace,summary on process",
                            absl::StrCat("--trigger_budget_bytes=", kBudget),
                            "--trigger_check_ms=500", "--metrics_listen=127.0.0.1:0"}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  // A user's own capture in the same root, which the budget must never touch.
  const std::string mine = daemon.dir() + "/captures/mine";
  ASSERT_EQ(mkdir(mine.c_str(), 0755), 0);
  ASSERT_TRUE(RunProcess({"/bin/sh", "-c", "head -c 2000000 /dev/zero > " + mine + "/big"}, kCliEnv)
                  .exit_code == 0);
  // 1,000 steps of 5 ms, every 10th from step 10 on 20 ms: 99 slow steps, 100 with step 999's
  // wait on the last mark.
  const Result run =
      RunSteps(daemon, {"1000", "5", "--slow_every", "10", "--slow", "999", "--factor", "4"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string metrics = AwaitSample(url, "nrtprof_triggers_total{rule=\"slow\"}", 100);
  // Until every trigger is a capture or a failure.
  for (int i = 0; i < 600; ++i) {
    metrics = Scrape(url);
    const int64_t done = Sample(metrics, "nrtprof_triggered_captures_total{rule=\"slow\"}") +
                         Sample(metrics, "nrtprof_triggered_captures_failed_total{rule=\"slow\"}");
    if (done >= Sample(metrics, "nrtprof_triggers_total{rule=\"slow\"}")) break;
    usleep(100'000);
  }
  const int64_t captures = Sample(metrics, "nrtprof_triggered_captures_total{rule=\"slow\"}");
  const int64_t removed = Sample(metrics, "nrtprof_triggered_captures_removed_total{rule=\"slow\"}");
  EXPECT_EQ(Sample(metrics, "nrtprof_triggers_suppressed_total{rule=\"slow\"}"), 0) << metrics;
  EXPECT_GT(captures, 10) << metrics;
  EXPECT_GT(removed, 0) << "the budget was never reached: " << metrics;
  const std::vector<std::string> folders = TriggeredFolders(daemon.dir() + "/captures");
  EXPECT_EQ(static_cast<int64_t>(folders.size()), captures - removed) << metrics;
  uint64_t bytes = 0;
  for (const std::string& f : folders) bytes += FolderBytes(f);
  EXPECT_LE(bytes, kBudget);
  EXPECT_EQ(Sample(metrics, "nrtprof_triggered_captures_bytes"), static_cast<int64_t>(bytes));
  // The newest were kept: the last slow step's capture is there.
  ASSERT_FALSE(folders.empty());
  bool last_kept = false;
  for (const std::string& f : folders) {
    last_kept = last_kept || absl::StrContains(ReadFile(f + "/summary.txt"), "step 999 took");
  }
  EXPECT_TRUE(last_kept);
  EXPECT_TRUE(testing::Exists(mine + "/big")) << "a capture nobody triggered is never removed";
}

// A program killed by a signal while recording: a capture of its last seconds, its writes in
// it, the reason naming the signal; a program that exits normally fires nothing.
TEST(TriggersTest, ACrashIsCapturedWithItsLastSeconds) {
  Daemon daemon("triggers-crash");
  ASSERT_TRUE(daemon.Start({"--trigger=crash: exit by signal before 5s after 0s",
                            "--trigger_check_ms=500", "--metrics_listen=127.0.0.1:0"}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  const std::map<std::string, std::string> env = {
      {"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
      {"NRTPROF_ADDR", daemon.addr()},
      {"NRT_SIM_TIME_SCALE", "0"}};
  const Result fine = RunProcess({Runfile("tests/trigger_steps"), "50", "5"}, env);
  ASSERT_EQ(fine.exit_code, 0) << fine.err;
  // abrupt_end busy: a write a millisecond until killed; its batches reach the recorder (a
  // recorder-only shim sends every 500 ms). Killed, and reaped only after the daemon has read
  // how it ended (its zombie's status).
  testing::Background busy({Runfile("tests/abrupt_end"), "busy", "10"}, env,
                           testing::TempDir("busy"));
  usleep(2'000'000);
  kill(busy.pid(), SIGKILL);
  usleep(1'500'000);
  EXPECT_EQ(busy.Wait(), 128 + SIGKILL);
  const std::string metrics =
      AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"crash\"}", 1);
  EXPECT_EQ(Sample(metrics, "nrtprof_triggers_total{rule=\"crash\"}"), 1) << metrics;
  const std::vector<std::string> folders = TriggeredFolders(daemon.dir() + "/captures");
  ASSERT_EQ(folders.size(), 1u) << daemon.log();
  const std::string summary = ReadFile(folders[0] + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "(abrupt_end) was killed by signal 9 (SIGKILL)"))
      << summary;
  // Its writes up to its end.
  EXPECT_TRUE(absl::StrContains(ReadFile(folders[0] + "/trace.json"), "nrt_tensor_write"));
  EXPECT_FALSE(absl::StrContains(summary, "trigger_steps")) << "the process that exited normally";
}

// A job across two hosts (two daemons, as the fleet tests stand them): rank 0 streams to A, whose
// rule on job fires for its slow step and asks B (on TCP, TLS and a token: --trigger_peers) for
// the same window; B, where rank 1 streams, writes it with the reason.
TEST(TriggersTest, ASlowRankTriggersACaptureOfTheJobOnBothHosts) {
  testing::TlsFiles tls;
  std::string error;
  ASSERT_TRUE(testing::MakeTlsFiles(testing::TempDir("tls"), &tls, &error)) << error;
  // As nobody (under root), B must be able to write here: sticky, as /tmp.
  char folder[] = "/tmp/nrtprof-trigger-hosts-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  const std::string shared = folder;
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  Daemon b("triggers-host-b");
  std::vector<std::string> b_flags = {"--listen=127.0.0.1:0",
                                      "--tls_cert=" + tls.server_cert,
                                      "--tls_key=" + tls.server_key,
                                      "--token_file=" + tls.token_file,
                                      "--output_root=" + shared + "/b-captures",
                                      "--spool_dir=" + shared + "/b-spool",
                                      "--socket=" + shared + "/b-sock/nrtprofd.sock"};
  if (geteuid() == 0) b_flags.push_back("--user=nobody");
  ASSERT_TRUE(b.Start(b_flags)) << b.log();
  ASSERT_FALSE(b.tcp_addr().empty()) << b.log();
  Daemon a("triggers-host-a");
  ASSERT_TRUE(a.Start({std::string("--trigger=") + kSlowRule, "--trigger_check_ms=500",
                       "--metrics_listen=127.0.0.1:0", "--trigger_peers=" + b.tcp_addr(),
                       "--trigger_peer_ca=" + tls.ca,
                       "--trigger_peer_token_file=" + tls.token_file}))
      << a.log();
  const std::string url = MetricsUrl(a);
  // Rank 1 on B (over TCP, as a program on another host would reach it), rank 0 on A.
  testing::Background rank1({Runfile("tests/trigger_steps"), "500", "15", "--rank", "1"},
                            {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                             {"NRTPROF_ADDR", b.tcp_addr()},
                             {"NRTPROF_TLS_CA", tls.ca},
                             {"NRTPROF_TOKEN_FILE", tls.token_file},
                             {"NRT_SIM_TIME_SCALE", "0"}},
                            testing::TempDir("rank1"));
  const pid_t rank1_pid = rank1.pid();
  const Result rank0 = RunSteps(a, {"500", "15", "--slow", "300", "--rank", "0"});
  ASSERT_EQ(rank0.exit_code, 0) << rank0.err;
  EXPECT_EQ(rank1.Wait(), 0) << rank1.err();
  const std::string metrics =
      AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"slow-step\"}", 1);
  EXPECT_EQ(Sample(metrics, "nrtprof_triggered_peer_captures_total{rule=\"slow-step\"}"), 1)
      << metrics << a.log();
  const std::vector<std::string> on_a = TriggeredFolders(a.dir() + "/captures");
  ASSERT_EQ(on_a.size(), 1u) << a.log();
  const std::string id = on_a[0].substr(on_a[0].rfind('/') + 1);
  // B's capture: the same id, the same reason as asked by A, rank 1's steps around step 300.
  const std::string on_b = shared + "/b-captures/" + id;
  const std::string summary = ReadFile(on_b + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "Triggered by rule slow-step (")) << summary << b.log();
  EXPECT_TRUE(absl::StrContains(summary, "): asked by ")) << summary;
  EXPECT_TRUE(absl::StrContains(summary, "step 300 took ")) << summary;
  EXPECT_TRUE(absl::StrContains(summary, absl::StrCat("\npid ", rank1_pid, ": ")))
      << "rank 1's process: " << summary;
  const std::string trace = ReadFile(on_b + "/trace.json");
  EXPECT_TRUE(HasSlice(trace, "ProfilerStep#300")) << "rank 1's step of the same number";
  RunProcess({"/bin/rm", "-rf", shared}, kCliEnv);
}

// A bad rule is one line naming the column, and the daemon does not start.
TEST(TriggersTest, ABadRuleIsOneLineAndNoDaemon) {
  const Result r = RunProcess({Runfile("daemon/nrtprofd"), "--socket=/tmp/nrtprof-unused.sock",
                               "--trigger", "slow: step > 3 median"},
                              kCliEnv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "nrtprofd: bad value 'slow: step > 3 median' for --trigger: column 16: expected 'x "
            "median' or a unit (ns, us, ms, s, m, h) after 3, found 'median'\n");
  EXPECT_FALSE(testing::Exists("/tmp/nrtprof-unused.sock"));
}

}  // namespace
}  // namespace nrtprof
