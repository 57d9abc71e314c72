// The explicit asynchronous API (nrt/nrt_async.h) as a program sees it through libnrt.so.1:
// results as nrt_execute's, sequence ids, completion (polling, nrta_get_sequence, eventfds),
// queue depth, the device's lanes overlapping, the system trace's nrta_seq_id, nrt_close with
// requests in flight, and the error statuses. NRT_SIM_TIME_SCALE=0 (BUILD) except where a test
// sets its own: 1 to see lanes overlap on the device clock, 1000 to hold requests in flight
// (nrt_close completes them at once). Also run under --config=tsan.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/testing/runtime_testing.h"

namespace {

using nrtsim::testing::DeviceFloats;
using nrtsim::testing::Fetch;
using nrtsim::testing::FetchedTrace;
using nrtsim::testing::Load;
using nrtsim::testing::Num;
using nrtsim::testing::RealShapeError;
using nrtsim::testing::ReadFloats;
using nrtsim::testing::Set;
using nrtsim::testing::Str;

constexpr int kN = 64;
const char kModel[] =
    "model axpy\ninput a fp32 [64]\ninput b fp32 [64]\noutput out fp32 [64]\n"
    "t = mul_scalar(a, 2)\nout = add(t, b)\n";

// XU ids as the simulator numbers queues: (lnc << 8) | (xu << 4) | queue.
constexpr uint64_t XuId(uint32_t lnc, nrta_xu_t xu, int queue) {
  return (static_cast<uint64_t>(lnc) << 8) | (static_cast<uint64_t>(xu) << 4) |
         static_cast<uint64_t>(queue);
}

// A status the runtime never writes, to see whether `ret` was written.
constexpr NRT_STATUS kUnwritten = static_cast<NRT_STATUS>(-12345);

NRT_STATUS Peek(const NRT_STATUS* ret) { return __atomic_load_n(ret, __ATOMIC_RELAXED); }

// Polls until `seq` completes (as a program's polling loop does); false after 30 s.
bool WaitFor(nrta_seq_t seq) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool done = false;
  while (std::chrono::steady_clock::now() < give_up) {
    if (nrta_is_completed(seq, &done) != NRT_SUCCESS) return false;
    if (done) return true;
    std::this_thread::yield();
  }
  return false;
}

// Waits up to 30 s for the eventfd to be readable; returns its counter (0 if it never was).
uint64_t WaitEventfd(int efd) {
  pollfd p{efd, POLLIN, 0};
  if (poll(&p, 1, 30000) != 1) return 0;
  uint64_t value = 0;
  if (read(efd, &value, sizeof(value)) != sizeof(value)) return 0;
  return value;
}

// The eventfd's counter now, without waiting (0: not signalled).
uint64_t Drain(int efd) {
  uint64_t value = 0;
  return read(efd, &value, sizeof(value)) == sizeof(value) ? value : 0;
}

std::vector<float> Iota(float first) {
  std::vector<float> v(kN);
  for (int i = 0; i < kN; ++i) v[i] = first + static_cast<float>(i);
  return v;
}

class AsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
    model_ = Load(kModel, 0);
    a_ = DeviceFloats(0, Iota(1), "a");
    b_ = DeviceFloats(0, Iota(100), "b");
    out_ = DeviceFloats(0, std::vector<float>(kN, 0.0f), "out");
    in_ = Set({{"a", a_}, {"b", b_}});
    outs_ = Set({{"out", out_}});
  }
  void TearDown() override { nrt_close(); }

  // Executes once asynchronously into `out_`; returns the request's sequence id.
  nrta_seq_t Schedule(NRT_STATUS* ret = nullptr) {
    nrta_seq_t seq = 0;
    EXPECT_EQ(nrta_execute_schedule(model_, in_, outs_, 0, ret, &seq), NRT_SUCCESS);
    return seq;
  }

  void StartTrace() {
    ASSERT_EQ(nrt_sys_trace_start(nullptr), NRT_SUCCESS);
  }

  nrt_model_t* model_ = nullptr;
  nrt_tensor_t *a_ = nullptr, *b_ = nullptr, *out_ = nullptr;
  nrt_tensor_set_t *in_ = nullptr, *outs_ = nullptr;
};

