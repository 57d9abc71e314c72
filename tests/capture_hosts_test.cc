// `nrtprof capture --hosts` (issue 16's first part) as a user runs it across machines: three
// nrtprofd standing for three hosts, each on its own loopback TCP port with TLS and a token,
// programs preloaded with the shim by hand streaming to each, and one capture of all of them
// from the CLI, whose files come home to one folder with a merged trace. A host that is down is
// named in one line and the others are still written. A host whose clocks are a quarter of a
// second ahead (Debian's libfaketime, preloaded into its daemon and its program) is measured
// as such, and the same instant on both hosts lands at the same time in the merged trace. A
// data-parallel job (examples/cc_job) whose ranks are split across two hosts, one rank slow,
// taken live by whole steps: `nrtprof collectives` on the merged capture names the slow rank, its
// host and its cause, and each collective starts at the same time on both hosts within the
// stated clock error (issue 40).
// Real daemons, real programs, the real CLI; the merged trace is read back as Perfetto would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/perfetto_trace.pb.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"
#include "trace/perfetto_trace_reader.h"

namespace nrtprof {
namespace {

using testing::Background;
using testing::Daemon;
using testing::Exists;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;
using testing::TempDir;

// Where Debian's libfaketime package puts the library (third_party/install_debian_deps.sh).
constexpr char kLibFaketime[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

// What a reader of the merged trace sees: per process (by its name), the lanes it has and the
// times of its slices by name.
struct MergedTrace {
  std::map<std::string, std::set<std::string>> lanes;
  std::map<std::string, std::map<std::string, std::vector<uint64_t>>> slice_times;
  std::vector<std::string> named_tracks;
};

MergedTrace ReadMerged(const std::string& path) {
  MergedTrace merged;
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(ReadFile(path));
  EXPECT_TRUE(read.ok()) << path << ": " << read.status();
  if (!read.ok()) return merged;
  std::map<uint64_t, uint64_t> parent;
  std::map<uint64_t, std::string> process_of, track_name;
  std::map<std::pair<uint32_t, uint64_t>, std::string> names;  // (sequence, iid)
  auto process = [&](uint64_t track) {
    while (process_of.count(track) == 0 && parent.count(track) != 0) track = parent[track];
    return process_of.count(track) != 0 ? process_of[track] : std::string();
  };
  for (int i = 0; i < read->trace.packet_size(); ++i) {
    const perfetto::protos::TracePacket& p = read->trace.packet(i);
    for (const auto& n : p.interned_data().event_names()) {
      names[{p.trusted_packet_sequence_id(), n.iid()}] = n.name();
    }
    if (p.has_track_descriptor()) {
      const auto& t = p.track_descriptor();
      parent[t.uuid()] = t.parent_uuid();
      if (t.has_process()) process_of[t.uuid()] = t.process().process_name();
      if (t.has_name()) {
        track_name[t.uuid()] = t.name();
        merged.named_tracks.push_back(t.name());
      }
    }
    const auto& e = p.track_event();
    if (e.type() != perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) continue;
    const std::string owner = process(e.track_uuid());
    merged.lanes[owner].insert(track_name[e.track_uuid()]);
    const std::string name =
        e.has_name_iid() ? names[{p.trusted_packet_sequence_id(), e.name_iid()}] : e.name();
    merged.slice_times[owner][name].push_back(read->times[i]);
  }
  return merged;
}

std::vector<std::string> LinesWith(const std::string& text, const std::string& part) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, part)) lines.emplace_back(line);
  }
  return lines;
}

class CaptureHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(testing::MakeTlsFiles(TempDir("tls"), &tls_, &error)) << error;
    // As nobody (under root), the daemons must be able to write here: sticky, as /tmp.
    char folder[] = "/tmp/nrtprof-hosts-XXXXXX";
    ASSERT_NE(mkdtemp(folder), nullptr);
    folder_ = folder;
    ASSERT_EQ(chmod(folder_.c_str(), 01777), 0);
  }
  void TearDown() override {
    programs_.clear();
    hosts_.clear();
    RunProcess({"/bin/rm", "-rf", folder_});
  }

  // A daemon standing for a host: TCP on 127.0.0.1 (any port) with TLS and the token; with
  // `env` (libfaketime) if given. Its address, or "" (a test failure). Its socket and folders
  // are in folder_, where nobody may write.
  std::string StartHost(const std::string& name,
                        const std::map<std::string, std::string>& env = {}) {
    auto daemon = std::make_unique<Daemon>(name);
    std::vector<std::string> flags = {"--listen=127.0.0.1:0",
                                      "--tls_cert=" + tls_.server_cert,
                                      "--tls_key=" + tls_.server_key,
                                      "--token_file=" + tls_.token_file,
                                      "--output_root=" + folder_ + "/" + name + "-captures",
                                      "--spool_dir=" + folder_ + "/" + name + "-spool",
                                      "--socket=" + folder_ + "/" + name + "-sock/nrtprofd.sock"};
    if (geteuid() == 0) flags.push_back("--user=nobody");
    const bool started = daemon->Start(flags, 0, env);
    const std::string addr = daemon->tcp_addr();
    EXPECT_TRUE(started && absl::StartsWith(addr, "127.0.0.1:")) << addr << daemon->log();
    if (!started || addr.empty()) return "";
    hosts_[addr] = std::move(daemon);
    return addr;
  }

  std::vector<std::string> Tls() const {
    return {"--tls_ca", tls_.ca, "--token_file", tls_.token_file};
  }

  // `argv` preloaded with the shim (after `preload`, if any), streaming to the daemon at `addr`
  // over TLS, as a program on that host would.
  std::unique_ptr<Background> Program(const std::string& addr, const std::vector<std::string>& argv,
                                      const std::string& preload = "",
                                      std::map<std::string, std::string> env = {}) {
    const std::string shim = Runfile("shim/libnrtprof_shim.so");
    env["LD_PRELOAD"] = preload.empty() ? shim : preload + ":" + shim;
    env["NRTPROF_ADDR"] = addr;
    env["NRTPROF_TLS_CA"] = tls_.ca;
    env["NRTPROF_TOKEN_FILE"] = tls_.token_file;
    return std::make_unique<Background>(argv, env, TempDir("program"));
  }

  // Until the daemon at `addr` has a process connected (up to 10 s).
  bool AwaitConnected(const std::string& addr) {
    std::vector<std::string> argv = {"--addr", addr};
    for (const std::string& f : Tls()) argv.push_back(f);
    for (int i = 0; i < 200; ++i) {
      if (hosts_[addr]->StatusFigure("connected processes:", argv) >= 1) return true;
      usleep(50'000);
    }
    return false;
  }

  // A host for each name, with a program running the fused RMSNorm under it, connected; their
  // addresses in *hosts.
  void StartHostsWithPrograms(const std::vector<std::string>& names,
                              std::vector<std::string>* hosts) {
    for (const std::string& name : names) {
      hosts->push_back(StartHost(name));
      ASSERT_FALSE(hosts->back().empty());
      programs_.push_back(Program(hosts->back(), {Runfile("examples/rmsnorm"), "--variant",
                                                  "fused", "--iters", "100000"}));
    }
    for (const std::string& h : *hosts) ASSERT_TRUE(AwaitConnected(h)) << h;
  }

  // `prefix`: a command that runs nrtprof (as `timeout 60`).
  Result CaptureHosts(const std::vector<std::string>& hosts, const std::vector<std::string>& flags,
                      std::vector<std::string> prefix = {}) {
    std::vector<std::string> argv = std::move(prefix);
    for (const std::string& a :
         {Runfile("client/nrtprof"), std::string("capture"), std::string("--hosts"),
          absl::StrJoin(hosts, ",")}) {
      argv.push_back(a);
    }
    for (const std::string& f : Tls()) argv.push_back(f);
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunProcess(argv, kCliEnv);
  }

  const std::map<std::string, std::string> kCliEnv = {
      {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}, {"NRTPROF_TLS_CA", ""},
      {"NRTPROF_TOKEN_FILE", ""}};
  testing::TlsFiles tls_;
  std::string folder_;
  std::map<std::string, std::unique_ptr<Daemon>> hosts_;  // by address
  std::vector<std::unique_ptr<Background>> programs_;
};

