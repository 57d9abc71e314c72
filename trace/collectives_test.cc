// AnalyzeCollectives on hand-built captures: collectives matched across ranks by queue and
// number, the last rank and the wait it cost, the late rank's cause, ranks that vanished.
#include "trace/collectives.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kQueue = 32;
uint64_t Seq(uint64_t number) { return (kQueue << 48) | number; }

ProcessTrace Rank(uint32_t pid, std::vector<std::string> command_line) {
  ProcessTrace p;
  p.pid = pid;
  p.executable = "/bin/job";
  p.host = "hostA";
  p.command_line = std::move(command_line);
  return p;
}

uint64_t next_id = 1;

void AddRange(ProcessTrace* p, const std::string& name, uint64_t start, uint64_t duration,
              uint32_t depth = 1) {
  RangeEvent r;
  r.id = next_id++;
  r.name = Name::Lasting(name);
  r.tid = 1;
  r.start_ns = start;
  r.duration_ns = duration;
  r.depth = depth;
  p->ranges.push_back(r);
}

void AddCall(ProcessTrace* p, const char* name, uint64_t start, uint64_t duration,
             uint64_t seq = 0) {
  ApiCall c;
  c.correlation_id = next_id++;
  c.name = Name::Lasting(name);
  c.tid = 1;
  c.start_ns = start;
  c.duration_ns = duration;
  c.nrta_seq = seq;
  p->calls.push_back(c);
}

// One step of a rank: ProfilerStep#step from `step_start`, the all-reduce scheduled at
// `arrival` and seen complete at `done`.
void AddStep(ProcessTrace* p, int step, uint64_t step_start, uint64_t arrival, uint64_t done) {
  AddRange(p, "ProfilerStep#" + std::to_string(step), step_start, done + kMs - step_start, 0);
  AddRange(p, "all_reduce", arrival - 10, done + 10 - (arrival - 10));
  AddCall(p, "nrta_cc_schedule", arrival, 5000, Seq(step + 1));
  AddCall(p, "nrta_is_completed", done, 0, Seq(step + 1));
}

void Sort(ProcessTrace* p) {
  std::sort(p->calls.begin(), p->calls.end(),
            [](const ApiCall& a, const ApiCall& b) { return a.start_ns < b.start_ns; });
  std::sort(p->ranges.begin(), p->ranges.end(), [](const RangeEvent& a, const RangeEvent& b) {
    return a.start_ns < b.start_ns;
  });
}

// Three ranks, two steps. Step 0: rank 1 stalls on the host 20 ms. Step 1: rank 2 runs an extra
// device execution for 30 ms. The pids are in the opposite order of the ranks.
Trace TwoSteps() {
  Trace t;
  for (int r = 0; r < 3; ++r) {
    t.processes.push_back(Rank(300 - r, {"job", "--rank", std::to_string(r)}));
  }
  const uint64_t s0 = 100 * kMs, s1 = 200 * kMs;
  for (int r = 0; r < 3; ++r) {
    ProcessTrace& p = t.processes[r];
    // step 0: arrivals at +10 ms (+1 ms per rank), rank 1 at +30 ms; done at +31 ms.
    const uint64_t a0 = r == 1 ? s0 + 30 * kMs : s0 + (10 + r) * kMs;
    if (r == 1) AddRange(&p, "data_loader_stall", s0 + 10 * kMs, 20 * kMs);
    AddStep(&p, 0, s0, a0, s0 + 31 * kMs);
    // step 1: arrivals at +10 ms, rank 2 at +45 ms after a device execution from +12 ms.
    const uint64_t a1 = r == 2 ? s1 + 45 * kMs : s1 + (10 + r) * kMs;
    if (r == 2) {
      AddRange(&p, "extra_forward", s1 + 12 * kMs, 33 * kMs);
      AddCall(&p, "nrt_execute", s1 + 12 * kMs, 33 * kMs);
      p.calls.back().model_name = Name::Lasting("extra_model");
      DeviceEvent d;
      d.id = next_id++;
      d.kind = DeviceEventKind::kExecution;
      d.name = "nc_exec_running";
      d.model_name = Name::Lasting("extra_model");
      d.start_ns = s1 + 13 * kMs;
      d.duration_ns = 31 * kMs;
      p.device.push_back(d);
    }
    AddStep(&p, 1, s1, a1, s1 + 46 * kMs + r * 100);
    Sort(&p);
  }
  return t;
}

