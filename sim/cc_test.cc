// Collectives between processes: each rank is a process running sim/testing/cc_rank.cc against
// libnrt.so.1 (fork + exec), joined through NEURON_RT_ROOT_COMM_ID on loopback. Results are
// checked by the ranks themselves (they print "status <op> <status> ok|wrong"); timing is
// checked from the device timestamps of their system traces, on the wall clock through each
// rank's timestamp_sync.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bf16.h"
#include "cc_comm.h"
#include "cost_model.h"
#include "device_config.h"
#include "gtest/gtest.h"
#include "runtime.h"

namespace nrtsim {
namespace {

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out, err;
  int exit_status = -1;
  std::vector<std::string> Lines(const std::string& prefix) const {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix + " ", 0) == 0) lines.push_back(line.substr(prefix.size() + 1));
    }
    return lines;
  }
};

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

Rank Spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  int out[2], err[2];
  EXPECT_EQ(pipe(out), 0);
  EXPECT_EQ(pipe(err), 0);
  Rank r;
  r.pid = fork();
  if (r.pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(err[0]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    static const std::string helper = "sim/cc_rank";
    argv.push_back(const_cast<char*>(helper.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(helper.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  r.out_fd = out[0];
  r.err_fd = err[0];
  return r;
}

// Reads every rank's output to its end and reaps it; kills what is left after `timeout_s`.
void Collect(std::vector<Rank>* ranks, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::string*> sinks;
    for (Rank& r : *ranks) {
      if (r.out_fd >= 0) {
        fds.push_back({r.out_fd, POLLIN, 0});
        sinks.push_back(&r.out);
      }
      if (r.err_fd >= 0) {
        fds.push_back({r.err_fd, POLLIN, 0});
        sinks.push_back(&r.err);
      }
    }
    if (fds.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "ranks still running after " << timeout_s << " s: killed";
      for (Rank& r : *ranks) kill(r.pid, SIGKILL);
      for (pollfd& p : fds) close(p.fd);
      for (Rank& r : *ranks) r.out_fd = r.err_fd = -1;
      break;
    }
    poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
        continue;
      }
      close(fds[i].fd);
      for (Rank& r : *ranks) {
        if (r.out_fd == fds[i].fd) r.out_fd = -1;
        if (r.err_fd == fds[i].fd) r.err_fd = -1;
      }
    }
  }
  for (Rank& r : *ranks) {
    int status = 0;
    waitpid(r.pid, &status, 0);
    r.exit_status = status;
  }
}

struct Job {
  uint32_t size = 4;
  std::string ops = "all";
  uint32_t elems = 1024;
  int timeout_s = 60;
  std::map<std::string, std::string> env;                  // every rank's
  std::map<uint32_t, std::vector<std::string>> rank_args;  // some ranks' extra flags
  std::map<uint32_t, std::map<std::string, std::string>> rank_env;
};

std::vector<Rank> RunJob(const Job& job) {
  const std::string root = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<Rank> ranks;
  for (uint32_t r = 0; r < job.size; ++r) {
    std::map<std::string, std::string> env = {
        {"NEURON_RT_ROOT_COMM_ID", root},
        {"NEURON_RT_VISIBLE_CORES", std::to_string(r)},
        {"NRT_SIM_NUM_CORES", std::to_string(std::max<uint32_t>(job.size, 2))},
        {"NRT_SIM_TIME_SCALE", "0"},
        {"NRT_SIM_CC_TIMEOUT_MS", "20000"},
    };
    for (const auto& [k, v] : job.env) env[k] = v;
    if (job.rank_env.count(r)) {
      for (const auto& [k, v] : job.rank_env.at(r)) env[k] = v;
    }
    std::vector<std::string> args = {"--rank=" + std::to_string(r),
                                     "--size=" + std::to_string(job.size), "--ops=" + job.ops,
                                     "--elems=" + std::to_string(job.elems)};
    if (job.rank_args.count(r)) {
      for (const std::string& a : job.rank_args.at(r)) args.push_back(a);
    }
    ranks.push_back(Spawn(args, env));
  }
  Collect(&ranks, job.timeout_s);
  return ranks;
}

void ExpectAllRight(const std::vector<Rank>& ranks, size_t collectives) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& rank = ranks[r];
    EXPECT_TRUE(WIFEXITED(rank.exit_status) && WEXITSTATUS(rank.exit_status) == 0)
        << "rank " << r << " status " << rank.exit_status << "\n" << rank.out << rank.err;
    const std::vector<std::string> status = rank.Lines("status");
    EXPECT_EQ(status.size(), collectives) << "rank " << r << "\n" << rank.out;
    for (const std::string& s : status) {
      EXPECT_NE(s.find(" NRT_SUCCESS ok"), std::string::npos) << "rank " << r << ": " << s;
    }
    EXPECT_TRUE(rank.Lines("shape_error").empty()) << rank.out;
  }
}

