// Shares the runtime's one system trace between the profiler and the program.
//
// The runtime allows one capture at a time (a second nrt_sys_trace_start fails) and hands each
// event out once, yet programs use the system trace themselves (examples/: the device timer),
// and the profiler needs it for the hardware lane. Without arbitration either the program's
// start would fail under the profiler, or one side would steal the other's events.
//
// The rule: the program's capture takes precedence and sees exactly what it would without the
// profiler; the profiler gets a copy of everything.
//   - Between nrt_init and nrt_close, while the process records (SetWanted), the profiler runs
//     its own capture (kOwn) and the flusher fetches it (Poll). While nothing records, the
//     runtime records no trace for the profiler: it costs the program nothing.
//   - The program's nrt_sys_trace_start: the profiler fetches what its capture holds, stops it
//     and forwards the call with the program's config (kApp). While the program's capture
//     runs, every document the program fetches is copied to the profiler.
//   - The program's nrt_sys_trace_stop: forwarded; then the profiler fetches the leftovers,
//     keeps a copy for the program (its next fetch receives it, as it would from the stopped
//     runtime) and restarts its own capture.
//   - The program's stop or fetch without a capture of its own: the profiler's capture steps
//     aside (fetched, stopped), the call reaches the runtime as it would without the profiler
//     (same status, same message), and the profiler's capture restarts.
//   - nrt_close: the profiler fetches what is left first (the runtime discards it at close).
// Known differences: a stashed document after the program's stop is handed out whole,
// whatever its fetch options ask; a fetch by a program that never started a capture succeeds
// (with no events) instead of failing.
//
// Every document reaches `sink` (Poll's: the lent sink, if LendPolledDocuments gave one) with
// the generation of the capture it came from (generations grow by one per successful start),
// on the thread that fetched it. Thread-safe: one mutex, held across the runtime's calls (and
// the lent sink's); never on the program's hot path.
#ifndef NRTPROF_SHIM_BACKEND_SYS_TRACE_ARBITER_H_
#define NRTPROF_SHIM_BACKEND_SYS_TRACE_ARBITER_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"

namespace nrtprof::shim {

// The runtime's system-trace functions, as resolved in the loaded libnrt.
struct SysTraceFunctions {
  NRT_STATUS (*config_allocate)(nrt_sys_trace_config_t** options) = nullptr;
  void (*config_free)(nrt_sys_trace_config_t* options) = nullptr;
  void (*config_set_max_events_per_nc)(nrt_sys_trace_config_t* options, uint64_t n) = nullptr;
  NRT_STATUS (*start)(nrt_sys_trace_config_t* options) = nullptr;
  NRT_STATUS (*stop)() = nullptr;
  NRT_STATUS (*fetch_events)(char** buffer, size_t* written_size,
                             const nrt_sys_trace_fetch_options_t* options) = nullptr;
  void (*buffer_free)(char* buffer) = nullptr;
  // To ask for some event types only; a runtime without them captures every type.
  NRT_STATUS (*get_event_types)(const char*** event_types, size_t* count) = nullptr;
  void (*free_event_types)(const char** event_types, size_t count) = nullptr;
  NRT_STATUS(*config_set_event_type)
  (nrt_sys_trace_config_t* options, const char* event_type, bool enabled) = nullptr;

  // Everything the profiler's own capture needs.
  bool CanCapture() const {
    return config_allocate && config_free && config_set_max_events_per_nc && start && stop &&
           fetch_events && buffer_free;
  }
};

class SysTraceArbiter {
 public:
  using ResolveFn = std::function<SysTraceFunctions()>;
  using DocumentSink = std::function<void(uint64_t generation, std::string json)>;
  // A document Poll fetched, lent in the runtime's own buffer for the call only (freed after
  // it), on the polling thread, with the arbiter's lock held: it must not call the arbiter.
  using LentDocumentSink = std::function<void(uint64_t generation, std::string_view json)>;
  // Whether the profiler's capture wants the runtime's events of a type (by its name).
  using TypeFilter = bool (*)(const char* event_type);