TEST(CollectivesTest, MatchesEachCollectiveAcrossRanksAndNamesTheLastOne) {
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(TwoSteps());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->members.size(), 3u);
  EXPECT_TRUE(a->ranks_said);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(a->members[r].rank, r);
    EXPECT_EQ(a->members[r].pid, static_cast<uint32_t>(300 - r));
  }
  ASSERT_EQ(a->instances.size(), 2u);
  const CollectiveInstance& first = a->instances[0];
  EXPECT_EQ(first.queue, kQueue);
  EXPECT_EQ(first.number, 1u);
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(a->members[first.last].rank, 1);
  EXPECT_EQ(first.first_arrival_ns, 110 * kMs);
  EXPECT_EQ(first.start_ns, 130 * kMs);
  EXPECT_EQ(first.skew_ns(), 20 * kMs);
  EXPECT_EQ(first.end_ns, 131 * kMs);
  EXPECT_EQ(first.wait_cost_ns, 20 * kMs + 18 * kMs);
  ASSERT_FALSE(first.late_causes.empty());
  EXPECT_EQ(first.late_causes[0].what, "host: data_loader_stall");

  const CollectiveInstance& second = a->instances[1];
  EXPECT_EQ(second.step, 1);
  EXPECT_EQ(a->members[second.last].rank, 2);
  EXPECT_EQ(second.end_ns, 246 * kMs);  // the first rank to see it complete
  ASSERT_FALSE(second.late_causes.empty());
  EXPECT_EQ(second.late_causes[0].what, "device: extra_model");
  // The window is from the second-to-last arrival (+11 ms) to its own (+45 ms): 34 ms, 33 of
  // them in the execution's call (31 on the device), 1 in the step before it.
  uint64_t total = 0;
  for (const LateCause& c : second.late_causes) total += c.ns;
  EXPECT_EQ(total, 34 * kMs);
  EXPECT_EQ(second.late_causes[0].ns, 33 * kMs);
}

TEST(CollectivesTest, StragglerTableCountsTimesLastAndTheWaitCost) {
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(TwoSteps());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->stragglers.size(), 3u);
  // Each of ranks 1 and 2 was last once; rank 2 cost more (35 + 34 ms against 20 + 18).
  EXPECT_EQ(a->members[a->stragglers[0].member].rank, 2);
  EXPECT_EQ(a->stragglers[0].times_last, 1u);
  EXPECT_EQ(a->stragglers[0].wait_cost_ns, 69 * kMs);
  EXPECT_EQ(a->stragglers[0].causes[0].what, "device: extra_model");
  EXPECT_EQ(a->members[a->stragglers[1].member].rank, 1);
  EXPECT_EQ(a->stragglers[1].causes[0].what, "host: data_loader_stall");
  EXPECT_EQ(a->stragglers[2].times_last, 0u);
  // Rank 0 waited in both: 20 ms for rank 1, then 35 ms for rank 2.
  EXPECT_EQ(a->members[a->stragglers[2].member].rank, 0);
  EXPECT_EQ(a->stragglers[2].waited_ns, 55 * kMs);
  EXPECT_EQ(a->stragglers[0].waited_ns, 18 * kMs);  // rank 2 waited for rank 1 only
  EXPECT_TRUE(a->notes.empty());
}