// First, while the process has never called nrt_init.
TEST(AsyncLifecycle, BeforeInitAndAfterClose) {
  for (NRT_STATUS expected : {NRT_UNINITIALIZED, NRT_CLOSED}) {
    nrta_seq_t seq = 0;
    bool done = false;
    char buf[4];
    EXPECT_EQ(nrta_execute_schedule(nullptr, nullptr, nullptr, 0, nullptr, &seq), expected);
    EXPECT_EQ(nrta_tensor_write(nullptr, buf, 0, 4, 0, nullptr, &seq), expected);
    EXPECT_EQ(nrta_tensor_read(buf, nullptr, 0, 4, 0, nullptr, &seq), expected);
    EXPECT_EQ(nrta_tensor_copy(nullptr, 0, nullptr, 0, 4, 0, nullptr, &seq), expected);
    EXPECT_EQ(nrta_is_completed(1, &done), expected);
    EXPECT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &seq), expected);
    EXPECT_EQ(nrta_event_register_seq_id_completion(1, -1), expected);
    EXPECT_EQ(nrta_event_register_xu_completion(0, NRTA_XU_COMPUTE, 0, -1), expected);
    if (expected == NRT_UNINITIALIZED) {
      ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
      nrt_close();
    }
  }
}

TEST(AsyncLifecycle, QueueDepthFromTheEnvironment) {
  for (const char* bad : {"0", "4097", "many", "-1", ""}) {
    ASSERT_EQ(setenv("NRT_SIM_ASYNC_QUEUE_DEPTH", bad, 1), 0);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_INVALID) << bad;
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("NRT_SIM_ASYNC_QUEUE_DEPTH"), std::string::npos) << err;
  }
  ASSERT_EQ(setenv("NRT_SIM_ASYNC_QUEUE_DEPTH", "4096", 1), 0);
  EXPECT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  nrt_close();
  ASSERT_EQ(unsetenv("NRT_SIM_ASYNC_QUEUE_DEPTH"), 0);
}

TEST_F(AsyncTest, ResultsAreNrtExecutes) {
  nrt_tensor_t* sync_out = DeviceFloats(0, std::vector<float>(kN, 0.0f), "out");
  nrt_tensor_set_t* sync_outs = Set({{"out", sync_out}});
  NRT_STATUS ret = kUnwritten;
  const nrta_seq_t seq = Schedule(&ret);
  ASSERT_TRUE(WaitFor(seq));
  EXPECT_EQ(Peek(&ret), NRT_SUCCESS);
  ASSERT_EQ(nrt_execute(model_, in_, sync_outs), NRT_SUCCESS);
  const std::vector<float> async_result = ReadFloats(out_);
  EXPECT_EQ(async_result, ReadFloats(sync_out));
  for (int i = 0; i < kN; ++i) EXPECT_EQ(async_result[i], 2.0f * (1 + i) + (100 + i)) << i;
  nrt_destroy_tensor_set(&sync_outs);
  nrt_tensor_free(&sync_out);
}

TEST_F(AsyncTest, TensorRequestsMoveTheBytes) {
  const std::vector<float> values = Iota(7);
  std::vector<float> back(kN, 0.0f);
  nrta_seq_t w = 0, c = 0, r = 0;
  NRT_STATUS rw = kUnwritten, rc = kUnwritten, rr = kUnwritten;
  // One queue: they run in order, so the read sees the copy of the write.
  ASSERT_EQ(nrta_tensor_write(a_, values.data(), 0, kN * 4, 1, &rw, &w), NRT_SUCCESS);
  ASSERT_EQ(nrta_tensor_copy(a_, 0, out_, 0, kN * 4, 1, &rc, &c), NRT_SUCCESS);
  ASSERT_EQ(nrta_tensor_read(back.data(), out_, 0, kN * 4, 1, &rr, &r), NRT_SUCCESS);
  ASSERT_TRUE(WaitFor(r));
  bool done = false;
  EXPECT_EQ(nrta_is_completed(w, &done), NRT_SUCCESS);
  EXPECT_TRUE(done);  // before r, on r's queue
  EXPECT_EQ(nrta_is_completed(c, &done), NRT_SUCCESS);
  EXPECT_TRUE(done);
  EXPECT_EQ(Peek(&rw), NRT_SUCCESS);
  EXPECT_EQ(Peek(&rc), NRT_SUCCESS);
  EXPECT_EQ(Peek(&rr), NRT_SUCCESS);
  EXPECT_EQ(back, values);
  // Part of a tensor, and a host <-> device copy.
  nrt_tensor_t* host = nullptr;
  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, 0, kN * 4, "h", &host), NRT_SUCCESS);
  ASSERT_EQ(nrta_tensor_copy(out_, 8, host, 0, 16, 0, nullptr, &c), NRT_SUCCESS);
  ASSERT_TRUE(WaitFor(c));
  std::vector<float> four(4);
  ASSERT_EQ(nrt_tensor_read(host, four.data(), 0, 16), NRT_SUCCESS);
  EXPECT_EQ(four, std::vector<float>(values.begin() + 2, values.begin() + 6));
  nrt_tensor_free(&host);
}

