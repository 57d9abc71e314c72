// The flusher's CPU per event, from what it drains or fetches to the bytes gRPC writes:
//
//   bazel run -c opt //shim/backend:batching_benchmark
//
// RingRecordsToWire: 8192 nrt_execute records, as a thread's ring holds them, each built into
// the flusher's one scratch Event and added to the batcher; then the batch is taken for a
// stream, sized (ShippingCore's check of the message limit) and serialized (as gRPC does), and
// the message freed. DeviceDocumentToWire: the same from a fetched system-trace document of
// 4096 executions (device_exec start and stop, 8192 events, with a clock sync on each end):
// parsed, batched, taken, sized, serialized, freed. Reading the ring and fetching the document
// are not in it. BENCHMARKS.md ("Session 22") has the figures before and after the batcher
// encoded each event once (events_encoded).
//
// RingCopyOut: what the flusher does instead when a thread's ring is three quarters full
// between two ticks (flusher.h, StageFillingRings): a default ring's 24,576 one-slot records,
// just written, copied out as they are into the flusher's kept room (EventRing::CopyOut). The
// refill between copies is not timed.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "shim/backend/batcher.h"
#include "shim/backend/device_trace.h"
#include "shim/backend/event_builder.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/preload/event_ring.h"

namespace nrtprof::shim {
namespace {

constexpr int kEvents = 8192;

// A record with room after it for a stack and a name, as a ring slot holds it.
struct Slotted {
  alignas(Record) unsigned char storage[kMaxRecordSlots * kRecordSlotBytes] = {};
  Record& r() { return *reinterpret_cast<Record*>(storage); }
};

// The flusher's step from an event to its batch.
void AddTo(Batcher* batcher, nrtprof::Event* event, uint64_t now_ns) {
  batcher->AddEvent(*event, now_ns);
}

// The flusher's step before it parses a document.
void ClearOutput(DeviceTraceOutput* out) { out->Clear(); }

// A sealed batch taken, sized, serialized and freed, as ShippingCore and gRPC do.
size_t Ship(Batcher* batcher, StreamInterning* stream) {
  LaneCounts n;
  nrtprof::ShimMessage message;
  nrtprof::EventBatch batch = batcher->TakeNext(stream, {}, false, &n);
  message.mutable_batch()->Swap(&batch);
  size_t size = message.ByteSizeLong();
  std::string wire;
  message.SerializeToString(&wire);
  benchmark::DoNotOptimize(wire.data());
  return size + wire.size();
}

Batcher::Options OneBatch() {
  Batcher::Options o;
  o.batch_events = kEvents;
  return o;
}

void BM_RingRecordsToWire(benchmark::State& state) {
  const TickConverter clock(TickSource::kMonotonic);
  StringTable strings;
  StackTable stacks(&strings, [](uintptr_t) { return std::string("f"); });
  EventBuilder builder(&strings, &stacks);
  Batcher batcher(OneBatch(), &strings, &stacks);
  std::vector<Slotted> records(kEvents);
  for (int i = 0; i < kEvents; ++i) {
    Record& r = records[i].r();
    r.Clear(RecordKind::kApiCall, kMaxRecordSlots);
    r.api = kNrtExecute;
    r.correlation_id = static_cast<uint64_t>(i) + 1;
    r.start_ticks = 1000000000ull + 100000ull * static_cast<uint64_t>(i);
    r.end_ticks = r.start_ticks + 95000;
    r.handle = 0x55d0c0a04000;
  }
  nrtprof::Event scratch;
  StreamInterning stream;
  for (auto _ : state) {
    for (int i = 0; i < kEvents; ++i) {
      scratch.Clear();
      builder.Build(records[i].r(), 4242, clock, &scratch);
      AddTo(&batcher, &scratch, static_cast<uint64_t>(i));
    }
    benchmark::DoNotOptimize(Ship(&batcher, &stream));
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_RingRecordsToWire);

void BM_RingCopyOut(benchmark::State& state) {
  constexpr uint32_t kRingSlots = 32768;  // NRTPROF_RING_EVENTS's default
  constexpr uint32_t kFilled = kRingSlots / 4 * 3;
  void* memory = aligned_alloc(EventRing::kAlign, EventRing::BytesFor(kRingSlots));
  EventRing* ring = EventRing::Create(memory, kRingSlots);
  RingProducer producer(ring);
  std::unique_ptr<Record[]> room(new Record[2 * kRingSlots]);
  // The room's pages present, as the flusher's are after its first copy.
  for (Record* r = room.get(); r < room.get() + 2 * kRingSlots; ++r) r->kind = RecordKind::kPad;
  uint64_t id = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (uint32_t i = 0; i < kFilled; ++i) {
      Record* r = producer.TryReserve(1);
      r->Clear(RecordKind::kApiCall, 1);
      r->api = kNrtTensorWrite;
      r->correlation_id = ++id;
      producer.Commit(r);
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(ring->CopyOut(room.get(), 2 * kRingSlots));
  }
  state.SetItemsProcessed(state.iterations() * kFilled);
  free(memory);
}
BENCHMARK(BM_RingCopyOut);

// 4096 executions on one core, as the simulated runtime writes them (sim/sys_trace.cc).
std::string DeviceDocument(uint64_t first_id) {
  std::string doc = "{\"events\":[";
  char buf[512];
  const uint64_t device = 1000000000000ull;
  for (int i = 0; i < kEvents / 2; ++i) {
    const uint64_t id = first_id + 2 * static_cast<uint64_t>(i);
    const uint64_t t = device + 100000ull * static_cast<uint64_t>(i);
    snprintf(buf, sizeof(buf),
             "%s{\"event_type\":\"device_exec\",\"phase\":\"start\",\"id\":%llu,\"nc_idx\":0,"
             "\"nc_local_id\":%llu,\"tracking_id\":%llu,\"thread_id\":20417,\"worker_gid\":0,"
             "\"data\":{\"device_core_idx\":0,\"exec_id\":%llu,\"nc_timestamp_ns\":%llu,"
             "\"model_id\":3,\"model_name\":\"rmsnorm_fused\"},\"timestamp_ns\":%llu},"
             "{\"event_type\":\"device_exec\",\"phase\":\"stop\",\"id\":%llu,\"nc_idx\":0,"
             "\"nc_local_id\":%llu,\"tracking_id\":%llu,\"thread_id\":20417,\"worker_gid\":0,"
             "\"data\":{\"nc_timestamp_ns\":%llu},\"timestamp_ns\":%llu}",
             i == 0 ? "" : ",", static_cast<unsigned long long>(id),
             static_cast<unsigned long long>(id), static_cast<unsigned long long>(id),
             static_cast<unsigned long long>(id / 2 + 1), static_cast<unsigned long long>(t),
             static_cast<unsigned long long>(t), static_cast<unsigned long long>(id + 1),
             static_cast<unsigned long long>(id + 1), static_cast<unsigned long long>(id),
             static_cast<unsigned long long>(t + 95000),
             static_cast<unsigned long long>(t + 95000));
    doc += buf;
  }
  return doc + "],\"data_version\":2}";
}

void BM_DeviceDocumentToWire(benchmark::State& state) {
  StringTable strings;
  StackTable stacks(&strings, [](uintptr_t) { return std::string("f"); });
  Batcher batcher(OneBatch(), &strings, &stacks);
  DeviceTraceParser parser(&strings);
  parser.set_realtime_offset_for_testing(1700000000000000000);
  // Documents with ids that go on from one to the next, as a capture's do (the parser takes a
  // repeated id for an overwritten ring).
  std::vector<std::string> docs;
  for (uint64_t k = 0; k < 64; ++k) docs.push_back(DeviceDocument(1 + k * kEvents));
  DeviceTraceOutput out;
  StreamInterning stream;
  size_t next = 0;
  for (auto _ : state) {
    ClearOutput(&out);
    std::string error;
    if (!parser.Parse(/*generation=*/1, docs[next++ % docs.size()], &out, &error)) {
      state.SkipWithError(error.c_str());
      break;
    }
    for (nrtprof::Event& e : out.events) AddTo(&batcher, &e, 0);
    batcher.SealAll();
    benchmark::DoNotOptimize(Ship(&batcher, &stream));
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_DeviceDocumentToWire);

}  // namespace
}  // namespace nrtprof::shim

BENCHMARK_MAIN();