// Four balanced ranks, `steps` steps: each rank arrives within `jitter_us` microseconds of the
// others, the last one rotating (rank step % 4).
Trace Balanced(int steps, uint64_t jitter_us) {
  Trace t;
  for (int r = 0; r < 4; ++r) {
    t.processes.push_back(Rank(400 + r, {"job", "--rank", std::to_string(r)}));
  }
  for (int s = 0; s < steps; ++s) {
    const uint64_t start = (100 + 10 * s) * kMs;
    for (int r = 0; r < 4; ++r) {
      const uint64_t late = (r + 4 - s % 4) % 4;  // 3 for the rank last in this step
      AddStep(&t.processes[r], s, start, start + kMs + late * jitter_us * 1000 / 3,
              start + 3 * kMs);
    }
  }
  for (ProcessTrace& p : t.processes) Sort(&p);
  return t;
}

TEST(CollectivesTest, ArrivalsWithinTheNoiseFloorHaveNoLateRank) {
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(Balanced(6, 30));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->noise_floor_ns, 50'000u);
  EXPECT_EQ(a->within_noise, 6u);
  EXPECT_EQ(a->late_instances, 0u);
  for (const CollectiveInstance& c : a->instances) {
    EXPECT_TRUE(c.within_noise);
    EXPECT_EQ(c.skew_ns(), 30'000u);
    EXPECT_TRUE(c.late_causes.empty());
  }
  for (const Straggler& s : a->stragglers) {
    EXPECT_EQ(s.times_last, 0u);
    EXPECT_EQ(s.wait_cost_ns, 0u);
    EXPECT_EQ(s.waited_ns, 0u);
  }
  // With a floor below the jitter, every collective has its late rank again.
  CollectivesOptions fine;
  fine.noise_floor_ns = 10'000;
  a = AnalyzeCollectives(Balanced(6, 30), fine);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->within_noise, 0u);
  EXPECT_EQ(a->late_instances, 6u);
  uint64_t last = 0;
  for (const Straggler& s : a->stragglers) last += s.times_last;
  EXPECT_EQ(last, 6u);
}

TEST(CollectivesTest, ARankLastNoMoreOftenThanChanceDoesNotStandOut) {
  // 8 steps, the last rank rotating: each of the 4 ranks last twice, as chance would have it.
  CollectivesOptions fine;
  fine.noise_floor_ns = 10'000;
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(Balanced(8, 300), fine);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->late_instances, 8u);
  EXPECT_EQ(a->stragglers[0].times_last, 2u);
  // P(at least 2 of 8 at 1/4) = 1 - (3/4)^8 - 8 (1/4)(3/4)^7 = 0.633
  EXPECT_NEAR(a->stragglers[0].chance, 0.633, 0.001);
  // The two-step capture: rank 2 last in 1 of 2 with 3 ranks: 1 - (2/3)^2.
  a = AnalyzeCollectives(TwoSteps());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_NEAR(a->stragglers[0].chance, 1.0 - 4.0 / 9.0, 1e-9);
}

TEST(CollectivesTest, AtLeastByChanceIsTheBinomialTail) {
  EXPECT_DOUBLE_EQ(AtLeastByChance(0, 5, 0.25), 1.0);
  EXPECT_NEAR(AtLeastByChance(3, 3, 0.25), 1.0 / 64, 1e-12);
  EXPECT_NEAR(AtLeastByChance(5, 10, 0.25), 0.078127, 1e-6);
  EXPECT_DOUBLE_EQ(AtLeastByChance(4, 3, 0.25), 0.0);
  // Thousands of collectives stay finite.
  const double p = AtLeastByChance(900, 3000, 0.25);
  EXPECT_GT(p, 0.0);
  EXPECT_LT(p, 1e-6);
}

TEST(CollectivesTest, MatchesByQueueNumberNotByPositionInTheCapture) {
  // Rank 0's capture starts later: its first collective in the capture is number 2.
  Trace t = TwoSteps();
  ProcessTrace& p = t.processes[0];
  p.calls.erase(std::remove_if(p.calls.begin(), p.calls.end(),
                               [](const ApiCall& c) { return c.start_ns < 150 * kMs; }),
                p.calls.end());
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(t);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->instances.size(), 2u);
  EXPECT_EQ(a->instances[0].missing, std::vector<size_t>{0});
  EXPECT_EQ(a->instances[1].arrivals.size(), 3u);
  EXPECT_EQ(a->members[a->instances[1].last].rank, 2);
}