TEST_F(CaptureHostsTest, OneCaptureOfThreeHostsMergesTheirTraces) {
  std::vector<std::string> hosts;
  ASSERT_NO_FATAL_FAILURE(StartHostsWithPrograms({"alpha", "beta", "gamma"}, &hosts));

  const std::string out = TempDir("hosts") + "/cap";
  const Result r = CaptureHosts(hosts, {"--duration", "1s", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "on 3 hosts -> " + out + ": recording for 1s")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "on 3 of 3 hosts")) << r.err;
  for (const std::string& h : hosts) {
    // Each host's clock, stated; its own files, fetched.
    EXPECT_EQ(LinesWith(r.err, "  " + h + " (").size(), 1u) << r.err;
    EXPECT_TRUE(absl::StrContains(LinesWith(r.err, "  " + h + " (").at(0), "): clock ")) << r.err;
    EXPECT_TRUE(Exists(out + "/" + h + "/trace.pftrace")) << h;
    EXPECT_TRUE(Exists(out + "/" + h + "/summary.json")) << h;
  }
  // The merged summary: overall, then by host, on stderr as in the file.
  const std::string summary = ReadFile(out + "/summary.txt");
  EXPECT_TRUE(absl::StartsWith(summary, "Overall (3 hosts)\n")) << summary;
  for (const std::string& h : hosts) EXPECT_TRUE(absl::StrContains(summary, "\nHost " + h + "\n"));
  EXPECT_TRUE(absl::StrContains(r.err, summary)) << r.err;

  // Every host's process, with its runtime calls and its device lanes, in the merged trace.
  const MergedTrace merged = ReadMerged(out + "/trace.pftrace");
  for (const std::string& h : hosts) {
    const std::string process = "rmsnorm @ " + h;
    ASSERT_EQ(merged.lanes.count(process), 1u) << process;
    const std::set<std::string>& lanes = merged.lanes.at(process);
    EXPECT_EQ(lanes.count("runtime"), 1u) << process;
    EXPECT_EQ(lanes.count("executions"), 1u) << process;
    EXPECT_EQ(std::count_if(merged.named_tracks.begin(), merged.named_tracks.end(),
                            [&](const std::string& t) {
                              return absl::StartsWith(t, "host " + h + " (") &&
                                     absl::StrContains(t, "): clock ");
                            }),
              1);
  }
  for (auto& p : programs_) EXPECT_TRUE(p->Running()) << "the programs go on, unaware";

  // Again into the same folder: refused before any host records, and nothing changes.
  const Result again = CaptureHosts(hosts, {"--duration", "1s", "--out", out});
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_EQ(again.err, "nrtprof capture: " + out +
                           " already holds a capture (trace.pftrace); choose another folder or "
                           "remove it\n");
}

// The number after "KEY": in a summary.json (its first such key); -1 if absent.
int64_t JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  int64_t n = -1;
  if (at == std::string::npos) return n;
  const std::string rest = json.substr(at + key.size() + 4);
  return absl::SimpleAtoi(rest.substr(0, rest.find_first_not_of("0123456789")), &n) ? n : -1;
}

// The pids a summary.json lists, in its order.
std::vector<std::string> JsonPids(const std::string& json) {
  std::vector<std::string> pids;
  for (size_t at = json.find("{\"pid\": "); at != std::string::npos;
       at = json.find("{\"pid\": ", at + 1)) {
    pids.push_back(json.substr(at + 8, json.find(',', at) - at - 8));
  }
  return pids;
}