TEST_F(AsyncTest, SequenceIdsCountPerQueueWithTheXuIdOnTop) {
  nrta_seq_t before = 1;
  ASSERT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &before), NRT_SUCCESS);
  EXPECT_EQ(before, XuId(0, NRTA_XU_COMPUTE, 0) << 48);  // nothing completed: number 0
  std::vector<nrta_seq_t> seqs;
  for (int i = 0; i < 5; ++i) seqs.push_back(Schedule());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(NRTA_SEQ_GET_XU_ID(seqs[i]), XuId(0, NRTA_XU_COMPUTE, 0));
    EXPECT_EQ(NRTA_SEQ_GET_SEQ_NUM(seqs[i]), static_cast<uint64_t>(i + 1));
    EXPECT_LT(before, seqs[i]);  // "nothing completed" is below every id handed out
  }
  // Another queue, another core: its own XU id, its own count.
  nrt_tensor_t* t = DeviceFloats(1, std::vector<float>(kN, 0.0f), "t");
  const std::vector<float> values = Iota(0);
  nrta_seq_t w = 0;
  ASSERT_EQ(nrta_tensor_write(t, values.data(), 0, kN * 4, 1, nullptr, &w), NRT_SUCCESS);
  EXPECT_EQ(NRTA_SEQ_GET_XU_ID(w), XuId(1, NRTA_XU_TENSOR_OP, 1));
  EXPECT_EQ(NRTA_SEQ_GET_SEQ_NUM(w), 1u);
  ASSERT_TRUE(WaitFor(w));
  nrta_seq_t last = 0;
  ASSERT_EQ(nrta_get_sequence(1, NRTA_XU_TENSOR_OP, 1, &last), NRT_SUCCESS);
  EXPECT_EQ(last, w);
  // The documented pattern: all done once the last completed reaches the last submitted.
  ASSERT_TRUE(WaitFor(seqs.back()));
  ASSERT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &last), NRT_SUCCESS);
  EXPECT_GE(last, seqs.back());
  EXPECT_EQ(last, seqs.back());
  // Queues with nothing scheduled, collectives' included, answer too.
  for (int q = 0; q < 3; ++q) {
    ASSERT_EQ(nrta_get_sequence(1, NRTA_XU_COLLECTIVES, q, &last), NRT_SUCCESS);
    EXPECT_EQ(last, XuId(1, NRTA_XU_COLLECTIVES, q) << 48);
  }
  nrt_tensor_free(&t);
}

TEST_F(AsyncTest, IsCompletedRefusesIdsNeverIssued) {
  const nrta_seq_t seq = Schedule();
  ASSERT_TRUE(WaitFor(seq));
  bool done = false;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrta_is_completed(seq + 1, &done), NRT_INVALID);  // the next, not issued yet
  EXPECT_EQ(nrta_is_completed(XuId(0, NRTA_XU_COMPUTE, 0) << 48, &done), NRT_INVALID);  // 0
  EXPECT_EQ(nrta_is_completed(XuId(0, NRTA_XU_TENSOR_OP, 0) << 48 | 1, &done), NRT_INVALID);
  EXPECT_EQ(nrta_is_completed(XuId(2, NRTA_XU_COMPUTE, 0) << 48 | 1, &done), NRT_INVALID);
  EXPECT_EQ(nrta_is_completed(XuId(0, NRTA_XU_COMPUTE, 1) << 48 | 1, &done), NRT_INVALID);
  EXPECT_EQ(nrta_is_completed(0x7f00ull << 48 | 1, &done), NRT_INVALID);
  EXPECT_EQ(nrta_is_completed(seq, nullptr), NRT_INVALID);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 7) << err;  // one line each
  EXPECT_EQ(nrta_is_completed(seq, &done), NRT_SUCCESS);
  EXPECT_TRUE(done);
}