TEST(CollectivesTest, ARankThatVanishedIsNamed) {
  Trace t = TwoSteps();
  ProcessTrace& p = t.processes[1];
  p.calls.erase(std::remove_if(p.calls.begin(), p.calls.end(),
                               [](const ApiCall& c) { return c.start_ns > 150 * kMs; }),
                p.calls.end());
  p.cut_off = true;
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(t);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->instances.size(), 2u);
  EXPECT_EQ(a->instances[1].missing, std::vector<size_t>{1});
  ASSERT_EQ(a->notes.size(), 1u);
  EXPECT_NE(a->notes[0].find("rank 1 (hostA pid 299) is missing from collective #2 on queue 32"),
            std::string::npos)
      << a->notes[0];
  EXPECT_NE(a->notes[0].find("killed or crashed"), std::string::npos) << a->notes[0];
}

TEST(CollectivesTest, ARankWhoseEventsAllDiedWithItIsStillARank) {
  Trace t = TwoSteps();
  t.processes[1].calls.clear();
  t.processes[1].ranges.clear();
  t.processes[1].drops.process_died = 12;
  ProcessTrace other = Rank(5, {"python3", "monitor.py"});
  other.executable = "/usr/bin/python3";
  t.processes.push_back(other);  // not a rank: another program, no collectives
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(t);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->members.size(), 3u);
  EXPECT_EQ(a->instances[0].missing, std::vector<size_t>{1});
  EXPECT_EQ(a->instances[1].missing, std::vector<size_t>{1});
  ASSERT_EQ(a->notes.size(), 1u);
  EXPECT_NE(a->notes[0].find("rank 1 (hostA pid 299) is missing from collective #1 on queue 32 "
                             "and 1 more"),
            std::string::npos)
      << a->notes[0];
}

TEST(CollectivesTest, WithoutRanksOnTheCommandLineRanksAreNumberedByHostAndPid) {
  Trace t = TwoSteps();
  for (ProcessTrace& p : t.processes) p.command_line = {"job"};
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(t);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->ranks_said);
  EXPECT_EQ(a->members[0].pid, 298u);
  EXPECT_EQ(a->members[2].pid, 300u);
}

TEST(CollectivesTest, TheCollectivesDeviceEventsGiveArrivalAndEndWhenThereAreAny) {
  // Each rank's cc_exec_barrier starts 1 ms after its schedule call, rank 1's 5 ms after; the
  // collective runs 2 ms from the group's start.
  Trace t = TwoSteps();
  for (int r = 0; r < 3; ++r) {
    ProcessTrace& p = t.processes[r];
    for (const ApiCall& c : std::vector<ApiCall>(p.calls.begin(), p.calls.end())) {
      if (c.name != "nrta_cc_schedule" || c.nrta_seq != Seq(1)) continue;
      const uint64_t ready = c.start_ns + (r == 1 ? 5 : 1) * kMs;
      const uint64_t group = 130 * kMs + 5 * kMs;
      DeviceEvent barrier;
      barrier.id = next_id++;
      barrier.name = "cc_exec_barrier";
      barrier.nrta_seq = c.nrta_seq;
      barrier.start_ns = ready;
      barrier.duration_ns = group - ready;
      DeviceEvent running = barrier;
      running.id = next_id++;
      running.name = "cc_running";
      running.start_ns = group;
      running.duration_ns = 2 * kMs;
      p.device.push_back(barrier);
      p.device.push_back(running);
    }
  }
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(t);
  ASSERT_TRUE(a.ok()) << a.status();
  const CollectiveInstance& first = a->instances[0];
  EXPECT_EQ(a->members[first.last].rank, 1);
  EXPECT_EQ(first.first_arrival_ns, 111 * kMs);
  EXPECT_EQ(first.start_ns, 135 * kMs);
  EXPECT_EQ(first.end_ns, 137 * kMs);
}

