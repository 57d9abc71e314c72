#include "daemon/top.h"

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

DeviceEvent Device(uint64_t id, DeviceEventKind kind, const std::string& model, uint64_t ns,
                   uint64_t parent = 0) {
  DeviceEvent e;
  e.id = id;
  e.kind = kind;
  e.name = kind == DeviceEventKind::kDma ? Name("dma_h2d") : Name("nc_exec_running");
  e.model_name = Name::Lasting(model);
  e.duration_ns = ns;
  e.parent = parent;
  return e;
}

// Device time by process (executions and transfers, an op inside an execution not twice), by
// model (its executions), and by op, most first.
TEST(TopTest, DeviceTimeByProcessModelAndOp) {
  Trace trace;
  ProcessTrace busy;
  busy.pid = 7;
  busy.executable = "train";
  busy.device = {Device(1, DeviceEventKind::kExecution, "attention", 200),
                 Device(2, DeviceEventKind::kEngineOp, "attention", 150, /*parent=*/1),
                 Device(3, DeviceEventKind::kExecution, "mlp", 50),
                 Device(4, DeviceEventKind::kExecution, "attention", 100),
                 Device(5, DeviceEventKind::kDma, "", 10)};
  busy.calls.resize(4);
  for (ApiCall& c : busy.calls) c.name = "nrt_execute";
  busy.executions_held_by_program = 3;
  busy.executions_held_lost = true;
  ProcessTrace idle;
  idle.pid = 8;
  idle.executable = "eval";
  idle.device = {Device(6, DeviceEventKind::kExecution, "", 5)};
  trace.processes = {idle, busy};

  const nrtprof::TopReply top = ComputeTop(trace, 5'000'000'000);
  EXPECT_EQ(top.window_ns(), 5'000'000'000u);
  ASSERT_EQ(top.processes_size(), 2);
  EXPECT_EQ(top.processes(0).name(), "train");
  EXPECT_FALSE(top.processes(0).has_rank());
  EXPECT_EQ(top.processes(0).device_ns(), 360u);
  EXPECT_EQ(top.processes(0).calls(), 4u);
  EXPECT_EQ(top.processes(0).executions_held_by_program(), 3u);
  EXPECT_TRUE(top.processes(0).executions_held_lost());
  EXPECT_FALSE(top.processes(1).executions_held_lost());
  EXPECT_EQ(top.processes(1).name(), "eval");
  ASSERT_EQ(top.models_size(), 3);
  EXPECT_EQ(top.models(0).name(), "attention");
  EXPECT_EQ(top.models(0).calls(), 2u);
  EXPECT_EQ(top.models(0).device_ns(), 300u);
  EXPECT_EQ(top.models(1).name(), "mlp");
  EXPECT_EQ(top.models(2).name(), "unknown");
  EXPECT_EQ(top.models(2).pid(), 8u);
  ASSERT_GE(top.ops_size(), 1);
  EXPECT_EQ(top.ops(0).name(), "nrt_execute");
  EXPECT_EQ(top.ops(0).calls(), 4u);
  EXPECT_EQ(top.events(), 10u);
}

// A program that polls for completion: the polls nobody recorded (they saw nothing new) are
// its calls too, as the summary's table counts them.
TEST(TopTest, ProcessCallsCountThePollsNotRecorded) {
  Trace trace;
  ProcessTrace p;
  p.pid = 9;
  p.executable = "async_train";
  p.calls.resize(3);
  p.calls[0].name = "nrta_execute_schedule";
  p.calls[0].function = nrtprof::API_NRTA_EXECUTE_SCHEDULE;
  p.calls[1].name = "nrta_is_completed";
  p.calls[1].function = nrtprof::API_NRTA_IS_COMPLETED;
  p.calls[1].polls = 41;  // the 42nd poll saw it complete
  p.calls[2] = p.calls[0];
  PollTally tail;
  tail.name = "nrta_is_completed";
  tail.function = nrtprof::API_NRTA_IS_COMPLETED;
  tail.polls = 100;  // after the last recorded one, counted at the thread's end
  p.poll_tallies = {tail};
  trace.processes = {p};

  const nrtprof::TopReply top = ComputeTop(trace, 1'000'000'000);
  ASSERT_EQ(top.processes_size(), 1);
  EXPECT_EQ(top.processes(0).calls(), 3u + 41u + 100u);
  EXPECT_FALSE(top.processes(0).has_rank()) << "it said no rank";
  EXPECT_EQ(top.events(), 3u);  // what was recorded
  bool found = false;
  for (const nrtprof::TopRow& op : top.ops()) {
    if (op.name() != "nrta_is_completed") continue;
    found = true;
    EXPECT_EQ(op.calls(), 1u + 41u + 100u);
  }
  EXPECT_TRUE(found);
}

// The ranks of a job on one host run one program: each process says its rank (RANK, as torchrun
// gives it, before a --rank on its command line) and the job it named (NRTPROF_JOB or
// NEURON_RT_ROOT_COMM_ID; none from a command line).
TEST(TopTest, ProcessesSayTheirRankAndJob) {
  Trace trace;
  ProcessTrace from_env;
  from_env.pid = 11;
  from_env.executable = "python3";
  from_env.rank = 3;
  from_env.job = "10.0.0.1:62182";
  from_env.command_line = {"python3", "train.py"};
  ProcessTrace from_argv;
  from_argv.pid = 12;
  from_argv.executable = "cc_job";
  from_argv.command_line = {"cc_job", "--rank", "1", "--ranks", "4"};
  trace.processes = {from_env, from_argv};
  const nrtprof::TopReply top = ComputeTop(trace, 1'000'000'000);
  ASSERT_EQ(top.processes_size(), 2);
  for (const nrtprof::TopRow& p : top.processes()) {
    ASSERT_TRUE(p.has_rank()) << p.name();
    EXPECT_EQ(p.rank(), p.pid() == 11 ? 3 : 1) << p.name();
    EXPECT_EQ(p.job(), p.pid() == 11 ? "10.0.0.1:62182" : "") << p.name();
  }
}

}  // namespace
}  // namespace nrtprof::daemon