// One rank's collective events on the wall clock: type -> phase -> times (ns), in order.
struct Spans {
  std::map<std::string, std::vector<double>> start, stop;
  std::vector<double> worker_gids;
};

Spans SpansOf(const Rank& rank) {
  Spans spans;
  double nc = 0, cpu = 0;
  const std::vector<std::string> sync = rank.Lines("sync");
  if (!sync.empty()) std::istringstream(sync[0]) >> nc >> cpu;
  for (const std::string& line : rank.Lines("event")) {
    std::istringstream in(line);
    std::string type, phase;
    double ts = 0, nc_idx = 0, gid = 0, seq = 0, op_id = 0;
    in >> type >> phase >> ts >> nc_idx >> gid >> seq >> op_id;
    (phase == "start" ? spans.start : spans.stop)[type].push_back(ts - nc + cpu);
    spans.worker_gids.push_back(gid);
  }
  return spans;
}

// 14 collectives: all-reduce and reduce-scatter with ADD, MAX and MIN, all-gather, on float32
// and bfloat16, over the three queues; every rank checks its output.
TEST(CcTest, FourRanksOnOneHostComputeEveryCollective) {
  Job job;
  const std::vector<Rank> ranks = RunJob(job);
  ExpectAllRight(ranks, 14);
  for (size_t r = 0; r < ranks.size(); ++r) {
    // Each collective: a barrier span and a running span, on the rank's global core.
    const Spans spans = SpansOf(ranks[r]);
    EXPECT_EQ(spans.start.at("cc_running").size(), 14u);
    EXPECT_EQ(spans.start.at("cc_exec_barrier").size(), 14u);
    for (double gid : spans.worker_gids) EXPECT_EQ(gid, static_cast<double>(r));
  }
}

// Two simulated hosts (NRT_SIM_HOST_ID) exchange over TCP; the collective costs EFA time.
TEST(CcTest, TwoHostsOverTcp) {
  Job job;
  job.ops = "allreduce";
  job.elems = 65536;
  for (uint32_t r = 0; r < 4; ++r) job.rank_env[r]["NRT_SIM_HOST_ID"] = r < 2 ? "a" : "b";
  const std::vector<Rank> ranks = RunJob(job);
  ExpectAllRight(ranks, 1);
  const uint64_t want = CollectiveNs(1, 65536 * 4, 65536 * 4, 4, 4, true, DeviceConfig());
  // setup + 6 steps x 15 us + 2*3/4 * 256 KiB at 6.25 B/ns
  EXPECT_GT(want, 10000 + 6 * 15000 + 60000u);
  for (const Rank& rank : ranks) {
    const Spans spans = SpansOf(rank);
    ASSERT_EQ(spans.start.at("cc_running").size(), 1u) << rank.out;
    EXPECT_NEAR(spans.stop.at("cc_running")[0] - spans.start.at("cc_running")[0],
                static_cast<double>(want), 1000.0);
  }
}