  // `resolve` is asked for the functions at each nrt_init and whenever they are needed before.
  // The profiler's own capture asks for the types `wants_type` accepts (null: all of them).
  SysTraceArbiter(uint64_t max_events_per_nc, ResolveFn resolve, DocumentSink sink,
                  TypeFilter wants_type = nullptr);
  SysTraceArbiter(const SysTraceArbiter&) = delete;
  SysTraceArbiter& operator=(const SysTraceArbiter&) = delete;

  // A successful nrt_init: the profiler's capture starts (if wanted).
  void OnRuntimeInit();
  // Whether the process records (initially true). Off: the profiler's capture is fetched (its
  // events went with what was recorded) and stopped; on: it starts again. The program's own
  // capture is not touched either way.
  void SetWanted(bool wanted);
  // The flusher: fetch the profiler's capture; with `final` (process exit), the program's too.
  void Poll(bool final);
  // From now on Poll's documents go to `sink`, lent, instead of copied to the DocumentSink
  // (issue 38: the copy of every fetched document was ~5% of the flusher at 10,000 async
  // executions a second). Documents fetched on other occasions still go to the DocumentSink.
  void LendPolledDocuments(LentDocumentSink sink);
  // Around the real nrt_close; the lock is held from the first to the second.
  void BeforeRuntimeClose();
  void AfterRuntimeClose();

  // The program's calls.
  NRT_STATUS AppStart(nrt_sys_trace_config_t* options);
  NRT_STATUS AppStop();
  NRT_STATUS AppFetch(char** buffer, size_t* written_size,
                      const nrt_sys_trace_fetch_options_t* options);
  // True if `buffer` came from the stash (and is now freed); false: the runtime's.
  bool AppBufferFree(char* buffer);
  // A document the sink is done with: its memory is kept for the next fetch's copy (one, up to
  // kMaxSpareBytes), so that a steady stream of documents does not allocate a fresh buffer of
  // a few hundred KiB each time (glibc then grows and trims the thread's heap: mprotect and
  // page faults on every fetch).
  void Recycle(std::string document);
  static constexpr size_t kMaxSpareBytes = 8u << 20;

  // Around fork(): no runtime call of the arbiter's is in progress while the process forks.
  void LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.lock(); }
  void UnlockAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.unlock(); }

  bool own_capture_running();
  // The program's own capture is running: the profiler sees its events only as it fetches them.
  bool app_capture_running();
  uint64_t generation();

 private:
  enum class State { kIdle, kOwn, kApp };

  const SysTraceFunctions& FunctionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartOwnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fetches everything pending into the sink (and *copy); false if the fetch failed. With
  // `lend`, to the lent sink if there is one.
  bool FetchAllLocked(std::string* copy, bool lend = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Own capture out of the way: fetched and stopped. True if it was running.
  bool SuspendOwnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_events_per_nc_;
  const ResolveFn resolve_;
  const DocumentSink sink_;
  const TypeFilter wants_type_;
  std::mutex mu_;
  LentDocumentSink lent_sink_ ABSL_GUARDED_BY(mu_);
  bool resolved_ ABSL_GUARDED_BY(mu_) = false;
  SysTraceFunctions fns_ ABSL_GUARDED_BY(mu_);
  bool runtime_up_ ABSL_GUARDED_BY(mu_) = false;
  bool wanted_ ABSL_GUARDED_BY(mu_) = true;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  std::string spare_ ABSL_GUARDED_BY(mu_);  // Recycle()'s
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool has_stash_ ABSL_GUARDED_BY(mu_) = false;
  std::string stash_ ABSL_GUARDED_BY(mu_);
  std::set<char*> handed_out_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_SYS_TRACE_ARBITER_H_