// The merged summary's header is the hosts' together (issue 36: it said "window 0.000us" and
// "Totals: 0 events"), and `nrtprof summary --from-trace` reads the merged trace (it refused
// the merge's host tracks) to print the same table as the merged summary.json.
TEST_F(CaptureHostsTest, TheMergedSummaryIsTheHostsTogetherAndTheMergedTraceSaysTheSame) {
  std::vector<std::string> hosts;
  ASSERT_NO_FATAL_FAILURE(StartHostsWithPrograms({"sum-a", "sum-b"}, &hosts));
  const std::string out = TempDir("hosts-summary") + "/cap";
  const Result r = CaptureHosts(hosts, {"--duration", "1s", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto summary = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {Runfile("client/nrtprof"), "summary"};
    argv.insert(argv.end(), args.begin(), args.end());
    const Result s = RunProcess(argv, kCliEnv);
    EXPECT_EQ(s.exit_code, 0) << absl::StrJoin(args, " ") << ": " << s.err;
    return s.out;
  };

  // What each host's own summary says: its events, its window on its wall clock, its pids.
  int64_t events = 0, first = INT64_MAX, last = 0;
  const std::string merged_json = summary({out, "--format", "json"});
  for (const std::string& h : hosts) {
    const std::string json = summary({out + "/" + h, "--format", "json"});
    ASSERT_GT(JsonNumber(json, "events"), 0) << json;
    ASSERT_GT(JsonNumber(json, "window_start_unix_ns"), 0) << json;
    events += JsonNumber(json, "events");
    first = std::min(first, JsonNumber(json, "window_start_unix_ns"));
    last = std::max(last, JsonNumber(json, "window_start_unix_ns") + JsonNumber(json, "window_ns"));
    const std::vector<std::string> pids = JsonPids(json);
    ASSERT_FALSE(pids.empty()) << json;
    for (const std::string& pid : pids) {
      EXPECT_TRUE(absl::StrContains(merged_json,
                                    absl::StrCat("{\"pid\": ", pid, ", \"host\": \"", h, "\"")))
          << pid << " of " << h << " is not in the merged summary: " << merged_json;
    }
  }
  // The merged summary: every host's events, over the span from the first host's first event
  // to the last one's last.
  EXPECT_EQ(JsonNumber(merged_json, "events"), events) << merged_json;
  EXPECT_EQ(JsonNumber(merged_json, "window_start_unix_ns"), first) << merged_json;
  EXPECT_EQ(JsonNumber(merged_json, "window_ns"), last - first) << merged_json;
  EXPECT_EQ(JsonPids(merged_json).size(),
            JsonPids(summary({out + "/" + hosts[0], "--format", "json"})).size() +
                JsonPids(summary({out + "/" + hosts[1], "--format", "json"})).size());

  // As a user reads it: summary.txt's overall table is what `nrtprof summary DIR` prints, its
  // header names both hosts and counts every event.
  const std::string text = summary({out});
  EXPECT_TRUE(absl::StartsWith(ReadFile(out + "/summary.txt"), "Overall (2 hosts)\n" + text))
      << ReadFile(out + "/summary.txt") << "\n---\n" << text;
  const std::vector<std::string> header = absl::StrSplit(text, '\n');
  EXPECT_TRUE(absl::StrContains(header.at(0), " on " + hosts[0] + ", " + hosts[1] + ": "))
      << text;
  EXPECT_FALSE(absl::StrContains(header.at(0), "window 0.000us")) << text;
  EXPECT_EQ(LinesWith(text, absl::StrCat("Totals: ", events, " events, ")).size(), 1u) << text;
  for (const std::string& h : hosts) {
    EXPECT_EQ(LinesWith(text, " on " + h + ": ").size(), 1u) << h << " has no process line: "
                                                               << text;
  }

  // Recomputed from the merged trace: the same table, header and all, in every format.
  EXPECT_EQ(summary({out, "--from-trace"}), text);
  EXPECT_EQ(summary({out + "/trace.pftrace", "--from-trace", "--format", "json"}), merged_json);
}

TEST_F(CaptureHostsTest, AHostThatIsDownIsNamedAndTheOthersAreWritten) {
  std::vector<std::string> hosts;
  ASSERT_NO_FATAL_FAILURE(StartHostsWithPrograms({"up1", "up2", "down"}, &hosts));
  const std::string down = hosts[2];
  hosts_[down]->Stop(SIGTERM);

  // Only the files the merge needs: each host writes no others (--files reaches every host).
  const std::string out = TempDir("hosts-down") + "/cap";
  const Result r =
      CaptureHosts(hosts, {"--duration", "500ms", "--files", "pftrace,summary", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> named = LinesWith(r.err, down);
  ASSERT_EQ(named.size(), 1u) << r.err;
  EXPECT_TRUE(absl::StartsWith(named[0], "nrtprof capture: host " + down + " is left out: "))
      << named[0];
  EXPECT_TRUE(absl::StrContains(r.err, "on 2 of 3 hosts")) << r.err;
  EXPECT_FALSE(Exists(out + "/" + down));
  EXPECT_TRUE(absl::StartsWith(ReadFile(out + "/summary.txt"), "Overall (2 hosts)\n"));
  const MergedTrace merged = ReadMerged(out + "/trace.pftrace");
  for (const std::string& h : {hosts[0], hosts[1]}) {
    EXPECT_TRUE(Exists(out + "/" + h + "/trace.pftrace")) << h;
    EXPECT_TRUE(Exists(out + "/" + h + "/summary.json")) << h;
    EXPECT_FALSE(Exists(out + "/" + h + "/trace.json")) << h;
    EXPECT_EQ(merged.lanes.count("rmsnorm @ " + h), 1u) << h;
  }

  // No host at all: nothing is written, and the command fails.
  const std::string none = TempDir("hosts-none") + "/cap";
  const Result failed = CaptureHosts({down}, {"--duration", "500ms", "--out", none});
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_TRUE(absl::StrContains(failed.err, "no host could be reached; nothing was captured"))
      << failed.err;
  EXPECT_FALSE(Exists(none + "/trace.pftrace"));
}

// A host with no process: its part of the capture is said empty, and why, as a capture of one
// host says it (issue 36: it said nothing per host), and a capture empty on every host exits 3.
// Whole steps: a host none of whose processes marks steps is said at once, waited for
// --step_timeout and no more (it held the capture for the hour), and the others' steps are
// written.
TEST_F(CaptureHostsTest, AnEmptyHostSaysWhyAndIsNotWaitedForSteps) {
  const std::string busy = StartHost("busy");
  const std::string idle = StartHost("idle");
  ASSERT_FALSE(busy.empty() || idle.empty());
  programs_.push_back(
      Program(busy, {Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "100000"}));
  ASSERT_TRUE(AwaitConnected(busy));
  const std::string dir = TempDir("hosts-empty");

  Result r = CaptureHosts({busy, idle}, {"--duration", "500ms", "--out", dir + "/window"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LinesWith(r.err, "part of the capture is empty"),
            std::vector<std::string>{
                "nrtprof capture: host " + idle +
                ": its part of the capture is empty: no process was connected to the daemon in "
                "the window (a program streams to it when preloaded with the shim: "
                "LD_PRELOAD=.../libnrtprof_shim.so)"})
      << r.err;

  r = CaptureHosts({idle}, {"--duration", "500ms", "--out", dir + "/idle"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(LinesWith(r.err, "host " + idle + ": its part of the capture is empty: ").size(), 1u)
      << r.err;
  EXPECT_TRUE(Exists(dir + "/idle/summary.txt")) << r.err;

  // `timeout` turns a wait that does not end by itself into a failure.
  r = CaptureHosts({busy, idle},
                   {"--iterations", "3", "--step_timeout", "2s", "--out", dir + "/steps"},
                   {"/usr/bin/timeout", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, ": 3 whole steps, waiting at most 2s for a process that "
                                       "marks steps (--step_timeout); Ctrl-C ends it early\n"))
      << r.err;
  const std::string host = "nrtprof capture: host " + idle + ": ";
  EXPECT_EQ(LinesWith(r.err, host + "no process connected marks steps (nrtprof_step): none is "
                                    "connected; waiting ")
                .size(),
            1u)
      << r.err;
  EXPECT_EQ(LinesWith(r.err, host + "no process marked steps (nrtprof_step) within 2s "
                                    "(--step_timeout): its part of the capture ends")
                .size(),
            1u)
      << r.err;
  EXPECT_EQ(LinesWith(r.err, host + "its part of the capture is empty: no process marked any of "
                                    "steps ")
                .size(),
            1u)
      << r.err;
  EXPECT_TRUE(LinesWith(r.err, "host " + busy + ": ").empty()) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 1 process on 2 of 2 hosts")) << r.err;
  EXPECT_EQ(ReadMerged(dir + "/steps/trace.pftrace").lanes.count("rmsnorm @ " + busy), 1u);
}

// The CLI's offset of a host, from its line "  HOST (NAME): clock +250.012ms ± 0.030ms", in
// ms; NaN if absent.
double OffsetMs(const std::string& err, const std::string& host) {
  for (const std::string& line : LinesWith(err, "  " + host + " (")) {
    const size_t at = line.find("): clock ");
    if (at == std::string::npos) continue;
    std::string number = line.substr(at + 9);
    number = number.substr(0, number.find("ms"));
    double ms = 0;
    if (absl::SimpleAtod(number, &ms)) return ms;
  }
  return std::nan("");
}

// A host whose wall clock is 250 ms ahead (libfaketime in its daemon and its program): the CLI
// says so, and calls made at the same real instant on both hosts -- each program was given
// that instant in its own host's clock -- land within 1 ms of each other in the merged trace
// (unshifted, they would be 250 ms apart).
TEST_F(CaptureHostsTest, AHostWhoseClockIsAheadLinesUp) {
  ASSERT_TRUE(Exists(kLibFaketime))
      << kLibFaketime << " is missing: run third_party/install_debian_deps.sh";
  // The wall clock only: libfaketime 0.9.10 does not wrap pthread_cond_clockwait, through
  // which the daemon's condition variables wait on CLOCK_MONOTONIC, so a faked monotonic clock
  // would have them wait for decades. The merged trace is placed by the hosts' wall clocks.
  const std::map<std::string, std::string> ahead = {
      {"LD_PRELOAD", kLibFaketime}, {"FAKETIME", "+0.25"}, {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}};
  const std::string near = StartHost("near");
  const std::string far = StartHost("far", ahead);
  ASSERT_FALSE(near.empty() || far.empty());

  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  // A whole second 3-4 s from now: time for both programs to start and connect on a busy machine.
  const int64_t first = (now.tv_sec + 4) * 1'000'000'000LL;
  constexpr int kMarks = 5;
  auto marks = [&](int64_t at) {
    return std::vector<std::string>{Runfile("tests/clock_marks"), std::to_string(at),
                                    std::to_string(kMarks), "100"};
  };
  auto near_program = Program(near, marks(first));
  auto far_program = Program(far, marks(first + 250'000'000), kLibFaketime,
                             {{"FAKETIME", "+0.25"}, {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}});
  ASSERT_TRUE(AwaitConnected(near));
  ASSERT_TRUE(AwaitConnected(far));

  const std::string out = TempDir("hosts-clock") + "/cap";
  // From the flight recorder too: the marks are in the window however long the start took.
  const Result r =
      CaptureHosts({near, far}, {"--last", "10s", "--duration", "5s", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(OffsetMs(r.err, near), 0, 5) << r.err;
  EXPECT_NEAR(OffsetMs(r.err, far), 250, 5) << r.err;
  EXPECT_EQ(near_program->Wait(), 0) << near_program->err();
  EXPECT_EQ(far_program->Wait(), 0) << far_program->err();

  MergedTrace merged = ReadMerged(out + "/trace.pftrace");
  const std::vector<uint64_t> a = merged.slice_times["clock_marks @ " + near]["nrt_tensor_write"];
  const std::vector<uint64_t> b = merged.slice_times["clock_marks @ " + far]["nrt_tensor_write"];
  ASSERT_EQ(a.size(), static_cast<size_t>(kMarks)) << r.err;
  ASSERT_EQ(b.size(), static_cast<size_t>(kMarks)) << r.err;
  // The median of the marks' differences: one mark a busy machine woke late does not decide.
  std::vector<int64_t> apart;
  for (int i = 0; i < kMarks; ++i) {
    apart.push_back(std::llabs(static_cast<int64_t>(a[i]) - static_cast<int64_t>(b[i])));
  }
  std::sort(apart.begin(), apart.end());
  EXPECT_LE(apart[kMarks / 2], 1'000'000) << "the same instant, " << apart[kMarks / 2]
                                          << " ns apart in the merged trace";
}

// Two hosts whose programs are in step (they mark a step every 20 ms from the same instant, as
// the ranks of a training job, and stand still at step 24 for 3 s, when the capture starts):
// with --iterations and --step_multiple, both record the same step numbers, and the capture
// ends once both have made the last one.
TEST_F(CaptureHostsTest, WholeStepsAreTheSameStepsOnEveryHost) {
  const std::string a = StartHost("steps-a");
  const std::string b = StartHost("steps-b");
  ASSERT_FALSE(a.empty() || b.empty());
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t first = (now.tv_sec + 2) * 1'000'000'000LL;
  const std::vector<std::string> marks = {Runfile("tests/clock_marks"), std::to_string(first),
                                          "60", "20", "24", "3000"};
  auto program_a = Program(a, marks);
  auto program_b = Program(b, marks);
  ASSERT_TRUE(AwaitConnected(a));
  ASSERT_TRUE(AwaitConnected(b));
  // Into the pause: both have marked their 25th step, and mark no other for 3 s.
  for (;;) {
    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t ns = now.tv_sec * 1'000'000'000LL + now.tv_nsec;
    if (ns >= first + 1'000'000'000) break;
    usleep(10'000);
  }

  const std::string out = TempDir("hosts-steps") + "/cap";
  const Result r = CaptureHosts(
      {a, b}, {"--iterations", "3", "--step_multiple", "10", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> line_a = LinesWith(r.err, "  " + a + " (");
  const std::vector<std::string> line_b = LinesWith(r.err, "  " + b + " (");
  ASSERT_EQ(line_a.size(), 1u) << r.err;
  ASSERT_EQ(line_b.size(), 1u) << r.err;
  // ", steps 50 to 52" (and maybe "; its window began ... late", which changes no step).
  auto steps_of = [](const std::string& line) {
    const size_t at = line.find(", steps ");
    return at == std::string::npos ? "" : line.substr(at, line.find(';', at) - at);
  };
  EXPECT_TRUE(absl::StrContains(steps_of(line_a[0]), "0 to ")) << r.err;  // a multiple of 10
  EXPECT_EQ(steps_of(line_b[0]), steps_of(line_a[0])) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "not in step")) << r.err;
  // Three steps of each: a mark each.
  MergedTrace merged = ReadMerged(out + "/trace.pftrace");
  EXPECT_EQ(merged.slice_times["clock_marks @ " + a]["nrt_tensor_write"].size(), 3u) << r.err;
  EXPECT_EQ(merged.slice_times["clock_marks @ " + b]["nrt_tensor_write"].size(), 3u) << r.err;
}

// A local TCP port nobody listens on now (the job's rank 0 listens on it next).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

// The CLI's error bound of a host's clock, from its line "  HOST (NAME): clock +0.012ms ±
// 0.030ms", in ns; -1 if absent.
int64_t ClockErrorNs(const std::string& err, const std::string& host) {
  for (const std::string& line : LinesWith(err, "  " + host + " (")) {
    const size_t at = line.find(" \u00b1 ");
    if (at == std::string::npos) continue;
    std::string number = line.substr(at + 4);
    number = number.substr(0, number.find("ms"));
    double ms = 0;
    if (absl::SimpleAtod(number, &ms)) return static_cast<int64_t>(ms * 1e6);
  }
  return -1;
}

// The start of every cc_running slice of a merged trace, by its nrta_seq (the collective's
// queue and number, the same on every rank), with the process (its "NAME @ HOST") it is of.
std::map<uint64_t, std::vector<std::pair<std::string, uint64_t>>> CollectiveStarts(
    const std::string& path) {
  std::map<uint64_t, std::vector<std::pair<std::string, uint64_t>>> starts;
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(ReadFile(path));
  EXPECT_TRUE(read.ok()) << path << ": " << read.status();
  if (!read.ok()) return starts;
  std::map<uint64_t, uint64_t> parent;
  std::map<uint64_t, std::string> process_of;
  std::map<std::pair<uint32_t, uint64_t>, std::string> names, arg_names;  // (sequence, iid)
  for (int i = 0; i < read->trace.packet_size(); ++i) {
    const perfetto::protos::TracePacket& p = read->trace.packet(i);
    const uint32_t seq = p.trusted_packet_sequence_id();
    for (const auto& n : p.interned_data().event_names()) names[{seq, n.iid()}] = n.name();
    for (const auto& n : p.interned_data().debug_annotation_names()) {
      arg_names[{seq, n.iid()}] = n.name();
    }
    if (p.has_track_descriptor()) {
      const auto& t = p.track_descriptor();
      parent[t.uuid()] = t.parent_uuid();
      if (t.has_process()) process_of[t.uuid()] = t.process().process_name();
    }
    const auto& e = p.track_event();
    if (e.type() != perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN ||
        (e.has_name_iid() ? names[{seq, e.name_iid()}] : e.name()) != "cc_running") {
      continue;
    }
    uint64_t track = e.track_uuid();
    while (process_of.count(track) == 0 && parent.count(track) != 0) track = parent[track];
    for (const auto& a : e.debug_annotations()) {
      if ((a.has_name_iid() ? arg_names[{seq, a.name_iid()}] : a.name()) == "nrta_seq") {
        starts[a.uint_value()].emplace_back(process_of[track], read->times[i]);
      }
    }
  }
  return starts;
}

// Issue 40 across hosts, live: a data-parallel job of 4 ranks, 0-1 on one host and 2-3 on the
// other (a launcher per host, as torchrun's --nnodes: the hosts' ranks stream to their own
// daemon and exchange over TCP as ranks on different hosts do), rank 2 stalled on the host each
// step. One `capture --hosts --iterations 3` of the running job; `nrtprof collectives` on the
// merged capture names rank 2, its host and its cause; every collective's cc_running starts at
// the same time on both hosts, within the two hosts' stated clock errors.
TEST_F(CaptureHostsTest, ACollectiveJobAcrossTwoHostsNamesItsSlowRankAndLinesUp) {
  const std::string a = StartHost("ranks-a");
  const std::string b = StartHost("ranks-b");
  ASSERT_FALSE(a.empty() || b.empty());
  const int port = FreePort();
  ASSERT_NE(port, 0);
  auto launcher = [&](const std::string& host, const std::string& ranks) {
    const std::string shim = Runfile("shim/libnrtprof_shim.so");
    const std::map<std::string, std::string> env = {
        {"LD_PRELOAD", shim},        {"NRTPROF_ADDR", host},
        {"NRTPROF_TLS_CA", tls_.ca}, {"NRTPROF_TOKEN_FILE", tls_.token_file},
        {"NRT_SIM_HOST_ID", host},   {"NRT_SIM_CC_TRANSPORT", "tcp"},
        {"NRT_SIM_TIME_SCALE", "1"}, {"NRT_SIM_CC_TIMEOUT_MS", "30000"}};
    // Its ranks are its process group: the test ends the job as a terminal's Ctrl-C would.
    return std::make_unique<Background>(
        std::vector<std::string>{Runfile("examples/cc_job"), "--ranks", "4", "--steps", "100000",
                                 "--slow-rank", "2", "--slow-ms", "100", "--root",
                                 absl::StrCat("127.0.0.1:", port), "--local-ranks", ranks},
        env, TempDir("job-" + ranks), /*own_group=*/true);
  };
  std::unique_ptr<Background> job_a = launcher(a, "0,1");
  std::unique_ptr<Background> job_b = launcher(b, "2-3");
  auto end_job = [&] {
    for (Background* job : {job_a.get(), job_b.get()}) {
      job->SignalGroup(SIGKILL);
      job->Wait();
    }
  };
  ASSERT_TRUE(AwaitConnected(a)) << job_a->err();
  ASSERT_TRUE(AwaitConnected(b)) << job_b->err();

  const std::string out = TempDir("hosts-collectives") + "/cap";
  const Result r =
      CaptureHosts({a, b}, {"--iterations", "3", "--out", out}, {"/usr/bin/timeout", "120"});
  EXPECT_TRUE(job_a->Running() && job_b->Running()) << "the job goes on, unaware\n"
                                                    << job_a->err() << job_b->err();
  end_job();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 4 processes on 2 of 2 hosts")) << r.err;
  // The same steps on both hosts, though each daemon saw its ranks' steps a flush apart.
  const std::vector<std::string> line_a = LinesWith(r.err, "  " + a + " (");
  const std::vector<std::string> line_b = LinesWith(r.err, "  " + b + " (");
  ASSERT_EQ(line_a.size(), 1u) << r.err;
  ASSERT_EQ(line_b.size(), 1u) << r.err;
  const auto steps_of = [](const std::string& line) {
    const size_t at = line.find(", steps ");
    return at == std::string::npos ? "" : line.substr(at, line.find(';', at) - at);
  };
  EXPECT_NE(steps_of(line_a[0]), "") << r.err;
  EXPECT_EQ(steps_of(line_a[0]), steps_of(line_b[0])) << r.err;

  // The answer: 4 ranks on the two hosts, rank 2 last in every collective every rank reached,
  // on host b, stalled on the host.
  const Result c = RunProcess({Runfile("client/nrtprof"), "collectives", out}, kCliEnv);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(absl::StartsWith(c.out, "4 ranks on " + a + "," + b + ", ")) << c.out;
  const std::string slowest =
      LinesWith(c.out, "Slowest rank: ").empty() ? "" : LinesWith(c.out, "Slowest rank: ").front();
  EXPECT_TRUE(absl::StartsWith(slowest, "Slowest rank: 2 (" + b + " pid ")) << c.out;
  EXPECT_TRUE(absl::StrContains(slowest, "before it arrived: host: data_loader_stall")) << c.out;
  std::vector<std::string> rows;  // the per-collective rows: "  step  #k on queue q ..."
  for (const std::string& line : LinesWith(c.out, " on queue ")) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() >= 8 && words[2] == "on") rows.push_back(line);
  }
  ASSERT_GE(rows.size(), 3u) << c.out;
  size_t complete = 0;
  for (const std::string& row : rows) {
    std::vector<std::string> words = absl::StrSplit(row, ' ', absl::SkipEmpty());
    if (words[5] != "4/4") continue;
    ++complete;
    EXPECT_EQ(words[7], "2") << row << "\n" << c.out;
    EXPECT_TRUE(absl::StrContains(row, "host: data_loader_stall")) << row;
  }
  EXPECT_GE(complete, 3u) << c.out << r.err;
  // The straggler table: each rank with its own host.
  for (const auto& [rank, host] :
       std::vector<std::pair<std::string, std::string>>{{"0", a}, {"1", a}, {"2", b}, {"3", b}}) {
    bool found = false;
    for (const std::string& line : LinesWith(c.out, " " + host + " ")) {
      std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
      found = found || (words.size() >= 2 && words[0] == rank && words[1] == host);
    }
    EXPECT_TRUE(found) << "rank " << rank << " on " << host << "\n" << c.out;
  }

  // The merged capture's report: its Collectives section names the same rank on the same host.
  const Result report =
      RunProcess({Runfile("client/nrtprof"), "report", out, "-o", out + "/report.html"}, kCliEnv);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/report.html"), "\"slowest\":\"" + slowest + "\""))
      << slowest;

  // The merged trace: each collective's running starts at one time on both hosts.
  const int64_t error_a = ClockErrorNs(r.err, a), error_b = ClockErrorNs(r.err, b);
  ASSERT_GE(error_a, 0) << r.err;
  ASSERT_GE(error_b, 0) << r.err;
  size_t across = 0;
  for (const auto& [seq, starts] : CollectiveStarts(out + "/trace.pftrace")) {
    std::set<std::string> hosts;
    uint64_t first = UINT64_MAX, last = 0;
    for (const auto& [process, t] : starts) {
      hosts.insert(process.substr(process.find(" @ ") + 3));
      first = std::min(first, t);
      last = std::max(last, t);
    }
    if (hosts.size() < 2) continue;  // a step one host's window has and the other's not
    ++across;
    EXPECT_LE(static_cast<int64_t>(last - first), error_a + error_b)
        << "collective " << (seq & 0xffffffffffff) << ": its running starts " << last - first
        << " ns apart across the hosts, whose clocks are known to " << error_a << " and " << error_b
        << " ns";
  }
  EXPECT_GE(across, 3u) << "collectives seen on both hosts";
}

// Flags that cannot make a capture across hosts: one line each, exit 2, nothing written.
TEST_F(CaptureHostsTest, BadHostListsAreRefusedInOneLine) {
  const std::string out = TempDir("hosts-bad") + "/cap";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hosts", "a:1,,b:2", "--duration", "1s", "--out", out},
       "nrtprof capture: --hosts 'a:1,,b:2' has an empty entry\n"},
      {{"--hosts", "a:1,b:2,a:1", "--duration", "1s", "--out", out},
       "nrtprof capture: --hosts names a:1 twice\n"},
      {{"--hosts", "a:1", "--duration", "1s"},
       "nrtprof capture: --hosts needs --out DIR: the folder on this machine where every host's "
       "files go\n"},
      {{"--hosts", "a:1", "--addr", "a:1", "--duration", "1s", "--out", out},
       "nrtprof capture: --hosts names every daemon: not with --addr\n"},
  };
  for (const auto& [flags, line] : cases) {
    std::vector<std::string> argv = {Runfile("client/nrtprof"), "capture"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const Result r = RunProcess(argv, kCliEnv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, line);
  }
  EXPECT_FALSE(Exists(out));
}

}  // namespace
}  // namespace nrtprof