TEST_F(AsyncTest, EventfdPerSequenceId) {
  const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  const nrta_seq_t seq = Schedule();
  ASSERT_EQ(nrta_event_register_seq_id_completion(seq, efd), NRT_SUCCESS);
  EXPECT_EQ(WaitEventfd(efd), 1u);
  bool done = false;
  ASSERT_EQ(nrta_is_completed(seq, &done), NRT_SUCCESS);
  EXPECT_TRUE(done);
  // Registered after it completed: signalled at once, no wakeup lost.
  ASSERT_EQ(nrta_event_register_seq_id_completion(seq, efd), NRT_SUCCESS);
  EXPECT_EQ(Drain(efd), 1u);
  // Never issued.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrta_event_register_seq_id_completion(seq + 1, efd), NRT_INVALID);
  EXPECT_EQ(nrta_event_register_seq_id_completion(seq, -2), NRT_INVALID);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Drain(efd), 0u);
  close(efd);
}

TEST_F(AsyncTest, EventfdPerExecutionUnitQueue) {
  const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  ASSERT_EQ(nrta_event_register_xu_completion(0, NRTA_XU_COMPUTE, 0, efd), NRT_SUCCESS);
  nrta_seq_t last = 0;
  for (int i = 0; i < 3; ++i) last = Schedule();
  ASSERT_TRUE(WaitFor(last));
  // Another queue's completions are not this one's.
  const std::vector<float> values = Iota(0);
  nrta_seq_t w = 0;
  ASSERT_EQ(nrta_tensor_write(a_, values.data(), 0, kN * 4, 0, nullptr, &w), NRT_SUCCESS);
  ASSERT_TRUE(WaitFor(w));
  EXPECT_EQ(Drain(efd), 3u);  // once per completion
  ASSERT_EQ(nrta_event_register_xu_completion(0, NRTA_XU_COMPUTE, 0, -1), NRT_SUCCESS);
  ASSERT_TRUE(WaitFor(Schedule()));
  EXPECT_EQ(Drain(efd), 0u);  // deregistered
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrta_event_register_xu_completion(0, NRTA_XU_COMPUTE, 1, efd), NRT_INVALID);
  EXPECT_EQ(nrta_event_register_xu_completion(2, NRTA_XU_COMPUTE, 0, efd), NRT_INVALID);
  EXPECT_EQ(nrta_event_register_xu_completion(0, NRTA_XU_TYPE_NUM, 0, efd), NRT_INVALID);
  ::testing::internal::GetCapturedStderr();
  close(efd);
}

// Two threads on one queue: every id once, numbers 1..2n, each thread's in its own order, and
// each thread's bytes where it put them.
TEST_F(AsyncTest, TwoThreadsScheduleOnOneQueue) {
  constexpr int kEach = 100;
  nrt_tensor_t* mine[2] = {DeviceFloats(0, std::vector<float>(kN, 0.0f), "t0"),
                           DeviceFloats(0, std::vector<float>(kN, 0.0f), "t1")};
  std::vector<nrta_seq_t> seqs[2];
  std::vector<std::vector<float>> values[2];
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < kEach; ++i) values[t].push_back(Iota(static_cast<float>(t * 1000 + i)));
  }
  auto run = [&](int t) {
    for (int i = 0; i < kEach; ++i) {
      nrta_seq_t seq = 0;
      NRT_STATUS s;
      while ((s = nrta_tensor_write(mine[t], values[t][i].data(), 0, kN * 4, 0, nullptr,
                                    &seq)) == NRT_QUEUE_FULL) {
        std::this_thread::yield();
      }
      ASSERT_EQ(s, NRT_SUCCESS);
      seqs[t].push_back(seq);
    }
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  std::set<nrta_seq_t> all;
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(seqs[t].size(), static_cast<size_t>(kEach));
    EXPECT_TRUE(std::is_sorted(seqs[t].begin(), seqs[t].end()));
    all.insert(seqs[t].begin(), seqs[t].end());
    ASSERT_TRUE(WaitFor(seqs[t].back()));
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(2 * kEach));
  EXPECT_EQ(NRTA_SEQ_GET_SEQ_NUM(*all.begin()), 1u);
  EXPECT_EQ(NRTA_SEQ_GET_SEQ_NUM(*all.rbegin()), static_cast<uint64_t>(2 * kEach));
  for (int t = 0; t < 2; ++t) EXPECT_EQ(ReadFloats(mine[t]), values[t].back());
  nrt_tensor_free(&mine[0]);
  nrt_tensor_free(&mine[1]);
}

