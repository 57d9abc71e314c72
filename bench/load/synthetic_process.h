// One synthetic profiled process for the daemon's load generator: the EventBatches that the
// shim of a program like `examples/rmsnorm --variant naive` would send, without running it.
//
// Each iteration of each of the process's threads is what naive RMSNorm does per step: a
// "rmsnorm" range holding six framework ops (aten::mul, aten::mean, aten::add, aten::rsqrt,
// aten::mul, aten::mul), each with its nrt_execute call; aten::add also writes the epsilon
// tensor (nrt_tensor_write and its host-to-device DMA). On the device each execution is an
// nc_exec_running with one engine op and the DMA moving its operands in and out. That is 43
// events per iteration, the mix of the real capture. The first batch also loads the six models
// and allocates the tensors (nrt_load with its dma_model_load, nrt_tensor_allocate), so the
// daemon can match every device event to its call exactly as for a real program.
//
// Host times are a synthetic CLOCK_MONOTONIC that advances by the durations the simulator
// models (an execution takes ~365 us), so timestamps and their gaps look like a real capture's
// whatever the rate the batches are sent at. Device events are on a device clock offset from
// the host's, and every batch carries a DeviceClockSync per NeuronCore.
//
// Not thread-safe: one SyntheticProcess per stream, used by one thread.
#ifndef NRTPROF_BENCH_LOAD_SYNTHETIC_PROCESS_H_
#define NRTPROF_BENCH_LOAD_SYNTHETIC_PROCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/nrtprof.pb.h"

namespace nrtprof::bench {

struct SyntheticProcessOptions {
  uint32_t pid = 1;
  uint32_t threads = 2;    // host threads, each running the iterations
  int32_t cores = 2;       // thread t submits to NeuronCore t % cores
  uint64_t start_ns = 0;   // the synthetic host clock's first reading
  std::string capture_id;  // Hello.capture_id
  std::string host = "loadgen";
};

class SyntheticProcess {
 public:
  // Events of one iteration of one thread.
  static constexpr uint32_t kEventsPerIteration = 43;

  explicit SyntheticProcess(const SyntheticProcessOptions& options);
  SyntheticProcess(const SyntheticProcess&) = delete;
  SyntheticProcess& operator=(const SyntheticProcess&) = delete;

  nrtprof::Hello MakeHello() const;

  // Fills *batch (cleared first) with the next batch: at least `min_events` events (whole
  // iterations, threads taking turns), numbered with the next sequence. The first batch also
  // carries the interned strings and the set-up calls. Returns the number of events in it.
  uint32_t NextBatch(uint32_t min_events, bool final, nrtprof::EventBatch* batch);

  uint64_t last_sequence() const { return sequence_; }

 private:
  struct ThreadState {
    uint32_t tid = 0;
    int32_t nc_idx = 0;
    uint64_t now_ns = 0;  // the thread's synthetic host clock
    uint64_t eps_tensor = 0;
  };

  void AddStrings(nrtprof::EventBatch* batch) const;
  uint32_t AddSetup(nrtprof::EventBatch* batch);
  uint32_t AddIteration(ThreadState* t, nrtprof::EventBatch* batch);
  // Appends nrt_execute of model `op` on thread `t` at t->now_ns, with its device events.
  uint32_t AddExecution(ThreadState* t, int op, nrtprof::EventBatch* batch);
  uint32_t AddTensorWrite(ThreadState* t, nrtprof::EventBatch* batch);
  nrtprof::Event* AddDeviceEvent(nrtprof::EventKind kind, const ThreadState& t, uint32_t name_iid,
                                 uint64_t host_start_ns, uint64_t duration_ns,
                                 nrtprof::EventBatch* batch);

  const SyntheticProcessOptions options_;
  std::vector<ThreadState> threads_;
  size_t next_thread_ = 0;
  uint64_t sequence_ = 0;
  uint64_t next_correlation_id_ = 1;
  uint64_t next_device_id_ = 1;
  std::vector<uint64_t> next_exec_id_;  // per NeuronCore
};

// The serialized batches (ShimMessages) of `processes` synthetic processes (pids 100000,
// 101000, ...; `threads` each), round robin, `batch_events` events a batch, until `events`
// events in all: as they arrive on the wire. With `final`, each process's last batch is final.
struct WireBatches {
  std::vector<nrtprof::Hello> hellos;  // by process
  std::vector<std::string> batches;
  std::vector<uint32_t> process;       // of each batch
  uint64_t events = 0;
};
WireBatches MakeWireBatches(uint64_t events, uint32_t processes, uint32_t threads,
                            uint32_t batch_events, bool final);

}  // namespace nrtprof::bench

#endif  // NRTPROF_BENCH_LOAD_SYNTHETIC_PROCESS_H_
