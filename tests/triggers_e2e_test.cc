// Triggered look-back captures (issue 41) as an operator meets them: a standing nrtprofd with
// --trigger rules, a training loop under the shim and the simulated runtime, nobody asking for
// a capture. What must be left behind: exactly the capture of the anomaly (a 4x slow step among
// 2,000; a failed execution), with the steps before it, its reason in the summary and trace;
// one capture for a burst, the rest counted as suppressed in /metrics; the disk budget kept
// under 100 triggers; `nrtprof captures` and `nrtprof status` showing them.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

// The environment of a program under the shim streaming to `daemon`, with `more`.
std::map<std::string, std::string> ShimEnv(const Daemon& daemon,
                                           const std::map<std::string, std::string>& more = {}) {
  std::map<std::string, std::string> env = {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                                            {"NRTPROF_ADDR", daemon.addr()},
                                            {"NRT_SIM_TIME_SCALE", "0"}};
  for (const auto& [k, v] : more) env[k] = v;
  return env;
}

// trigger_steps with ARGS, streaming to `daemon`'s flight recorder; nobody asks for a capture.
Result RunSteps(const Daemon& daemon, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv = {Runfile("tests/trigger_steps")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, ShimEnv(daemon, env));
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

// The summary header's line of process `pid` ("pid N: COMMAND (job JOB)"), or empty.
std::string ProcessLine(const std::string& summary, int64_t pid) {
  const std::string start = absl::StrCat("\npid ", pid, ": ");
  const size_t at = summary.find(start);
  if (at == std::string::npos) return "";
  return summary.substr(at + 1, summary.find('\n', at + 1) - at - 1);
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

// Two jobs on one daemon, named as an operator names them (NRTPROF_JOB): a slow step of a
// process of job train-a leaves a capture of train-a's two processes, not of train-b's, each
// said with its job; `nrtprof status` lists each process's job.
TEST(TriggersTest, ARuleOnJobCapturesThatJobsProcessesOnly) {
  Daemon daemon("triggers-jobs");
  ASSERT_TRUE(daemon.Start({std::string("--trigger=") + kSlowRule, "--trigger_check_ms=500",
                            "--metrics_listen=127.0.0.1:0"}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  // The same command line for all three (no rank in it): only their job tells them apart.
  testing::Background same({Runfile("tests/trigger_steps"), "500", "15"},
                           ShimEnv(daemon, {{"NRTPROF_JOB", "train-a"}}),
                           testing::TempDir("same-job"));
  testing::Background other({Runfile("tests/trigger_steps"), "500", "15"},
                            ShimEnv(daemon, {{"NRTPROF_JOB", "train-b"}}),
                            testing::TempDir("other-job"));
  std::string status;
  for (int i = 0; i < 100; ++i) {
    status = RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv)
                 .out;
    if (absl::StrContains(status, "  job train-a\n") &&
        absl::StrContains(status, "  job train-b\n")) {
      break;
    }
    usleep(100'000);
  }
  EXPECT_TRUE(absl::StrContains(status, absl::StrCat("pid ", same.pid(), " ")) &&
              absl::StrContains(status, "trigger_steps  job train-a\n") &&
              absl::StrContains(status, "trigger_steps  job train-b\n"))
      << status;
  const pid_t same_pid = same.pid(), other_pid = other.pid();
  const Result run =
      RunSteps(daemon, {"300", "15", "--slow", "200"}, {{"NRTPROF_JOB", "train-a"}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  SCOPED_TRACE(run.out);
  EXPECT_EQ(same.Wait(), 0) << same.err();
  EXPECT_EQ(other.Wait(), 0) << other.err();
  const std::string metrics =
      AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"slow-step\"}", 1);
  EXPECT_EQ(Sample(metrics, "nrtprof_triggers_total{rule=\"slow-step\"}"), 1) << metrics;
  const std::vector<std::string> folders = TriggeredFolders(daemon.dir() + "/captures");
  ASSERT_EQ(folders.size(), 1u) << daemon.log();
  const std::string summary = ReadFile(folders[0] + "/summary.txt");
  std::smatch m;
  const std::regex fired(R"(\): pid ([0-9]+) \(trigger_steps\): step 200 took )");
  ASSERT_TRUE(std::regex_search(summary, m, fired)) << summary;
  // The process that fired and its job's other process, each said with its job; not the
  // other job's.
  EXPECT_TRUE(absl::EndsWith(ProcessLine(summary, std::stoll(m[1])), " (job train-a)")) << summary;
  EXPECT_TRUE(absl::EndsWith(ProcessLine(summary, same_pid), " (job train-a)")) << summary;
  EXPECT_EQ(ProcessLine(summary, other_pid), "") << "another job's process: " << summary;
  EXPECT_FALSE(absl::StrContains(summary, "train-b")) << summary;
  const std::string json = ReadFile(folders[0] + "/summary.json");
  EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"pid\": ", same_pid, ", ")) &&
              absl::StrContains(json, "\"job\": \"train-a\"}"))
      << json;
  EXPECT_FALSE(absl::StrContains(json, "train-b")) << json;
  EXPECT_TRUE(absl::StrContains(ReadFile(folders[0] + "/trigger.json"), "\"job\": \"train-a\""));
  EXPECT_TRUE(absl::StrContains(daemon.log(), "of its job's processes (job 'train-a')"))
      << daemon.log();
}

// A job across two hosts (two daemons, as the fleet tests stand them): rank 0 streams to A, whose
// rule on job fires for its slow step and asks B (on TCP, TLS and a token: --trigger_peers) for
// the same window; B, where rank 1 streams, writes it with the reason, of that job only (not of
// the other job's process B has), and keeps it as one of its triggered captures: `nrtprof
// captures` on B lists it, asked by A.
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
  // Rank 1 on B (over TCP, as a program on another host would reach it), rank 0 on A: one job,
  // as the Neuron runtime names it (NEURON_RT_ROOT_COMM_ID, the same on every rank). Beside
  // rank 1 on B, a process of another job.
  const std::map<std::string, std::string> on_b_env = {
      {"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
      {"NRTPROF_ADDR", b.tcp_addr()},
      {"NRTPROF_TLS_CA", tls.ca},
      {"NRTPROF_TOKEN_FILE", tls.token_file},
      {"NRT_SIM_TIME_SCALE", "0"}};
  std::map<std::string, std::string> rank1_env = on_b_env, other_env = on_b_env;
  rank1_env["NEURON_RT_ROOT_COMM_ID"] = "10.1.2.3:62182";
  other_env["NRTPROF_JOB"] = "another-job";
  testing::Background other({Runfile("tests/trigger_steps"), "600", "15"}, other_env,
                            testing::TempDir("other"));
  testing::Background rank1({Runfile("tests/trigger_steps"), "500", "15", "--rank", "1"},
                            rank1_env, testing::TempDir("rank1"));
  const pid_t rank1_pid = rank1.pid(), other_pid = other.pid();
  const Result rank0 = RunSteps(a, {"500", "15", "--slow", "300", "--rank", "0"},
                                {{"NEURON_RT_ROOT_COMM_ID", "10.1.2.3:62182"}});
  ASSERT_EQ(rank0.exit_code, 0) << rank0.err;
  EXPECT_EQ(rank1.Wait(), 0) << rank1.err();
  EXPECT_EQ(other.Wait(), 0) << other.err();
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
  EXPECT_TRUE(absl::EndsWith(ProcessLine(summary, rank1_pid), " (job 10.1.2.3:62182)"))
      << summary;
  EXPECT_EQ(ProcessLine(summary, other_pid), "") << "the other job's process: " << summary;
  EXPECT_FALSE(absl::StrContains(summary, "another-job")) << summary;
  const std::string trace = ReadFile(on_b + "/trace.json");
  EXPECT_TRUE(HasSlice(trace, "ProfilerStep#300")) << "rank 1's step of the same number";
  // One of B's triggered captures: marked, listed, in its budget.
  const std::string marker = ReadFile(on_b + "/trigger.json");
  EXPECT_TRUE(absl::StrContains(marker, "\"rule\": \"slow-step\"")) << marker;
  EXPECT_TRUE(absl::StrContains(marker, "\"asked_by\": \"")) << marker;
  EXPECT_TRUE(absl::StrContains(marker, "\"job\": \"10.1.2.3:62182\"")) << marker;
  const Result listed = RunProcess({Runfile("client/nrtprof"), "captures", "--addr", b.tcp_addr(),
                                    "--tls_ca", tls.ca, "--token_file", tls.token_file},
                                   kCliEnv);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, "triggered captures: 1,")) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, "slow-step")) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, on_b)) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, "    asked by ")) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, "rules: none of its own")) << listed.out;
  RunProcess({"/bin/rm", "-rf", shared}, kCliEnv);
}

