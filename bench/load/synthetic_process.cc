#include "bench/load/synthetic_process.h"

#include <memory>

#include <algorithm>
#include <utility>

namespace nrtprof::bench {
namespace {

// The process's interned strings; the ids are the wire iids.
enum Iid : uint32_t {
  kRmsnorm = 1,
  kAtenMul,
  kAtenMean,
  kAtenAdd,
  kAtenRsqrt,
  kNrtExecute,
  kNrtTensorWrite,
  kNrtLoad,
  kNrtTensorAllocate,
  kNcExecRunning,
  kDmaHbmToSbuf,
  kDmaSbufToHbm,
  kDmaH2d,
  kDmaModelLoad,
  kVector,
  kScalar,
  kOpMul,
  kOpMean,
  kOpAdd,
  kOpRsqrt,
  kTensorEps,
  kTensorIn,
  kTensorOut,
  kModelFirst,  // kOps model names follow
};

struct Op {
  uint32_t range;
  const char* model;
  uint32_t name;
  uint32_t engine;
  int inputs;  // DMA into the core's SBUF before the op
};

// Naive RMSNorm: x*x, mean, +eps, rsqrt, x*rms, *weight.
constexpr Op kOps[] = {
    {kAtenMul, "aten_mul_square", kOpMul, kVector, 2},
    {kAtenMean, "aten_mean", kOpMean, kVector, 1},
    {kAtenAdd, "aten_add_eps", kOpAdd, kVector, 2},
    {kAtenRsqrt, "aten_rsqrt", kOpRsqrt, kScalar, 1},
    {kAtenMul, "aten_mul_rms", kOpMul, kVector, 2},
    {kAtenMul, "aten_mul_weight", kOpMul, kVector, 2},
};
constexpr int kNumOps = sizeof(kOps) / sizeof(kOps[0]);
constexpr int kAddOp = 2;  // writes the epsilon scalar first

const std::pair<uint32_t, const char*> kStrings[] = {
    {kRmsnorm, "rmsnorm"},
    {kAtenMul, "aten::mul"},
    {kAtenMean, "aten::mean"},
    {kAtenAdd, "aten::add"},
    {kAtenRsqrt, "aten::rsqrt"},
    {kNrtExecute, "nrt_execute"},
    {kNrtTensorWrite, "nrt_tensor_write"},
    {kNrtLoad, "nrt_load"},
    {kNrtTensorAllocate, "nrt_tensor_allocate"},
    {kNcExecRunning, "nc_exec_running"},
    {kDmaHbmToSbuf, "dma_hbm_to_sbuf"},
    {kDmaSbufToHbm, "dma_sbuf_to_hbm"},
    {kDmaH2d, "dma_h2d"},
    {kDmaModelLoad, "dma_model_load"},
    {kVector, "vector"},
    {kScalar, "scalar"},
    {kOpMul, "mul"},
    {kOpMean, "mean"},
    {kOpAdd, "add"},
    {kOpRsqrt, "rsqrt"},
    {kTensorEps, "eps"},
    {kTensorIn, "a"},
    {kTensorOut, "out"},
};

// Durations as the simulator models them for 4x512 bf16 (sim/README.md, calibration).
constexpr uint64_t kExecCallNs = 370'000;
constexpr uint64_t kExecDeviceNs = 365'000;
constexpr uint64_t kSubmitNs = 2'000;  // call start to device start
constexpr uint64_t kSbufDmaNs = 2'010;
constexpr uint64_t kEngineOpNs = 1'510;
constexpr uint64_t kWriteCallNs = 158'000;
constexpr uint64_t kH2dNs = 154'160;
constexpr uint64_t kLoadCallNs = 170'000;
constexpr uint64_t kModelLoadDmaNs = 154'000;
constexpr uint64_t kGapNs = 700;  // between consecutive host calls and ranges

// The device clock runs this far ahead of the host's (a different epoch, as on real devices).
constexpr uint64_t kDeviceClockOffsetNs = 1'000'000'000'000;

constexpr uint64_t kModelHandleBase = 0x1000;
constexpr uint64_t kTensorHandleBase = 0x8000;

uint64_t ModelHandle(int32_t nc_idx, int op) {
  return kModelHandleBase + static_cast<uint64_t>(nc_idx) * 64 + static_cast<uint64_t>(op);
}

}  // namespace

SyntheticProcess::SyntheticProcess(const SyntheticProcessOptions& options)
    : options_(options), next_exec_id_(static_cast<size_t>(std::max(options.cores, 1)), 1) {
  const uint32_t threads = std::max<uint32_t>(options.threads, 1);
  for (uint32_t i = 0; i < threads; ++i) {
    ThreadState t;
    t.tid = options.pid + i;
    t.nc_idx = static_cast<int32_t>(i % next_exec_id_.size());
    t.now_ns = options.start_ns;
    t.eps_tensor = kTensorHandleBase + i;
    threads_.push_back(t);
  }
}

nrtprof::Hello SyntheticProcess::MakeHello() const {
  nrtprof::Hello hello;
  hello.set_host(options_.host);
  hello.set_boot_id("00000000-0000-0000-0000-000000000000");
  hello.set_pid(options_.pid);
  hello.set_ppid(1);
  hello.set_executable("/usr/bin/python3");
  hello.add_command_line("python3");
  hello.add_command_line("rmsnorm_naive.py");
  hello.set_shim_version("loadgen");
  hello.mutable_clock()->set_monotonic_ns(options_.start_ns);
  hello.mutable_clock()->set_realtime_ns(options_.start_ns + 1'700'000'000'000'000'000ull);
  hello.set_capture_id(options_.capture_id);
  return hello;
}

void SyntheticProcess::AddStrings(nrtprof::EventBatch* batch) const {
  for (const auto& [iid, value] : kStrings) {
    nrtprof::InternedString* s = batch->add_strings();
    s->set_iid(iid);
    s->set_value(value);
  }
  for (int op = 0; op < kNumOps; ++op) {
    nrtprof::InternedString* s = batch->add_strings();
    s->set_iid(kModelFirst + op);
    s->set_value(kOps[op].model);
  }
}

nrtprof::Event* SyntheticProcess::AddDeviceEvent(nrtprof::EventKind kind, const ThreadState& t,
                                                 uint32_t name_iid, uint64_t host_start_ns,
                                                 uint64_t duration_ns, nrtprof::EventBatch* batch) {
  nrtprof::Event* e = batch->add_events();
  e->set_kind(kind);
  e->set_start_ns(host_start_ns + kDeviceClockOffsetNs);
  e->set_duration_ns(duration_ns);
  e->set_tid(t.tid);
  e->set_name_iid(name_iid);
  e->set_nc_idx(t.nc_idx);
  e->set_device_id(next_device_id_++);
  return e;
}

// nrt_load of every model on every core the threads use, and each thread's epsilon tensor.
uint32_t SyntheticProcess::AddSetup(nrtprof::EventBatch* batch) {
  uint32_t events = 0;
  ThreadState& main = threads_[0];
  for (int32_t nc = 0; nc < static_cast<int32_t>(next_exec_id_.size()); ++nc) {
    for (int op = 0; op < kNumOps; ++op) {
      nrtprof::Event* call = batch->add_events();
      call->set_kind(nrtprof::EVENT_API_CALL);
      call->set_start_ns(main.now_ns);
      call->set_duration_ns(kLoadCallNs);
      call->set_tid(main.tid);
      call->set_name_iid(kNrtLoad);
      call->set_function(nrtprof::API_NRT_LOAD);  // as the shim sends it
      call->set_correlation_id(next_correlation_id_++);
      call->set_bytes(127);
      call->set_model_handle(ModelHandle(nc, op));
      call->set_model_name_iid(kModelFirst + op);
      call->set_nc_idx(nc);
      ThreadState on_core = main;
      on_core.nc_idx = nc;
      nrtprof::Event* dma = AddDeviceEvent(nrtprof::EVENT_DEVICE_DMA, on_core, kDmaModelLoad,
                                           main.now_ns + kSubmitNs, kModelLoadDmaNs, batch);
      dma->set_bytes(127);
      dma->set_tensor_name_iid(kModelFirst + op);
      main.now_ns += kLoadCallNs + kGapNs;
      events += 2;
    }
  }
  for (ThreadState& t : threads_) {
    nrtprof::Event* call = batch->add_events();
    call->set_kind(nrtprof::EVENT_API_CALL);
    call->set_start_ns(main.now_ns);
    call->set_duration_ns(20'000);
    call->set_tid(main.tid);
    call->set_name_iid(kNrtTensorAllocate);
    call->set_function(nrtprof::API_NRT_TENSOR_ALLOCATE);  // as the shim sends it
    call->set_correlation_id(next_correlation_id_++);
    call->set_bytes(4);
    call->set_tensor_handle(t.eps_tensor);
    call->set_tensor_name_iid(kTensorEps);
    call->set_nc_idx(t.nc_idx);
    call->set_placement(0);  // device
    main.now_ns += 20'000 + kGapNs;
    ++events;
  }
  for (ThreadState& t : threads_) t.now_ns = std::max(t.now_ns, main.now_ns);
  return events;
}

uint32_t SyntheticProcess::AddTensorWrite(ThreadState* t, nrtprof::EventBatch* batch) {
  nrtprof::Event* call = batch->add_events();
  call->set_kind(nrtprof::EVENT_API_CALL);
  call->set_start_ns(t->now_ns);
  call->set_duration_ns(kWriteCallNs);
  call->set_tid(t->tid);
  call->set_name_iid(kNrtTensorWrite);
  call->set_function(nrtprof::API_NRT_TENSOR_WRITE);  // as the shim sends it
  call->set_correlation_id(next_correlation_id_++);
  call->set_bytes(4);
  call->set_tensor_handle(t->eps_tensor);
  call->set_tensor_name_iid(kTensorEps);
  call->set_nc_idx(-1);
  nrtprof::Event* dma =
      AddDeviceEvent(nrtprof::EVENT_DEVICE_DMA, *t, kDmaH2d, t->now_ns + kSubmitNs, kH2dNs, batch);
  dma->set_bytes(4);
  dma->set_tensor_name_iid(kTensorEps);
  t->now_ns += kWriteCallNs + kGapNs;
  return 2;
}

uint32_t SyntheticProcess::AddExecution(ThreadState* t, int op, nrtprof::EventBatch* batch) {
  const Op& o = kOps[op];
  nrtprof::Event* call = batch->add_events();
  call->set_kind(nrtprof::EVENT_API_CALL);
  call->set_start_ns(t->now_ns);
  call->set_duration_ns(kExecCallNs);
  call->set_tid(t->tid);
  call->set_name_iid(kNrtExecute);
  call->set_function(nrtprof::API_NRT_EXECUTE);  // as the shim sends it
  call->set_correlation_id(next_correlation_id_++);
  call->set_model_handle(ModelHandle(t->nc_idx, op));
  call->set_nc_idx(t->nc_idx);
  call->set_repeat(1);

  const uint64_t exec_start = t->now_ns + kSubmitNs;
  const uint64_t exec_id = next_exec_id_[static_cast<size_t>(t->nc_idx)]++;
  nrtprof::Event* exec = AddDeviceEvent(nrtprof::EVENT_DEVICE_EXEC, *t, kNcExecRunning, exec_start,
                                        kExecDeviceNs, batch);
  exec->set_exec_id(exec_id);
  exec->set_model_name_iid(kModelFirst + op);
  const uint64_t exec_device_id = exec->device_id();
  uint32_t events = 2;
  uint64_t at = exec_start + 500;
  auto dma = [&](uint32_t name, uint32_t tensor) {
    nrtprof::Event* d = AddDeviceEvent(nrtprof::EVENT_DEVICE_DMA, *t, name, at, kSbufDmaNs, batch);
    d->set_device_parent_id(exec_device_id);
    d->set_exec_id(exec_id);
    d->set_bytes(4096);
    d->set_tensor_name_iid(tensor);
    at += kSbufDmaNs + 100;
    ++events;
  };
  for (int i = 0; i < o.inputs; ++i) dma(kDmaHbmToSbuf, kTensorIn);
  nrtprof::Event* engine_op =
      AddDeviceEvent(nrtprof::EVENT_DEVICE_OP, *t, o.name, at, kEngineOpNs, batch);
  engine_op->set_device_parent_id(exec_device_id);
  engine_op->set_exec_id(exec_id);
  engine_op->set_model_name_iid(kModelFirst + op);
  engine_op->set_engine_iid(o.engine);
  ++events;
  at += kEngineOpNs + 100;
  dma(kDmaSbufToHbm, kTensorOut);
  t->now_ns += kExecCallNs + kGapNs;
  return events;
}

uint32_t SyntheticProcess::AddIteration(ThreadState* t, nrtprof::EventBatch* batch) {
  auto range = [&](uint32_t name, uint64_t start, uint64_t end, uint32_t depth) {
    nrtprof::Event* r = batch->add_events();
    r->set_kind(nrtprof::EVENT_RANGE);
    r->set_start_ns(start);
    r->set_duration_ns(end - start);
    r->set_tid(t->tid);
    r->set_name_iid(name);
    r->set_depth(depth);
  };
  uint32_t events = 0;
  const uint64_t iteration_start = t->now_ns;
  t->now_ns += kGapNs;
  for (int op = 0; op < kNumOps; ++op) {
    const uint64_t op_start = t->now_ns;
    t->now_ns += kGapNs;
    if (op == kAddOp) events += AddTensorWrite(t, batch);
    events += AddExecution(t, op, batch);
    range(kOps[op].range, op_start, t->now_ns, 1);
    ++events;
    t->now_ns += kGapNs;
  }
  range(kRmsnorm, iteration_start, t->now_ns, 0);
  ++events;
  t->now_ns += kGapNs;
  return events;
}

uint32_t SyntheticProcess::NextBatch(uint32_t min_events, bool final, nrtprof::EventBatch* batch) {
  batch->Clear();
  batch->set_sequence(++sequence_);
  uint32_t events = 0;
  if (sequence_ == 1) {
    AddStrings(batch);
    events += AddSetup(batch);
  }
  do {
    ThreadState& t = threads_[next_thread_];
    next_thread_ = (next_thread_ + 1) % threads_.size();
    events += AddIteration(&t, batch);
  } while (events < min_events);
  // One sync point per core, as the shim sends with each fetch of the runtime's system trace.
  uint64_t now = 0;
  for (const ThreadState& t : threads_) now = std::max(now, t.now_ns);
  for (size_t nc = 0; nc < next_exec_id_.size(); ++nc) {
    nrtprof::DeviceClockSync* sync = batch->add_clock_syncs();
    sync->set_nc_idx(static_cast<int32_t>(nc));
    sync->set_device_ns(now + kDeviceClockOffsetNs);
    sync->set_host_monotonic_ns(now);
  }
  batch->mutable_clock()->set_monotonic_ns(now);
  batch->mutable_clock()->set_realtime_ns(now + 1'700'000'000'000'000'000ull);
  batch->mutable_drops();  // all zero: nothing lost in the (synthetic) shim
  batch->set_final(final);
  return events;
}

WireBatches MakeWireBatches(uint64_t events, uint32_t processes, uint32_t threads,
                            uint32_t batch_events, bool final) {
  WireBatches out;
  std::vector<std::unique_ptr<SyntheticProcess>> procs;
  for (uint32_t i = 0; i < processes; ++i) {
    SyntheticProcessOptions o;
    o.pid = 100000 + i * 1000;
    o.threads = threads;
    o.start_ns = 1'000'000'000'000;
    procs.push_back(std::make_unique<SyntheticProcess>(o));
    out.hellos.push_back(procs.back()->MakeHello());
  }
  nrtprof::ShimMessage message;
  for (uint32_t i = 0; out.events < events; i = (i + 1) % processes) {
    const bool last = final && out.events + uint64_t{batch_events} * processes >= events;
    out.events += procs[i]->NextBatch(batch_events, last, message.mutable_batch());
    out.batches.push_back(message.SerializeAsString());
    out.process.push_back(i);
  }
  return out;
}

}  // namespace nrtprof::bench