// The system trace: device_exec and transfers carry the request's nrta_seq_id (the eleventh
// key, after timestamp_ns), and each schedule is an nrta_execute_schedule instant.
TEST_F(AsyncTest, SystemTraceCarriesSequenceIds) {
  // A tensor the execution does not use: the two queues run side by side.
  nrt_tensor_t* t = DeviceFloats(0, std::vector<float>(kN, 0.0f), "t");
  StartTrace();
  const nrta_seq_t exec = Schedule();
  const std::vector<float> values = Iota(3);
  std::vector<float> back(kN);
  nrta_seq_t w = 0, r = 0;
  ASSERT_EQ(nrta_tensor_write(t, values.data(), 0, kN * 4, 0, nullptr, &w), NRT_SUCCESS);
  ASSERT_EQ(nrta_tensor_read(back.data(), t, 0, kN * 4, 0, nullptr, &r), NRT_SUCCESS);
  ASSERT_TRUE(WaitFor(exec));
  ASSERT_TRUE(WaitFor(r));
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);  // synchronous: no nrta_seq_id
  const FetchedTrace trace = Fetch();
  EXPECT_EQ(RealShapeError(trace.json), "") << trace.json;
  for (nrta_seq_t seq : {exec, w, r}) {
    EXPECT_NE(trace.json.find("\"nrta_seq_id\":" + std::to_string(seq) + "}"), std::string::npos)
        << seq;
  }
  const auto schedules = trace.OfType("nrta_execute_schedule", "instant");
  ASSERT_EQ(schedules.size(), 1u);
  const auto& sched_data = schedules[0].fields().at("data").struct_value();
  EXPECT_EQ(Num(schedules[0], "nrta_seq_id"), static_cast<double>(exec));
  EXPECT_EQ(Str(sched_data, "model_name"), "axpy");
  EXPECT_GT(Num(sched_data, "model_id"), 0);

  const auto starts = trace.OfType("device_exec", "start");
  const auto stops = trace.OfType("device_exec", "stop");
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(stops.size(), 2u);
  EXPECT_EQ(Num(starts[0], "nrta_seq_id"), static_cast<double>(exec));
  EXPECT_EQ(Num(stops[0], "nrta_seq_id"), static_cast<double>(exec));
  EXPECT_EQ(starts[1].fields().count("nrta_seq_id"), 0u);
  EXPECT_EQ(stops[1].fields().count("nrta_seq_id"), 0u);
  EXPECT_EQ(Num(starts[0], "thread_id"), Num(schedules[0], "thread_id"));  // who scheduled it
  // Scheduled before it ran: the schedule's host time against the start's device time.
  const auto syncs = trace.OfType("timestamp_sync", "instant");
  ASSERT_FALSE(syncs.empty());
  const auto& sync = syncs[0].fields().at("data").struct_value();
  const double host_minus_device = Num(sync, "cpu_timestamp_ns") - Num(sync, "nc_timestamp_ns");
  // (Host timestamps, ~1.8e18 ns, are within 256 ns as doubles.)
  EXPECT_LE(Num(schedules[0], "timestamp_ns"),
            Num(starts[0], "timestamp_ns") + host_minus_device + 1000);

  for (const char* type : {"tensor_write", "dmem_buf_copyin"}) {
    for (const char* phase : {"start", "stop"}) {
      const auto events = trace.OfType(type, phase);
      ASSERT_FALSE(events.empty()) << type;
      EXPECT_EQ(Num(events.back(), "nrta_seq_id"), static_cast<double>(w)) << type << phase;
    }
  }
  for (const char* type : {"tensor_read", "dmem_buf_copyout"}) {
    for (const char* phase : {"start", "stop"}) {
      const auto events = trace.OfType(type, phase);
      ASSERT_FALSE(events.empty()) << type;
      EXPECT_EQ(Num(events.back(), "nrta_seq_id"), static_cast<double>(r)) << type << phase;
    }
  }
  EXPECT_EQ(back, values);
  ASSERT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);
  nrt_tensor_free(&t);
}