TEST(CollectivesTest, RankFromCommandLineReadsTheLaunchersFlags) {
  EXPECT_EQ(RankFromCommandLine({"train", "--rank", "3"}), 3);
  EXPECT_EQ(RankFromCommandLine({"train", "--local_rank=5"}), 5);
  EXPECT_EQ(RankFromCommandLine({"train", "--local-rank", "7", "x"}), 7);
  EXPECT_EQ(RankFromCommandLine({"train", "--rank"}), -1);
  EXPECT_EQ(RankFromCommandLine({"train", "--rank", "x"}), -1);
  EXPECT_EQ(RankFromCommandLine({"train", "--ranks", "4"}), -1);
}

// The ranks of one job launched with one command line have one job: their command line without
// the rank, the program by its file name.
TEST(CollectivesTest, JobFromCommandLineIsTheSameForEveryRankOfAJob) {
  EXPECT_EQ(JobFromCommandLine({"/opt/bin/cc_job", "--rank", "3", "--ranks", "4"}),
            "cc_job --ranks 4");
  EXPECT_EQ(JobFromCommandLine({"bin/cc_job", "--rank", "0", "--ranks", "4"}),
            JobFromCommandLine({"/opt/bin/cc_job", "--rank", "3", "--ranks", "4"}));
  EXPECT_EQ(JobFromCommandLine({"python3", "train.py", "--local_rank=5"}), "python3 train.py");
  EXPECT_NE(JobFromCommandLine({"python3", "train.py", "--local_rank=5", "--lr", "1"}),
            JobFromCommandLine({"python3", "train.py", "--local_rank=5", "--lr", "2"}));
  EXPECT_EQ(JobFromCommandLine({"train", "--rank", "x"}), "train --rank x");  // says no rank
  EXPECT_EQ(JobFromCommandLine({}), "");
  // A job across hosts: each host's launcher starts its share of the ranks.
  EXPECT_EQ(JobFromCommandLine({"cc_job", "--rank", "0", "--ranks", "4", "--local-ranks", "0,1",
                                "--root", "trn1:7000"}),
            JobFromCommandLine({"cc_job", "--rank", "3", "--ranks", "4", "--local-ranks=2-3",
                                "--root", "trn1:7000"}));
  EXPECT_EQ(JobFromCommandLine({"train", "--node_rank", "1", "--rank", "9"}), "train");
}

// torchrun gives each rank RANK in its environment and the same command line: the rank is the
// environment's (Hello.rank), the job that command line (or the job id the process named).
TEST(CollectivesTest, RankAndJobOfATorchrunProcess) {
  ProcessTrace p;
  p.command_line = {"/usr/bin/python3", "train.py", "--lr", "1e-4"};
  EXPECT_EQ(RankOf(p), -1);
  EXPECT_TRUE(JobOf(p).name.empty()) << "no job id, no rank: the process alone";
  p.rank = 5;
  EXPECT_EQ(RankOf(p), 5);
  EXPECT_EQ(JobOf(p).name, "python3 train.py --lr 1e-4");
  EXPECT_TRUE(JobOf(p).from_command_line);
  p.job = "10.0.0.7:62182";
  EXPECT_EQ(JobOf(p).name, "10.0.0.7:62182");
  EXPECT_FALSE(JobOf(p).from_command_line);
  // The environment's rank before the command line's.
  p.command_line = {"cc_job", "--rank", "2"};
  EXPECT_EQ(RankOf(p), 5);
  p.rank = -1;
  EXPECT_EQ(RankOf(p), 2);
}

TEST(CollectivesTest, ACaptureWithoutCollectivesIsNotFound) {
  Trace t;
  t.processes.push_back(Rank(1, {"job"}));
  AddCall(&t.processes[0], "nrt_execute", 10, 10);
  absl::StatusOr<CollectivesAnalysis> a = AnalyzeCollectives(t);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace nrtprof::daemon