// A listening socket that never answers: a peer daemon that hangs (or a host that drops the
// packets), the worst a peer can do.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof(a);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }  // 0 if it could not listen

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Peers that do not answer: one whose port is closed, two that never speak. The local capture
// is written as soon as its look-ahead has passed, not after them (they were asked one after
// the other before, 10 s each); each is counted and said in the log.
TEST(TriggersTest, PeersThatDoNotAnswerHoldUpNothingAndAreCounted) {
  testing::TlsFiles tls;
  std::string error;
  ASSERT_TRUE(testing::MakeTlsFiles(testing::TempDir("tls"), &tls, &error)) << error;
  SilentListener silent1, silent2;
  ASSERT_NE(silent1.port(), 0);
  ASSERT_NE(silent2.port(), 0);
  int closed_port = 0;
  {
    SilentListener gone;  // a port that listened, closed again: refused
    closed_port = gone.port();
  }
  Daemon daemon("triggers-peers-down");
  ASSERT_TRUE(daemon.Start(
      {"--trigger=slow-step: step > 3 x median before 5s after 1s every 10m",
       "--trigger_check_ms=500", "--metrics_listen=127.0.0.1:0",
       absl::StrCat("--trigger_peers=127.0.0.1:", closed_port, ",127.0.0.1:", silent1.port(),
                    ",127.0.0.1:", silent2.port()),
       "--trigger_peer_ca=" + tls.ca, "--trigger_peer_token_file=" + tls.token_file}))
      << daemon.log();
  const std::string url = MetricsUrl(daemon);
  // The slow step 1.5 s before the program's end.
  const Result run = RunSteps(daemon, {"400", "15", "--slow", "300"}, {{"NRTPROF_JOB", "solo"}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  SCOPED_TRACE(run.out);
  const absl::Time ended = absl::Now();
  const std::string metrics =
      AwaitSample(url, "nrtprof_triggered_captures_total{rule=\"slow-step\"}", 1);
  // Loosely: its look-ahead (1 s) and 5 s; the two silent peers alone took 20 s before.
  EXPECT_LT(absl::Now() - ended, absl::Seconds(6)) << daemon.log();
  ASSERT_EQ(TriggeredFolders(daemon.dir() + "/captures").size(), 1u) << daemon.log();
  // Each peer counted as failed (the silent ones once their 2 s to start are up).
  const std::string counted =
      AwaitSample(url, "nrtprof_triggered_peer_failed_total{rule=\"slow-step\"}", 3);
  EXPECT_EQ(Sample(counted, "nrtprof_triggered_peer_failed_total{rule=\"slow-step\"}"), 3);
  EXPECT_EQ(Sample(counted, "nrtprof_triggered_peer_captures_total{rule=\"slow-step\"}"), 0);
  const std::string log = daemon.log();
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("peer 127.0.0.1:", silent1.port(),
                                                  " did not take the window: no answer in time")))
      << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("peer 127.0.0.1:", closed_port,
                                                  " did not take the window: ")))
      << log;
  const Result listed =
      RunProcess({Runfile("client/nrtprof"), "captures", "--addr", daemon.addr()}, kCliEnv);
  EXPECT_TRUE(absl::StrContains(listed.out,
                                "peers asked for the same window: 0 wrote it, 3 did not"))
      << listed.out;
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
