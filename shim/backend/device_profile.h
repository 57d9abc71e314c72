// The runtime's device profile of each loaded model (nrt/nrt_profile.h), read into hardware-lane
// events: what happens inside an execution — the engines' ops and the DMA moving its inputs
// and outputs — which the system trace does not carry. Opt-in (NRTPROF_DEVICE_PROFILE=1,
// `nrtprof run --device-profile`).
//
//   - After each successful nrt_load the profiler starts the runtime's profile of that model
//     into a file of its own, in a private folder (mkdtemp, 0700) made at the first load.
//   - Every period (1 s by default; the flusher's Collect), and before nrt_unload, nrt_close and the
//     process's exit, it stops the profile, reads the file, deletes it and (but at exit,
//     unload and close) starts it again.
//   - The program's own nrt_profile_start/stop take precedence: the profiler stops and
//     collects its profile of that model first, forwards the program's call with its
//     filename (same status, same message as without the profiler), and restarts its own
//     after the program's stop. The program's file is the program's: never read.
//   - The simulator writes JSON (device_profile_reader.h), parsed on the flusher thread into
//     EVENT_DEVICE_OP (ops) and EVENT_DEVICE_DMA (I/O DMA) events with the execution's exec_id
//     and core, on the device clock; the daemon puts each inside the execution the system
//     trace gave that exec_id on that core (docs/trace_format.md). A malformed profile is
//     counted as dropped (device_malformed). A file that is not JSON (the real runtime writes
//     NTFF, binary) is not decoded: it is left in the folder, said once as a notice the capture
//     shows, counted (unread_files), and the profiler restarts no profile after it.
//
// An execution that ends in the instant between a stop and the restart (every period) is
// not in any profile: it has no ops inside (the runtime cannot profile one model twice at
// once, so the two cannot overlap).
//
// Thread-safety: the program's calls (OnModelLoaded, BeforeModelUnload, BeforeRuntimeClose,
// AppStart, AppStop) and Collect may come from any thread; one mutex is held across the
// runtime's calls, never on the program's hot path. Collect and the counters: the flusher
// thread only (it owns the StringTable).
#ifndef NRTPROF_SHIM_BACKEND_DEVICE_PROFILE_H_
#define NRTPROF_SHIM_BACKEND_DEVICE_PROFILE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "nrt/nrt.h"
#include "shim/preload/core_state.h"
#include "shim/backend/device_profile_reader.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/backend/string_table.h"

namespace nrtprof::shim {

// The runtime's profiling functions, as resolved in the loaded libnrt.
struct DeviceProfileFunctions {
  NRT_STATUS (*start)(nrt_model_t* model, const char* filename) = nullptr;
  NRT_STATUS (*stop)(const char* filename) = nullptr;
};

// The functions in the libnrt the program loaded its models with (which may be out of reach of
// a global look-up: dlopen()ed RTLD_LOCAL), quietly null where it has none.
DeviceProfileFunctions ResolveDeviceProfile(const CoreState* core);

class DeviceProfiler {
 public:
  static constexpr uint64_t kDefaultPeriodNs = 1'000'000'000;
  // Profiles read and not yet parsed; past this they are dropped, counted (device_overwritten).
  static constexpr uint64_t kMaxQueuedBytes = 64ull << 20;

  using ResolveFn = std::function<DeviceProfileFunctions()>;
  // One line ("nrtprof: ...\n") for stderr and the capture's notices.
  using NoticeFn = std::function<void(const std::string& line)>;

  // `strings` is the flusher's (used by Collect only); `temp_root` holds the private folder.
  DeviceProfiler(ResolveFn resolve, NoticeFn notice, StringTable* strings,
                 std::string temp_root = "");
  DeviceProfiler(const DeviceProfiler&) = delete;
  DeviceProfiler& operator=(const DeviceProfiler&) = delete;

  // A successful nrt_init: the runtime's functions are looked up again at the next need.
  void OnRuntimeInit();
  // After a successful nrt_load: the profiler's profile of `model` starts.
  void OnModelLoaded(nrt_model_t* model);
  // Before nrt_unload and nrt_close: the profiler's profiles of `model` (of every model) are
  // collected and forgotten.
  void BeforeModelUnload(nrt_model_t* model);
  void BeforeRuntimeClose();
  // The program's calls.
  NRT_STATUS AppStart(nrt_model_t* model, const char* filename);
  NRT_STATUS AppStop(const char* filename);

  // Before the flusher starts: how often Collect reads the profiles; 0: only at unload, close
  // and exit.
  void set_period_ns(uint64_t ns) { period_ns_ = ns; }

  // The flusher: every period (or with `final`, at exit: then without restarting, and the
  // folder is removed if empty) the profiles are collected; then what was read is parsed and
  // each event handed to `sink` (only while `capturing`).
  void Collect(uint64_t now_ns, bool final, bool capturing,
               absl::FunctionRef<void(nrtprof::Event&)> sink);

  // Flusher thread: events of profiles refused as malformed; profiles dropped unparsed.
  uint64_t malformed_total() const { return malformed_total_; }
  uint64_t overflow_total();
  // Files left unread (not JSON).
  uint64_t unread_files();
  // The private folder ("" until the first load).
  std::string folder();

  // Around fork(): no runtime call of the profiler's is in progress while the process forks.
  void LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.lock(); }
  void UnlockAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.unlock(); }

 private:
  struct Model {
    std::string own_file;  // the profiler's profile in progress; empty: none
    std::string app_file;  // the program's profile in progress; empty: none
  };

  const DeviceProfileFunctions& FunctionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartOwnLocked(nrt_model_t* model, Model* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the profiler's profile of the model, starts it again on `restart` (null: not), and
  // queues the stopped file's text.
  void CollectOwnLocked(Model* m, nrt_model_t* restart = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadFileLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Parse(const std::string& text, bool capturing,
             absl::FunctionRef<void(nrtprof::Event&)> sink);

  const ResolveFn resolve_;
  const NoticeFn notice_;
  StringTable* const strings_;
  const std::string temp_root_;

  std::mutex mu_;
  bool resolved_ ABSL_GUARDED_BY(mu_) = false;
  DeviceProfileFunctions fns_ ABSL_GUARDED_BY(mu_);
  std::map<nrt_model_t*, Model> models_ ABSL_GUARDED_BY(mu_);  // loaded, by handle
  std::string folder_ ABSL_GUARDED_BY(mu_);
  uint64_t next_file_ ABSL_GUARDED_BY(mu_) = 0;
  // False once a profile was not JSON: the runtime is not the simulator, and its files would
  // pile up unread.
  bool restart_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t unread_files_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::string> documents_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t overflow_total_ ABSL_GUARDED_BY(mu_) = 0;

  // Flusher thread only (the period is set before it starts).
  uint64_t period_ns_ = kDefaultPeriodNs;
  uint64_t next_collect_ns_ = 0;
  uint64_t malformed_total_ = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_DEVICE_PROFILE_H_