// A synchronous nrt_execute occupies the compute queue: it runs on the device after the
// asynchronous executions scheduled before it.
TEST_F(AsyncTest, SyncExecuteRunsAfterQueuedAsyncExecutions) {
  StartTrace();
  nrta_seq_t last = 0;
  for (int i = 0; i < 4; ++i) last = Schedule();
  ASSERT_EQ(nrt_execute(model_, in_, outs_), NRT_SUCCESS);
  bool done = false;
  ASSERT_EQ(nrta_is_completed(last, &done), NRT_SUCCESS);
  EXPECT_TRUE(done);  // on the host too: it returned after them
  const FetchedTrace trace = Fetch();
  const auto starts = trace.OfType("device_exec", "start");
  const auto stops = trace.OfType("device_exec", "stop");
  ASSERT_EQ(starts.size(), 5u);
  ASSERT_EQ(stops.size(), 5u);
  for (size_t i = 1; i < starts.size(); ++i) {
    EXPECT_GE(Num(starts[i], "timestamp_ns"), Num(stops[i - 1], "timestamp_ns")) << i;
  }
  EXPECT_EQ(starts[4].fields().count("nrta_seq_id"), 0u);  // the synchronous one, last
  ASSERT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);
}

TEST_F(AsyncTest, ErrorsAtScheduleTime) {
  nrta_seq_t seq = 0;
  NRT_STATUS ret = kUnwritten;
  std::vector<float> buf(kN);
  nrt_tensor_t* host = nullptr;
  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, 0, kN * 4, "h", &host), NRT_SUCCESS);
  nrt_tensor_t* other_core = DeviceFloats(1, std::vector<float>(kN, 0.0f), "o");
  nrt_tensor_t* freed = DeviceFloats(0, std::vector<float>(kN, 0.0f), "f");
  nrt_tensor_t* dangling = freed;
  nrt_tensor_free(&freed);
  nrt_tensor_set_t* empty = Set({});
  struct Case {
    NRT_STATUS status;
    NRT_STATUS want;
  };
  ::testing::internal::CaptureStderr();
  const std::vector<Case> cases = {
      {nrta_execute_schedule(model_, in_, outs_, 1, &ret, &seq), NRT_INVALID},  // queue
      {nrta_execute_schedule(model_, in_, outs_, -1, &ret, &seq), NRT_INVALID},
      {nrta_execute_schedule(model_, in_, outs_, 0, &ret, nullptr), NRT_INVALID},
      {nrta_execute_schedule(nullptr, in_, outs_, 0, &ret, &seq), NRT_INVALID_HANDLE},
      {nrta_execute_schedule(model_, empty, outs_, 0, &ret, &seq), NRT_INVALID},
      {nrta_execute_schedule(model_, in_, nullptr, 0, &ret, &seq), NRT_INVALID_HANDLE},
      {nrta_tensor_write(a_, buf.data(), 0, kN * 4, 2, &ret, &seq), NRT_INVALID},
      {nrta_tensor_write(a_, buf.data(), 4, kN * 4, 0, &ret, &seq), NRT_INVALID},  // past end
      {nrta_tensor_write(a_, nullptr, 0, kN * 4, 0, &ret, &seq), NRT_INVALID},
      {nrta_tensor_write(dangling, buf.data(), 0, 4, 0, &ret, &seq), NRT_INVALID_HANDLE},
      {nrta_tensor_write(host, buf.data(), 0, 4, 0, &ret, &seq), NRT_INVALID},  // not a device's
      {nrta_tensor_read(buf.data(), a_, 0, kN * 4, -1, &ret, &seq), NRT_INVALID},
      {nrta_tensor_read(buf.data(), nullptr, 0, 4, 0, &ret, &seq), NRT_INVALID_HANDLE},
      {nrta_tensor_copy(a_, 0, other_core, 0, 4, 0, &ret, &seq), NRT_INVALID},  // two cores
      {nrta_tensor_copy(host, 0, host, 0, 4, 0, &ret, &seq), NRT_INVALID},
      {nrta_tensor_copy(a_, 0, b_, 0, 4, 2, &ret, &seq), NRT_INVALID},
  };
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(cases[i].status, cases[i].want) << i;
  // One line each, prefixed as the runtime's error lines are.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), static_cast<long>(cases.size())) << err;
  EXPECT_EQ(err.rfind("nrt: nrta_", 0), 0u) << err;
  EXPECT_EQ(ret, kUnwritten);  // nothing was scheduled
  nrta_seq_t last = 1;
  ASSERT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &last), NRT_SUCCESS);
  EXPECT_EQ(NRTA_SEQ_GET_SEQ_NUM(last), 0u);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 1, &last), NRT_INVALID);
  EXPECT_EQ(nrta_get_sequence(0, NRTA_XU_TENSOR_OP, 2, &last), NRT_INVALID);
  EXPECT_EQ(nrta_get_sequence(0, NRTA_XU_COLLECTIVES, 3, &last), NRT_INVALID);
  EXPECT_EQ(nrta_get_sequence(0, static_cast<nrta_xu_t>(7), 0, &last), NRT_INVALID);
  EXPECT_EQ(nrta_get_sequence(2, NRTA_XU_COMPUTE, 0, &last), NRT_INVALID);
  EXPECT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, nullptr), NRT_INVALID);
  // Collectives need a communicator and a prepared context (sim/cc_test.cc runs them).
  nrt_cc_context_t* ctx = nullptr;
  EXPECT_EQ(nrta_cc_prepare(nullptr, nullptr, nullptr, NRT_DTYPE_FLOAT32, NRT_OP_ADD,
                            NRT_CC_ALLREDUCE, &ctx),
            NRT_INVALID);
  EXPECT_EQ(nrta_cc_schedule(&ctx, 0, &ret, &seq), NRT_INVALID_HANDLE);
  const std::string more = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(more.begin(), more.end(), '\n'), 8) << more;
  EXPECT_NE(more.find("nrt: nrta_cc_schedule: not a context nrta_cc_prepare returned"),
            std::string::npos)
      << more;
  nrt_destroy_tensor_set(&empty);
  nrt_tensor_free(&host);
  nrt_tensor_free(&other_core);
}