// TCP forced between ranks of one host: every collective right through the root.
TEST(CcTest, ForcedTcpOnOneHost) {
  Job job;
  job.env["NRT_SIM_CC_TRANSPORT"] = "tcp";
  ExpectAllRight(RunJob(job), 14);
}

// A rank 300 ms late: the others wait for it on the device (their barrier spans cover the
// wait), and every rank's collective starts at the same moment.
TEST(CcTest, ALateRankDelaysTheOthers) {
  Job job;
  job.ops = "allreduce";
  job.rank_args[3] = {"--delay_ms=300"};
  const std::vector<Rank> ranks = RunJob(job);
  ExpectAllRight(ranks, 1);
  std::vector<Spans> spans;
  for (const Rank& r : ranks) spans.push_back(SpansOf(r));
  const double start = spans[3].start.at("cc_running")[0];
  for (size_t r = 0; r < 4; ++r) {
    const double barrier = spans[r].stop.at("cc_exec_barrier")[0] -
                           spans[r].start.at("cc_exec_barrier")[0];
    if (r < 3) {
      EXPECT_GT(barrier, 250e6) << "rank " << r;
    } else {
      EXPECT_LT(barrier, 50e6);
    }
    EXPECT_EQ(spans[r].stop.at("cc_exec_barrier")[0], spans[r].start.at("cc_running")[0]);
    // Clocks of different processes, read through their sync points: within 2 ms.
    EXPECT_NEAR(spans[r].start.at("cc_running")[0], start, 2e6) << "rank " << r;
  }
}

// A model holding collectives (all_reduce ADD on float32 between two ops, MAX on bfloat16),
// loaded with nrt_load_collectives on 4 ranks, rank 3 late: each execution (nrt_execute, then
// nrta_execute_schedule) gives every rank the reduction of all ranks' inputs; the collectives'
// barrier and running spans lie inside the rank's device_exec, the early ranks' barriers cover
// the late rank's delay. Before joining, plain nrt_load of it and an execution are refused.
TEST(CcTest, ModelAllReduceAcrossFourRanks) {
  Job job;
  job.ops = "model";
  job.elems = 4096;
  job.rank_args[3] = {"--delay_ms=300"};
  const std::vector<Rank> ranks = RunJob(job);
  ExpectAllRight(ranks, 2);
  std::vector<Spans> spans;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& rank = ranks[r];
    EXPECT_EQ(rank.Lines("check"),
              (std::vector<std::string>{"plain_load NRT_INVALID",
                                        "execute_before_join NRT_FAILURE"}))
        << rank.out;
    EXPECT_NE(rank.err.find("nrt: nrt_load: model cc_step has a collective (op 1, all_reduce): "
                            "load it with nrt_load_collectives"),
              std::string::npos)
        << rank.err;
    EXPECT_NE(rank.err.find("nrt: nrt_execute: model cc_step has a collective (op 1, "
                            "all_reduce) and this process has joined no collectives group"),
              std::string::npos)
        << rank.err;
    spans.push_back(SpansOf(rank));
    const Spans& sp = spans.back();
    // Two executions, two collectives in each.
    ASSERT_EQ(sp.start.at("device_exec").size(), 2u) << rank.out;
    ASSERT_EQ(sp.stop.at("device_exec").size(), 2u) << rank.out;
    ASSERT_EQ(sp.start.at("cc_exec_barrier").size(), 4u) << rank.out;
    ASSERT_EQ(sp.start.at("cc_running").size(), 4u) << rank.out;
    for (size_t c = 0; c < 4; ++c) {
      const double exec_start = sp.start.at("device_exec")[c / 2];
      const double exec_stop = sp.stop.at("device_exec")[c / 2];
      EXPECT_GT(sp.start.at("cc_exec_barrier")[c], exec_start) << "rank " << r << " cc " << c;
      EXPECT_EQ(sp.stop.at("cc_exec_barrier")[c], sp.start.at("cc_running")[c]);
      EXPECT_LT(sp.stop.at("cc_running")[c], exec_stop) << "rank " << r << " cc " << c;
    }
    for (double gid : sp.worker_gids) EXPECT_EQ(gid, static_cast<double>(r));
  }
  // The late rank's first collective: the others waited for it inside their first execution.
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_GT(spans[r].stop.at("cc_exec_barrier")[0] - spans[r].start.at("cc_exec_barrier")[0],
              250e6)
        << "rank " << r;
    EXPECT_NEAR(spans[r].start.at("cc_running")[0], spans[3].start.at("cc_running")[0], 2e6);
  }
  EXPECT_LT(spans[3].stop.at("cc_exec_barrier")[0] - spans[3].start.at("cc_exec_barrier")[0],
            50e6);
}

