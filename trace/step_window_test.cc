// A capture of whole steps keeps each process's steps' span and what its calls caused.
#include "trace/step_window.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

RangeEvent Range(uint64_t id, const std::string& name, uint64_t start, uint64_t duration,
                 uint64_t parent = 0) {
  RangeEvent r;
  r.id = id;
  r.name = Name::Lasting(name);
  r.start_ns = start;
  r.duration_ns = duration;
  r.parent_range = parent;
  return r;
}

ApiCall Call(uint64_t id, uint64_t start, uint64_t range) {
  ApiCall c;
  c.correlation_id = id;
  c.name = "nrt_execute";
  c.start_ns = start;
  c.duration_ns = 10;
  c.range = range;
  return c;
}

DeviceEvent Exec(uint64_t id, uint64_t correlation, uint64_t start) {
  DeviceEvent d;
  d.id = id;
  d.name = "nc_exec_running";
  d.kind = DeviceEventKind::kExecution;
  d.correlation_id = correlation;
  d.start_ns = start;
  d.duration_ns = 50;
  return d;
}

TEST(StepWindowTest, KeepsTheStepsSpanAndWhatItsCallsCaused) {
  Trace t;
  ProcessTrace p;
  p.pid = 7;
  // Steps 9, 10, 11, 12 of 100 ns each; a call in each.
  for (uint64_t k = 9; k <= 12; ++k) {
    const uint64_t start = (k - 9) * 100;
    p.ranges.push_back(Range(k, "ProfilerStep#" + std::to_string(k), start, 100));
    p.calls.push_back(Call(k, start + 20, k));
    p.device.push_back(Exec(k, k, start + 500));  // device time lands later on the host clock
  }
  p.device.push_back(Exec(99, 0, 150));  // uncorrelated, inside step 10
  t.processes.push_back(p);
  ProcessTrace q;
  q.pid = 8;
  q.ranges.push_back(Range(1, "ProfilerStep#3", 0, 100));
  t.processes.push_back(q);

  std::vector<std::string> notes;
  ClipToSteps(10, 11, &t, &notes);
  ASSERT_EQ(t.processes.size(), 1u);
  const ProcessTrace& kept = t.processes[0];
  ASSERT_EQ(kept.ranges.size(), 2u);
  EXPECT_EQ(kept.ranges[0].name, "ProfilerStep#10");
  EXPECT_EQ(kept.ranges[1].name, "ProfilerStep#11");
  ASSERT_EQ(kept.calls.size(), 2u);
  EXPECT_EQ(kept.calls[0].correlation_id, 10u);
  // The executions of the kept calls, wherever the device put them, and the uncorrelated one
  // within the span.
  ASSERT_EQ(kept.device.size(), 3u);
  EXPECT_EQ(kept.device_uncorrelated, 1u);
  EXPECT_EQ(t.start_ns, 100u);
  EXPECT_EQ(t.end_ns, 300u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "pid 8 (): none of steps 10 to 11 in the window; left out");
}

TEST(StepWindowTest, AnEarlyEndKeepsTheStepsThereAreAndSaysSo) {
  Trace t;
  ProcessTrace p;
  p.pid = 7;
  p.executable = "train";
  p.ranges.push_back(Range(1, "ProfilerStep#20", 0, 100));
  t.processes.push_back(p);
  std::vector<std::string> notes;
  ClipToSteps(20, 24, &t, &notes);
  ASSERT_EQ(t.processes.size(), 1u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "pid 7 (train): 1 of the 5 steps (the others came after the window ended, or never)");
}

// Issue 36: a 5-step capture said "device events of 18 of its 3,480 executions", the whole
// process's count, when its steps' executions all had device time.
TEST(StepWindowTest, ExecutionsHeldByTheProgramAreCountedInTheStepsOnly) {
  auto process = [] {
    ProcessTrace p;
    p.pid = 7;
    p.device_events_with_program = true;
    // Steps 1 to 6, one execution each; those of steps 1, 2 and 6 have no device events yet.
    for (uint64_t k = 1; k <= 6; ++k) {
      const uint64_t start = k * 100;
      p.ranges.push_back(Range(k, "ProfilerStep#" + std::to_string(k), start, 100));
      ApiCall c = Call(k, start + 20, k);
      c.function = nrtprof::API_NRT_EXECUTE;
      p.calls.push_back(c);
      if (k >= 3 && k <= 5) p.device.push_back(Exec(k, k, start + 30));
    }
    NoteExecutionsHeldByProgram(&p);
    return p;
  };
  ASSERT_EQ(process().executions_held_by_program, 3u);
  ASSERT_EQ(process().notices.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(process().notices[0], "device events of 3 of its 6 executions"));

  Trace steps;
  steps.processes.push_back(process());
  std::vector<std::string> notes;
  ClipToSteps(3, 5, &steps, &notes);
  ASSERT_EQ(steps.processes.size(), 1u);
  EXPECT_EQ(steps.processes[0].executions_held_by_program, 0u);
  EXPECT_TRUE(steps.processes[0].notices.empty())
      << "every execution of steps 3 to 5 has its device events: "
      << steps.processes[0].notices[0];

  Trace overlap;
  overlap.processes.push_back(process());
  ClipToSteps(5, 6, &overlap, &notes);
  ASSERT_EQ(overlap.processes.size(), 1u);
  EXPECT_EQ(overlap.processes[0].executions_held_by_program, 1u);
  ASSERT_EQ(overlap.processes[0].notices.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(overlap.processes[0].notices[0],
                               "device events of 1 of its 2 executions"))
      << overlap.processes[0].notices[0];
}

}  // namespace
}  // namespace nrtprof::daemon