// Requests held in flight by a slow device (each execution 1000 times its modelled time).
class SlowDeviceTest : public AsyncTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "1000", 1), 0);
    ASSERT_EQ(setenv("NRT_SIM_ASYNC_QUEUE_DEPTH", "3", 1), 0);
    AsyncTest::SetUp();
    ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "0", 1), 0);
    ASSERT_EQ(unsetenv("NRT_SIM_ASYNC_QUEUE_DEPTH"), 0);
  }
};

TEST_F(SlowDeviceTest, QueueFullAtDepthPlusOneAndCloseCompletesTheRest) {
  const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int cancelled = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  ASSERT_GE(cancelled, 0);
  NRT_STATUS ret[4] = {kUnwritten, kUnwritten, kUnwritten, kUnwritten};
  nrta_seq_t seq[4] = {0, 0, 0, 0};
  nrta_seq_t first = 0;
  ASSERT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &first), NRT_SUCCESS);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(nrta_execute_schedule(model_, in_, outs_, 0, &ret[i], &seq[i]), NRT_SUCCESS) << i;
  }
  // The fourth, at depth 3: refused, nothing scheduled, nothing written.
  EXPECT_EQ(nrta_execute_schedule(model_, in_, outs_, 0, &ret[3], &seq[3]), NRT_QUEUE_FULL);
  EXPECT_EQ(seq[3], 0u);
  bool done = true;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nrta_is_completed(seq[2] + 1, &done), NRT_INVALID);
  ::testing::internal::GetCapturedStderr();
  // Other queues have their own room (a tensor the executions do not use).
  const std::vector<float> values = Iota(0);
  nrt_tensor_t* t = nullptr;
  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, kN * 4, "t", &t), NRT_SUCCESS);
  nrta_seq_t w = 0;
  EXPECT_EQ(nrta_tensor_write(t, values.data(), 0, kN * 4, 0, nullptr, &w), NRT_SUCCESS);
  // In flight (the first takes 375 ms here): not completed, ret not written.
  nrta_seq_t last = 0;
  ASSERT_EQ(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &last), NRT_SUCCESS);
  EXPECT_LT(last, seq[0]);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(nrta_is_completed(seq[i], &done), NRT_SUCCESS);
    EXPECT_FALSE(done) << i;
    EXPECT_EQ(Peek(&ret[i]), kUnwritten) << i;
  }
  ASSERT_EQ(nrta_event_register_seq_id_completion(seq[2], efd), NRT_SUCCESS);
  ASSERT_EQ(nrta_event_register_seq_id_completion(seq[1], cancelled), NRT_SUCCESS);
  ASSERT_EQ(nrta_event_register_seq_id_completion(seq[1], -1), NRT_SUCCESS);
  // A thread waiting on the eventfd is woken by nrt_close completing the request.
  uint64_t woke = 0;
  std::thread waiter([&] { woke = WaitEventfd(efd); });
  nrt_close();  // completes the three (and the write) without waiting out their time
  waiter.join();
  EXPECT_EQ(woke, 1u);
  EXPECT_EQ(Drain(cancelled), 0u);
  EXPECT_EQ(ret[3], kUnwritten);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ret[i], NRT_SUCCESS) << i;
  EXPECT_EQ(nrta_is_completed(seq[0], &done), NRT_CLOSED);
  close(efd);
  close(cancelled);
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);  // for TearDown
}