void ExpectTheOthersFail(const std::vector<Rank>& ranks, uint32_t dead) {
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    if (r == dead) continue;
    const std::vector<std::string> status = ranks[r].Lines("status");
    ASSERT_EQ(status.size(), 1u) << ranks[r].out << ranks[r].err;
    EXPECT_EQ(status[0].find("NRT_SUCCESS"), std::string::npos) << status[0];
    EXPECT_NE(ranks[r].err.find("nrt: nrta_cc_schedule: all_reduce number 1 on queue 0"),
              std::string::npos)
        << ranks[r].err;
  }
}

// A rank killed after joining: the others' collective completes with an error status within
// the timeout (1 s here), on shared memory and over TCP.
TEST(CcTest, AKilledRankFailsTheOthersWithinTheTimeout) {
  for (const char* transport : {"auto", "tcp"}) {
    Job job;
    job.ops = "allreduce";
    job.timeout_s = 30;
    job.env["NRT_SIM_CC_TIMEOUT_MS"] = "1000";
    job.env["NRT_SIM_CC_TRANSPORT"] = transport;
    job.rank_args[2] = {"--die=1"};
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Rank> ranks = RunJob(job);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 15.0) << transport;
    EXPECT_TRUE(WIFSIGNALED(ranks[2].exit_status));
    ExpectTheOthersFail(ranks, 2);
  }
}

// nrt_close while a collective waits for a rank that never schedules it: the close returns at
// once (not after the 30 s timeout) and the request completes with an error.
TEST(CcTest, CloseMidCollectiveDoesNotHang) {
  Job job;
  job.size = 2;
  job.ops = "allreduce";
  job.env["NRT_SIM_CC_TIMEOUT_MS"] = "30000";
  job.rank_args[0] = {"--close_after_ms=200"};
  job.rank_args[1] = {"--no_schedule_ms=1500"};
  const std::vector<Rank> ranks = RunJob(job);
  const std::vector<std::string> close_ms = ranks[0].Lines("close_ms");
  ASSERT_EQ(close_ms.size(), 1u) << ranks[0].out << ranks[0].err;
  EXPECT_LT(std::stoi(close_ms[0]), 1000);
  const std::vector<std::string> status = ranks[0].Lines("status");
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].find("NRT_SUCCESS"), std::string::npos) << status[0];
  for (const Rank& r : ranks) EXPECT_TRUE(WIFEXITED(r.exit_status) && WEXITSTATUS(r.exit_status) == 0);
}

