// What the shim's two libraries share.
//
// libnrtprof_shim.so (the "core", LD_PRELOADed into every process) holds the interposed
// functions, the dlsym hook, the per-thread rings and this CoreState; it depends on libc only,
// so that the shells, compilers and interpreters a profiled command starts pay almost nothing.
// At the first libnrt call it dlopen()s libnrtprof_shim_backend.so (RTLD_LOCAL, next to the
// core) with gRPC, protobuf and libunwind behind it, calls nrtprof_backend_start(&core) and
// from then on calls it through the BackendApi it returns. Both are built from one tree:
// kShimAbiVersion guards against mixing builds.
//
// Thread-safety: as annotated per field. The core owns every object here; the backend may
// free retired ThreadStates (unlinked under registry_mu).
#ifndef NRTPROF_SHIM_PRELOAD_CORE_STATE_H_
#define NRTPROF_SHIM_PRELOAD_CORE_STATE_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "common/rings_file.h"
#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"
#include "shim/preload/config.h"
#include "shim/preload/event_ring.h"
#include "shim/preload/record.h"
#include "shim/preload/tick_clock.h"

namespace nrtprof::shim {

using ::nrtprof::RingsFileHeader;

inline constexpr uint32_t kShimAbiVersion = 10;
inline constexpr const char kShimVersion[] = "0.1.0";
inline constexpr const char kBackendLibraryName[] = "libnrtprof_shim_backend.so";
inline constexpr const char kBackendStartSymbol[] = "nrtprof_backend_start";
// Under a limit on the address space (ulimit -v), the room the profiler leaves free for gRPC
// and the program: the backend starts only with this much free beside two rings (backend.cc
// says why), and a thread's ring is mapped only if this much stays free after it (core.cc).
inline constexpr uint64_t kAddressSpaceKept = 640ull << 20;

// Correlation ids a thread takes from CoreState::next_correlation_id at a time.
inline constexpr uint64_t kCorrelationBlock = 4096;

// Slots of a new ring faulted in at the thread's first event (16 KiB); the flusher faults in
// more ahead of what the thread writes.
inline constexpr uint64_t kInitialFaultInSlots = 256;

// Rings kept ready for the next threads (CoreState::spare_threads): the flusher keeps one made
// ahead, faulted in for twice what the last new threads wrote before its first look at them,
// from kInitialFaultInSlots up to kSpareRingWarmSlots (1 MiB: a burst of 10,000 calls and
// then some), and keeps up to kMaxSpareRings rings of ended threads instead of freeing them. A
// new thread that takes one finds its first pages present and mapped: on the project's VMs
// each page a thread's first calls had to fault in cost it 9 us (bench/README.md).
inline constexpr uint64_t kSpareRingWarmSlots = 16384;
inline constexpr uint32_t kMaxSpareRings = 2;

// Notices the core keeps for the capture (CoreState::notices), and the bytes of each.
inline constexpr uint32_t kMaxNotices = 8;
inline constexpr uint32_t kNoticeBytes = 1024;

// Annotation ranges open on one thread; deeper ones are counted but not kept.
inline constexpr uint32_t kMaxRangeDepth = 64;

struct RangeFrame {
  uint64_t start_ticks;
  uint8_t flags;
  uint8_t name_len;
  char name[kRecordNameBytes];
};

// The async API's completion queries, which programs poll millions of times a second: only a
// poll that saw something new is recorded, and it carries how many of its thread's polls of its
// function came since the last recorded one (interpose.cc). One per thread, in its thread-local
// storage (core.h's t_polls). Only the thread writes it; its two counts are atomics, loaded and
// stored (never a read-modify-write, so as cheap as a plain increment), because the exit's final
// drain reads them for threads still running (ThreadState::polls).
struct PollState {
  std::atomic<uint64_t> is_completed{0};  // nrta_is_completed polls since the last recorded one
  std::atomic<uint64_t> get_sequence{0};  // nrta_get_sequence polls since the last recorded one
  uint64_t last_sequence = 0;  // what the last recorded nrta_get_sequence returned
};

// One application thread that recorded an event. Allocated at its first event (or taken from
// CoreState::spare_threads); the thread writes only its ring and range stack. At thread exit a
// pthread key destructor sets `retired`; the flusher then drains the ring, unlinks the state,
// and either empties the ring and keeps the state as a spare, or unmaps the ring and frees
// the state.
struct ThreadState {
  EventRing* ring;          // mmap()ed (ring_bytes) at the thread's first event; owned here
  size_t ring_bytes;
  int64_t ring_offset;      // where the ring is in the rings file; -1: private memory
  uint32_t tid;
  uint32_t range_depth;     // may exceed kMaxRangeDepth
  std::atomic<int> retired; // release-stored by the owning thread's exit
  ThreadState* next;        // CoreState::threads list, guarded by registry_mu
  // The thread's PollState (thread-local), for the exit's final drain to count the polls of a
  // thread still running then, which no exit destructor of its own will write. Set when the
  // thread takes the state, cleared by its exit destructor before its thread-local storage
  // goes; both under registry_mu, and read under it.
  PollState* polls;
  RangeFrame ranges[kMaxRangeDepth];
};

struct CoreState {
  uint32_t abi_version = kShimAbiVersion;
  Config config;  // set once before the backend starts; read-only after
  // What records' ticks are (tick_clock.h); set with config.
  TickSource tick_source = TickSource::kMonotonic;

  // The libc dlsym the hook forwards to: lookups that must not come back to the shim.
  void* (*real_dlsym)(void* handle, const char* name) = nullptr;
  // The runtime's functions (the wrapped ones, indexed by ApiFunction), once resolved.
  std::atomic<void*>* real_functions = nullptr;

  pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
  ThreadState* threads = nullptr;  // guarded by registry_mu
  // States with an empty ring and no thread, for the next threads' first events (linked by
  // `next`; kSpareRingWarmSlots). Guarded by registry_mu.
  ThreadState* spare_threads = nullptr;
  uint32_t spare_count = 0;
  // Made by the core for the flusher: a state with a new, empty ring (a slot of the rings file,
  // or private memory), on no list; null if there is no memory for one. Any thread.
  ThreadState* (*new_spare_thread)() = nullptr;

  // Records lost outside any live ring, by kind: threads past their exit, ranges nested deeper
  // than kMaxRangeDepth. Part of DropCounters.ring_full.
  std::atomic<uint64_t> lost_calls{0};
  std::atomic<uint64_t> lost_ranges{0};
  // Records of threads that found no memory for a ring, by kind. Part of
  // DropCounters.no_memory. (Both kinds also add to the rings file's lost counts.)
  std::atomic<uint64_t> no_ring_calls{0};
  std::atomic<uint64_t> no_ring_ranges{0};
  // Wrappers record while this is 1 (relaxed loads on the hot path).
  std::atomic<int> recording{0};
  // 1 when the backend runs the runtime's device profiles (NRTPROF_DEVICE_PROFILE=1): the
  // nrt_load, nrt_unload and nrt_profile_* wrappers then call it (relaxed loads).
  std::atomic<int> device_profile{0};
  // The core's SayNotice (core.h), for the backend's notices.
  void (*say_notice)(const char* line) = nullptr;
  std::atomic<uint64_t> next_correlation_id{1};
  // Set by the backend when NRTPROF_STACKS asks for stacks: libunwind's unw_backtrace.
  std::atomic<int (*)(void**, int)> backtrace{nullptr};
  // The core's own code, so stacks start at the program's frame, not the wrapper's.
  uintptr_t core_text_begin = 0;
  uintptr_t core_text_end = 0;

  // What the shim could not do in this process (a libnrt it cannot record), one line each
  // without the "nrtprof: " prefix: the backend sends them with every batch so the capture
  // says so too (EventBatch.notices). A writer reserves an index, writes the text, then sets
  // notice_ready[index] (release); readers read only ready ones. Notices past kMaxNotices
  // are only said on stderr.
  char notices[kMaxNotices][kNoticeBytes] = {};

  // The rings file (common/rings_file.h), made when the process first needs the shim: its
  // descriptor (-1 if it could not be made: rings are then private memory) and header. Set
  // once, under the start mutex, before any ring exists.
  int rings_fd = -1;
  std::atomic<RingsFileHeader*> rings_header{nullptr};
  pthread_mutex_t rings_mu = PTHREAD_MUTEX_INITIALIZER;  // handing out ring slots
  std::atomic<uint32_t> notices_reserved{0};
  std::atomic<uint32_t> notice_ready[kMaxNotices] = {};

  // The flusher's wake-up word (a futex): bumped, and the flusher woken, by a thread whose ring
  // is filling (WakeFlusher, core.h) and by the backend's own requests; the flusher sleeps on
  // it between ticks.
  std::atomic<uint32_t> flusher_wake{0};
};

// What the backend does for the core. Every function is safe to call from any application
// thread; none throws.
struct BackendApi {
  uint32_t abi_version;
  // After a successful nrt_init: start the profiler's system trace.
  void (*on_runtime_init)();
  // Around the real nrt_close: the first fetches the device events the runtime would discard
  // and holds off the flusher's fetches until the second.
  void (*before_runtime_close)();
  void (*after_runtime_close)();
  // After a successful nrt_load (and while recording): ship the model file once.
  void (*on_model_loaded)(uint64_t model_handle, const void* bytes, size_t size);
  // The program's own nrt_sys_trace_* calls, arbitrated against the profiler's capture.
  NRT_STATUS (*sys_trace_start)(nrt_sys_trace_config_t* options);
  NRT_STATUS (*sys_trace_stop)();
  NRT_STATUS (*sys_trace_fetch_events)(char** buffer, size_t* written_size,
                                       const nrt_sys_trace_fetch_options_t* options);
  // True if `buffer` was one the backend handed out (and is now freed).
  bool (*sys_trace_buffer_free)(char* buffer);
  // With CoreState::device_profile: after a successful nrt_load and before nrt_unload, the
  // profiler's device profile of the model starts, and is collected; the program's own
  // nrt_profile_start/stop are arbitrated against it (device_profile.h).
  void (*on_model_profiled)(nrt_model_t* model);
  void (*before_model_unload)(nrt_model_t* model);
  NRT_STATUS (*profile_start)(nrt_model_t* model, const char* filename);
  NRT_STATUS (*profile_stop)(const char* filename);
  // exit(): drain, fetch, send the final batch, wait for its ack; bounded by
  // NRTPROF_FLUSH_TIMEOUT_MS.
  void (*exit_flush)();
  // Around fork(): the first keeps the flusher out of the runtime while the process forks
  // (a child must not inherit a runtime lock held by a thread it does not have).
  void (*atfork_prepare)();
  void (*atfork_parent)();
  // In the child of fork(): forget the parent's threads and connection without touching
  // them. Returns true if the child may start the backend again at its next libnrt call.
  bool (*atfork_child)();
};

// Returns null after one line on stderr saying why the backend declines the process.
using BackendStartFn = const BackendApi* (*)(CoreState* core);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_CORE_STATE_H_