// The compute queue and a tensor-op queue of one core run side by side: a write scheduled
// behind a run of executions is on the device while they are (device clock, time scale 1).
TEST(AsyncOverlap, ComputeAndTensorOpRunSideBySide) {
  ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "1", 1), 0);
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "0", 1), 0);
  nrt_model_t* model = Load(kModel, 0);
  nrt_tensor_t* a = DeviceFloats(0, Iota(1), "a");
  nrt_tensor_t* b = DeviceFloats(0, Iota(2), "b");
  nrt_tensor_t* out = DeviceFloats(0, std::vector<float>(kN, 0.0f), "out");
  nrt_tensor_t* next = DeviceFloats(0, std::vector<float>(kN, 0.0f), "next");
  nrt_tensor_set_t* in = Set({{"a", a}, {"b", b}});
  nrt_tensor_set_t* outs = Set({{"out", out}});
  ASSERT_EQ(nrt_sys_trace_start(nullptr), NRT_SUCCESS);
  // A request is on the device from its schedule call (its worker thread may get to it later):
  // the first execution starts at once, the write one schedule call later, and the other
  // executions follow the first, 3.75 ms of device time in all.
  constexpr int kExecs = 10;
  const std::vector<float> values = Iota(5);
  nrta_seq_t exec = 0, w = 0;
  for (int i = 0; i < kExecs; ++i) {
    ASSERT_EQ(nrta_execute_schedule(model, in, outs, 0, nullptr, &exec), NRT_SUCCESS);
    if (i == 0) {
      ASSERT_EQ(nrta_tensor_write(next, values.data(), 0, kN * 4, 0, nullptr, &w), NRT_SUCCESS);
    }
  }
  ASSERT_TRUE(WaitFor(exec));
  ASSERT_TRUE(WaitFor(w));
  const FetchedTrace trace = Fetch();
  ASSERT_EQ(nrt_sys_trace_stop(), NRT_SUCCESS);
  const auto starts = trace.OfType("device_exec", "start");
  const auto stops = trace.OfType("device_exec", "stop");
  ASSERT_EQ(starts.size(), static_cast<size_t>(kExecs));
  ASSERT_EQ(stops.size(), static_cast<size_t>(kExecs));
  for (int i = 1; i < kExecs; ++i) {  // one queue: one at a time
    EXPECT_GE(Num(starts[i], "timestamp_ns"), Num(stops[i - 1], "timestamp_ns")) << i;
  }
  // The write's span (host clock, which the transfer's device span maps onto exactly).
  const auto syncs = trace.OfType("timestamp_sync", "instant");
  ASSERT_FALSE(syncs.empty());
  const auto& sync = syncs[0].fields().at("data").struct_value();
  const double host_minus_device = Num(sync, "cpu_timestamp_ns") - Num(sync, "nc_timestamp_ns");
  const auto write_start = trace.OfType("tensor_write", "start");
  const auto write_stop = trace.OfType("tensor_write", "stop");
  ASSERT_FALSE(write_start.empty());
  ASSERT_FALSE(write_stop.empty());
  EXPECT_EQ(Num(write_start.back(), "nrta_seq_id"), static_cast<double>(w));
  const double write_begin = Num(write_start.back(), "timestamp_ns") - host_minus_device;
  const double write_end = Num(write_stop.back(), "timestamp_ns") - host_minus_device;
  EXPECT_LT(write_begin, Num(stops.back(), "timestamp_ns"));
  EXPECT_GT(write_end, Num(starts.front(), "timestamp_ns"));
  EXPECT_EQ(ReadFloats(next), values);
  nrt_close();
}

}  // namespace