// Connections to the root that are not ranks of the job are refused with one line each; the
// job forms all the same.
TEST(CcTest, AForeignPeerIsRefused) {
  const int port = FreePort();
  const std::map<std::string, std::string> env = {
      {"NEURON_RT_ROOT_COMM_ID", "127.0.0.1:" + std::to_string(port)},
      {"NRT_SIM_TIME_SCALE", "0"},
      {"NRT_SIM_CC_TIMEOUT_MS", "20000"},
  };
  std::vector<Rank> ranks;
  auto env0 = env;
  env0["NEURON_RT_VISIBLE_CORES"] = "0";
  ranks.push_back(Spawn({"--rank=0", "--size=2", "--ops=allgather", "--elems=16"}, env0));
  // Wait for the root to listen, then: garbage; a would-be rank 7 of 2; a silent peer.
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const auto connect_root = [&] {
    for (int i = 0; i < 500; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
      close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  };
  int garbage = connect_root();
  ASSERT_GE(garbage, 0);
  std::string junk(104, 'x');
  ASSERT_EQ(write(garbage, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  int wrong_rank = connect_root();
  ASSERT_GE(wrong_rank, 0);
  struct {
    char magic[8];
    uint32_t version, size, rank, conn, uid, force_tcp;
    char host[64];
  } hello{};
  memcpy(hello.magic, "NRTSIMCH", 8);
  hello.version = 2;
  hello.size = 2;
  hello.rank = 7;
  hello.uid = static_cast<uint32_t>(geteuid());
  ASSERT_EQ(write(wrong_rank, &hello, sizeof(hello)), static_cast<ssize_t>(sizeof(hello)));
  auto env1 = env;
  env1["NEURON_RT_VISIBLE_CORES"] = "1";
  env1["NRT_SIM_NUM_CORES"] = "2";
  ranks.push_back(Spawn({"--rank=1", "--size=2", "--ops=allgather", "--elems=16"}, env1));
  Collect(&ranks, 60);
  close(garbage);
  close(wrong_rank);
  ExpectAllRight(ranks, 1);
  EXPECT_NE(ranks[0].err.find("nrt: nrt_cc_global_comm_init: refused a connection from 127.0.0.1:"),
            std::string::npos)
      << ranks[0].err;
  EXPECT_NE(ranks[0].err.find("not a rank of the simulated runtime (bad handshake)"),
            std::string::npos)
      << ranks[0].err;
  EXPECT_NE(ranks[0].err.find("rank 7 connection 0 is out of range"), std::string::npos)
      << ranks[0].err;
}

TEST(CcTest, SixteenRanksOnOneHost) {
  Job job;
  job.size = 16;
  job.ops = "allreduce";
  ExpectAllRight(RunJob(job), 1);
}

TEST(CcTest, SixtyFourRanksOnOneHost) {
  Job job;
  job.size = 64;
  job.ops = "reducescatter";
  job.elems = 4096;
  job.timeout_s = 120;
  job.env["NRT_SIM_NUM_CORES"] = "128";
  ExpectAllRight(RunJob(job), 1);
}


// bf16 reductions accumulate in float32 in rank order and round once: 1 + 3 x 2^-9 is 1 in
// bf16 when each partial sum is rounded, 1.0078125 when only the total is.
TEST(CcComputeTest, Bf16AccumulatesInFloat32AndRoundsOnce) {
  CcOp op;
  op.cc_op = 1;
  op.reduce = 0;
  op.dtype = 0x6;
  op.in_bytes = op.out_bytes = 2;
  const float values[4] = {1.0f, 0.001953125f, 0.001953125f, 0.001953125f};
  std::vector<uint16_t> in(4);
  std::vector<const uint8_t*> ptrs;
  for (int r = 0; r < 4; ++r) {
    in[r] = FloatToBf16(values[r]);
    ptrs.push_back(reinterpret_cast<const uint8_t*>(&in[r]));
  }
  uint16_t out = 0;
  CcCompute(op, 4, ptrs, 0, 2, 0, reinterpret_cast<uint8_t*>(&out));
  EXPECT_EQ(Bf16ToFloat(out), 1.0078125f);
  // Reduce-scatter: rank 1 of 2 gets the reduction of the second half.
  op.cc_op = 2;
  op.reduce = 2;  // max
  op.dtype = 0xA;
  op.in_bytes = 16;
  op.out_bytes = 8;
  const float a[4] = {1, 2, 3, 4}, b[4] = {4, 3, 2, 5};
  float got[2] = {0, 0};
  CcCompute(op, 2, {reinterpret_cast<const uint8_t*>(a), reinterpret_cast<const uint8_t*>(b)},
            0, 16, 1, reinterpret_cast<uint8_t*>(got));
  EXPECT_EQ(got[0], 3.0f);
  EXPECT_EQ(got[1], 5.0f);
}

// A group of one, in this process: the arguments nrta_cc_prepare and nrta_cc_schedule check.
TEST(CcApiTest, PrepareAndScheduleCheckTheirArguments) {
  ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "0", 1), 0);
  Runtime& rt = Runtime::Get();
  ASSERT_EQ(rt.Init(NRT_FRAMEWORK_TYPE_NO_FW), NRT_SUCCESS);
  nrt_tensor_t *in = nullptr, *out = nullptr, *big = nullptr;
  ASSERT_EQ(rt.AllocateTensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "in", &in), NRT_SUCCESS);
  ASSERT_EQ(rt.AllocateTensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &out), NRT_SUCCESS);
  ASSERT_EQ(rt.AllocateTensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 32, "big", &big), NRT_SUCCESS);
  nrt_tensor_list_t ins{&in, 1}, outs{&out, 1}, bigs{&big, 1};
  nrt_cc_comm_t comm{};
  comm.rank_n = 1;
  nrt_cc_context_t* ctx = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(rt.CcPrepare(&comm, &ins, &outs, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE,
                         &ctx),
            NRT_INVALID);  // no communicator yet
  EXPECT_EQ(rt.CommInit(0, 1, 1), NRT_INVALID);
  ASSERT_EQ(rt.CommInit(0, 0, 1), NRT_SUCCESS);
  EXPECT_EQ(rt.CommInit(0, 0, 1), NRT_FAILURE);  // one per process
  EXPECT_EQ(rt.CcPrepare(&comm, &ins, &outs, NRT_DTYPE_INT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, &ctx),
            NRT_INVALID);
  EXPECT_EQ(rt.CcPrepare(&comm, &ins, &outs, NRT_DTYPE_FLOAT32, NRT_OP_FMA, NRT_CC_ALLREDUCE,
                         &ctx),
            NRT_INVALID);
  EXPECT_EQ(rt.CcPrepare(&comm, &ins, &bigs, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE,
                         &ctx),
            NRT_INVALID);  // output size
  uint32_t other_group[1] = {3};
  comm.replica_group = other_group;
  EXPECT_EQ(rt.CcPrepare(&comm, &ins, &outs, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE,
                         &ctx),
            NRT_FAILURE);
  comm.replica_group = nullptr;
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 7) << err;
  const float values[4] = {1, -2, 3.5f, 4};
  ASSERT_EQ(rt.WriteTensor(in, values, 0, 16), NRT_SUCCESS);
  ASSERT_EQ(rt.CcPrepare(&comm, &ins, &outs, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE,
                         &ctx),
            NRT_SUCCESS);
  nrt_cc_context_t* kept = ctx;
  NRT_STATUS ret = NRT_FAILURE;
  uint64_t seq = 0;
  ASSERT_EQ(rt.CcSchedule(&ctx, 2, &ret, &seq), NRT_SUCCESS);
  EXPECT_EQ(ctx, nullptr);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(rt.CcSchedule(&kept, 0, &ret, &seq), NRT_INVALID_HANDLE);  // scheduled once
  ::testing::internal::GetCapturedStderr();
  for (bool done = false; !done;) ASSERT_EQ(rt.IsCompleted(seq, &done), NRT_SUCCESS);
  EXPECT_EQ(__atomic_load_n(&ret, __ATOMIC_RELAXED), NRT_SUCCESS);
  float got[4] = {0, 0, 0, 0};
  ASSERT_EQ(rt.ReadTensor(out, got, 0, 16), NRT_SUCCESS);
  EXPECT_EQ(memcmp(got, values, 16), 0);
  rt.Close();
}

}  // namespace
}  // namespace nrtsim
