// The core of libnrtprof_shim.so: process-wide state, lazy start of the backend, per-thread
// state and the one shape every interposed call takes (ApiCall). Used by interpose.cc (the
// nrt_* wrappers and annotation ranges) and dlsym_hook.cc.
//
// Constraints, because the core is preloaded into every process a profiled command starts:
// no C++ runtime (no operator new, no exceptions, no guarded statics), no thread, socket or
// file until the first libnrt call, and on the hot path no lock, no allocation and no system
// call but the clock. Everything here is constant-initialized so that it works before the
// core's own constructors run (another library's constructor may call dlsym or libnrt first).
#ifndef NRTPROF_SHIM_PRELOAD_CORE_H_
#define NRTPROF_SHIM_PRELOAD_CORE_H_

#include <stdint.h>

#include <atomic>

#include "common/clock.h"
#include "shim/preload/core_state.h"
#include "shim/preload/record.h"
#include "shim/preload/tick_clock.h"

namespace nrtprof::shim::core {

#define NRTPROF_TLS __thread __attribute__((tls_model("initial-exec")))
#define NRTPROF_HIDDEN __attribute__((visibility("hidden")))

// Lifecycle of the shim in this process.
enum Phase : int {
  kUninit = 0,       // nothing read yet
  kConfigured = 1,   // environment read; rings may exist; backend not loaded
  kStarted = 2,      // backend running
  kDisabled = 3,     // NRTPROF_DISABLE=1, or the backend could not load: pass-through
  kExited = 4,       // the exit flush ran: pass-through
  kForkedChild = 5,  // a child forked after the parent started the backend: pass-through
};

extern CoreState g_core NRTPROF_HIDDEN;
extern std::atomic<int> g_phase NRTPROF_HIDDEN;
extern std::atomic<const BackendApi*> g_backend NRTPROF_HIDDEN;
extern std::atomic<void*> g_real[kNumApiFunctions] NRTPROF_HIDDEN;
// The handle through which the program's dlsym last found a wrapped function.
extern std::atomic<void*> g_nrt_handle NRTPROF_HIDDEN;

extern NRTPROF_TLS ThreadState* t_state NRTPROF_HIDDEN;

// What a recorded call needs of its thread, in one cache line of the thread's own storage
// (event_ring.h's RingProducer says why): the producer of the thread's ring, set with t_state
// and cleared with it, and the thread's block of correlation ids.
struct alignas(64) HotThreadState {
  RingProducer producer;
  uint64_t next_correlation_id = 0;  // the block of ids: next, and one past the last
  uint64_t correlation_block_end = 0;
};
static_assert(sizeof(HotThreadState) == 64, "one cache line");
extern NRTPROF_TLS HotThreadState t_hot NRTPROF_HIDDEN;

// Non-zero while this thread is inside an interposed call: nested calls (the runtime calling
// its own exported functions) pass straight through.
extern NRTPROF_TLS int t_in_call NRTPROF_HIDDEN;

// This thread's completion-query polls not yet carried by a recorded poll (core_state.h's
// PollState). What a thread polled after its last recorded poll is written when the thread ends
// or calls exit (RecordPollTally); that of a thread still running at the process's exit is
// counted by the exit's final drain (ThreadState::polls).
extern NRTPROF_TLS PollState t_polls NRTPROF_HIDDEN;

// One more poll of `count`'s function that saw nothing new; returns the count. A load and a
// store, not a read-modify-write: only this thread writes it (the exit's final drain may read).
inline uint64_t CountPoll(std::atomic<uint64_t>* count) {
  const uint64_t n = count->load(std::memory_order_relaxed) + 1;
  count->store(n, std::memory_order_relaxed);
  return n;
}

// This thread's polls of `count`'s function for a record: the count, then zero.
inline uint64_t TakePolls(std::atomic<uint64_t>* count) {
  const uint64_t n = count->load(std::memory_order_relaxed);
  count->store(0, std::memory_order_relaxed);
  return n;
}

// Writes this thread's polls not yet carried by a recorded poll (t_polls) into its ring, one
// record per function marked kRecordPollsOnly, and zeroes them: at the thread's exit and the
// process's (core.cc), never on the hot path. A ring without room counts them as one dropped
// record each; without a backend or while not recording they are left alone.
void RecordPollTally() NRTPROF_HIDDEN;

// At a thread's first unrecorded poll since its last record (the count going from 0 to 1): a
// thread that has recorded nothing yet, and so has no ring and no exit destructor, gets them
// now, so that its exit writes the polls it makes (a thread that only polls). Cold; a thread
// that has its ring returns at once.
void NotePolling() NRTPROF_HIDDEN;

// t_state of a thread whose exit destructor ran: record nothing more.
inline ThreadState* const kDeadThread = reinterpret_cast<ThreadState*>(1);
// t_state of a thread that found no memory for a ring: its records are counted as no_memory.
inline ThreadState* const kNoRingThread = reinterpret_cast<ThreadState*>(2);
// Whether t_state is a thread's state (neither null nor one of the two above).
inline bool HasRing(const ThreadState* ts) { return reinterpret_cast<uintptr_t>(ts) > 2; }

// The libc dlsym (resolved once through dlvsym); null only if libc has none.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn RealDlsym() NRTPROF_HIDDEN;
// NRTPROF_DISABLE=1, read without allocating (the dlsym hook needs it before configuration).
bool DisabledByEnvironment() NRTPROF_HIDDEN;

// The runtime's function `f`, resolved once; null (reported once on stderr) if absent.
void* ResolveReal(ApiFunction f) NRTPROF_HIDDEN;
inline void* RealAddress(ApiFunction f) {
  void* p = g_real[f].load(std::memory_order_acquire);
  return __builtin_expect(p != nullptr, 1) ? p : ResolveReal(f);
}
#define NRTPROF_REAL(f, fn) reinterpret_cast<decltype(&fn)>(::nrtprof::shim::core::RealAddress(f))

// Writes `line` ("nrtprof: ...\n") on stderr and keeps it, without the prefix and the
// newline, as one of the process's notices, which the capture shows (CoreState::notices).
// Allocation-free; safe in the dlsym hook.
void SayNotice(const char* line) NRTPROF_HIDDEN;

// Slow paths of the lazy start; true if the phase they reach allows it.
bool ConfigureSlow() NRTPROF_HIDDEN;
bool StartSlow() NRTPROF_HIDDEN;

// Environment read and recording possible (rings may be created).
inline bool EnsureConfigured() {
  const int phase = g_phase.load(std::memory_order_acquire);
  if (__builtin_expect(phase == kStarted || phase == kConfigured, 1)) return true;
  return phase == kUninit ? ConfigureSlow() : false;
}

// Backend running (started now if this is the first libnrt call).
inline bool EnsureStarted() {
  const int phase = g_phase.load(std::memory_order_acquire);
  if (__builtin_expect(phase == kStarted, 1)) return true;
  if (phase == kDisabled || phase == kExited) return false;
  return StartSlow();
}

// The backend if it is already running; never starts it.
inline const BackendApi* RunningBackend() {
  if (g_phase.load(std::memory_order_acquire) != kStarted) return nullptr;
  return g_backend.load(std::memory_order_acquire);
}

// A record of `kind` lost outside any live ring (core_state.h's lost_calls, lost_ranges; with
// `no_ring`, no_ring_calls and no_ring_ranges).
inline void CountLostRecord(RecordKind kind, bool no_ring = false) {
  if (no_ring) {
    (kind == RecordKind::kRange ? g_core.no_ring_ranges : g_core.no_ring_calls)
        .fetch_add(1, std::memory_order_relaxed);
  } else {
    (kind == RecordKind::kRange ? g_core.lost_ranges : g_core.lost_calls)
        .fetch_add(1, std::memory_order_relaxed);
  }
  // Also where a reader of the rings file finds it after the process died.
  if (RingsFileHeader* h = g_core.rings_header.load(std::memory_order_acquire)) {
    h->lost[static_cast<size_t>(kind) % kRingsKinds].fetch_add(1, std::memory_order_relaxed);
  }
}

// `kind`: what the caller was about to record, counted as lost if the thread cannot record.
ThreadState* CreateThreadState(RecordKind kind) NRTPROF_HIDDEN;

// This thread's state, created at its first event; null if it cannot record.
inline ThreadState* GetThreadState(RecordKind kind) {
  ThreadState* ts = t_state;
  if (__builtin_expect(HasRing(ts), 1)) return ts;
  if (ts == kDeadThread || ts == kNoRingThread) {
    CountLostRecord(kind, /*no_ring=*/ts == kNoRingThread);
    return nullptr;
  }
  return CreateThreadState(kind);
}

// Fills the record's frames with the program's call stack, at most `depth` frames.
void CaptureStack(Record* record, uint32_t depth) NRTPROF_HIDDEN;

// The next correlation id of this thread. Ids are handed to threads in blocks, so the hot path
// takes no shared cache line: unique in the process, increasing on each thread.
inline uint64_t NextCorrelationId(HotThreadState* hot) {
  if (__builtin_expect(hot->next_correlation_id == hot->correlation_block_end, 0)) {
    hot->next_correlation_id =
        g_core.next_correlation_id.fetch_add(kCorrelationBlock, std::memory_order_relaxed);
    hot->correlation_block_end = hot->next_correlation_id + kCorrelationBlock;
  }
  return hot->next_correlation_id++;
}

// This thread's ring producer, the thread's state created at its first event; null if it
// cannot record (as GetThreadState).
inline RingProducer* GetProducer(RecordKind kind) {
  RingProducer* producer = &t_hot.producer;
  if (__builtin_expect(producer->ring() != nullptr, 1)) return producer;
  return GetThreadState(kind) != nullptr ? producer : nullptr;
}

inline uint64_t Ticks() { return ReadTicks(g_core.tick_source); }

// One interposed call: reentrancy guard, a reserved record stamped at entry, End() stamps the
// exit and hands the record for the call's fields, Commit() publishes it. The guard is held
// for the object's life so that the runtime's own calls to exported functions nest.
// `name_room`: bytes of a name the call will store (NameRoom of the name argument), 0 if none.
// A thread's ring is three quarters full: the flusher drains now rather than at
// its next tick (CoreState::flusher_wake). Keeps errno.
void WakeFlusher() NRTPROF_HIDDEN;

class ApiCall {
 public:
  // Inlined into each wrapper: out of line, the constructor's call saved and restored five
  // registers around work of a few nanoseconds (issue 38: the synchronous calls' +9..+11 ns).
  __attribute__((always_inline)) explicit ApiCall(ApiFunction f, uint32_t name_room = 0) {
    if (t_in_call != 0) return;
    t_in_call = 1;
    owner_ = true;
    if (!EnsureStarted() || g_core.recording.load(std::memory_order_relaxed) == 0) return;
    RingProducer* producer = GetProducer(RecordKind::kApiCall);
    if (producer == nullptr) return;
    const uint32_t frames = g_core.config.stack_depth;
    const uint32_t slots = RecordSlots(frames, name_room);
    Record* r = producer->TryReserve(slots);
    if (r == nullptr) {
      producer->CountDrop(RecordKind::kApiCall);
      return;
    }
    r->Clear(RecordKind::kApiCall, slots);
    r->api = f;
    r->correlation_id = NextCorrelationId(&t_hot);
    if (frames != 0) CaptureStack(r, frames);
    producer_ = producer;
    record_ = r;
    name_room_ = name_room;
    r->start_ticks = Ticks();
  }
  ~ApiCall() {
    if (owner_) t_in_call = 0;
  }
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;

  // Stamps the exit; the record to fill, or null if this call is not recorded.
  Record* End() {
    if (record_ != nullptr) record_->end_ticks = Ticks();
    return record_;
  }
  // Copies the call's name (as much as the constructor made room for).
  void SetName(const char* name) { record_->SetName(name, name_room_); }
  void Commit(int32_t status) {
    Record* r = record_;
    r->status = status;
    // The slots the record really used: its frames and its name.
    r->slots = static_cast<uint8_t>(RecordSlots(r->stack_depth, r->name_len));
    if (producer_->Commit(r)) WakeFlusher();
    record_ = nullptr;
  }
  // True if this call is the outermost interposed call on its thread.
  bool outermost() const { return owner_; }

 private:
  bool owner_ = false;
  uint32_t name_room_ = 0;
  RingProducer* producer_ = nullptr;
  Record* record_ = nullptr;
};

inline uint64_t Handle(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace nrtprof::shim::core

#endif  // NRTPROF_SHIM_PRELOAD_CORE_H_
