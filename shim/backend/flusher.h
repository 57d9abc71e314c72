// The backend's one thread: every `kTickNs` it fetches device events (through the arbiter),
// drains every thread's ring, turns records and device documents into events and batches
// them; the shipping core (shipping_core.h) then streams the batches to the daemon through
// the gRPC adapter (grpc_link.h): sequences, resends, the spool and the exit's decisions are
// there. While only a standing daemon's flight recorder records, batches are larger and wait
// longer (NRTPROF_RECORDER_BATCH_MS); a capture's stop (CaptureControl.flush) wakes the thread
// to send everything recorded so far at once. It never makes the program wait: the program's
// threads only hand it model files and device documents through short mutex-guarded queues
// (on calls that are not the hot path).
// At exit, FinalFlush() drains everything once more and has the core send it with
// final=true within NRTPROF_FLUSH_TIMEOUT_MS.
//
// Thread-safety: all public methods may be called from any thread. Objects of this class are
// never destroyed (the process's exit and fork may happen at any time; see backend.cc).
#ifndef NRTPROF_SHIM_BACKEND_FLUSHER_H_
#define NRTPROF_SHIM_BACKEND_FLUSHER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "shim/backend/batcher.h"
#include "shim/preload/core_state.h"
#include "shim/backend/device_profile.h"
#include "shim/backend/device_trace.h"
#include "shim/backend/event_builder.h"
#include "shim/backend/grpc_link.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/backend/shipping_core.h"
#include "shim/backend/stack_table.h"
#include "shim/backend/string_table.h"
#include "shim/backend/sys_trace_arbiter.h"
#include "shim/backend/tick_wait.h"
#include "shim/preload/tick_clock.h"

namespace nrtprof::shim {

class Flusher final : private ShippingHost {
 public:
  using Clock = std::chrono::steady_clock;
  // The wait between ticks: kTickNs, or up to kLongTickNs while every ring stays far from
  // full (tick_wait.h).
  static constexpr uint64_t kTickNs = TickWait::kTickNs;
  static constexpr uint64_t kLongTickNs = TickWait::kLongTickNs;
  // The profiler's system-trace capacity per NeuronCore: a quarter of the runtime's default
  // (32768), emptied every kTickNs, or less often only while it stays far from full at the
  // rate seen (TickWait::kHeadroom), so the same event rate fits in a quarter of the runtime's
  // memory (in the simulator ~176 bytes per event per core, allocated at each start:
  // 2.9 MB for two cores instead of 11.5). What overflows is counted (device_overwritten).
  static constexpr uint64_t kOwnMaxEventsPerCore = 1 << 13;
  static constexpr uint64_t kMaxQueuedDocumentBytes = 64ull << 20;
  // A model file ships only if it leaves room for the rest of its batch under the daemon's
  // limit on a message.
  static constexpr uint64_t kMaxModelFileBytes = ShippingCore::kMaxMessageBytes - (1ull << 20);

  // `core` outlives the flusher.
  Flusher(CoreState* core, DaemonTransport transport);
  Flusher(const Flusher&) = delete;
  Flusher& operator=(const Flusher&) = delete;

  // Starts the thread (with every signal blocked, so that signals reach the program's
  // threads) and gRPC. False, after one line on stderr, if the thread could not be made.
  bool Start();

  SysTraceArbiter* arbiter() { return &arbiter_; }
  DeviceProfiler* device_profile() { return &device_profile_; }
  // A model file the program loaded; copied (up to NRTPROF_MAX_MODEL_BYTES) now.
  void OnModelLoaded(uint64_t model_handle, const void* bytes, size_t size);
  // exit(): everything sent with final=true and acked, or the deadline.
  void FinalFlush(Clock::time_point deadline);
  // fork(), in the child: the parent's batches, stream and spool stay the parent's. True if
  // the child may be profiled on its own (the parent had not started gRPC, which a child
  // cannot use: backend.cc).
  bool AtForkChild() { return shipping_.AtForkChild(); }

 private:
  struct QueuedDocument {
    uint64_t generation;
    std::string json;
  };
  // Start()'s helper thread: asks for a long slice, then MakeThreads(); returns its error.
  static void* StartThreads(void* flusher);
  // Makes gRPC's channel (and its threads) and the flusher's thread on the calling thread;
  // pthread_create's error for the flusher, 0 if made.
  int MakeThreads();
  static void* RunThread(void* flusher);
  void Run();
  // `flush`: the daemon's latest CaptureControl.flush (shipping_core.h, "Flush").
  void Tick(uint64_t flush);
  // After main() called pthread_exit: true once the program's last thread has ended, so that
  // only the shim's and gRPC's threads keep the process alive (README: "pthread_exit").
  bool ProgramThreadsGone();
  // Records of threads that found no memory for a ring (core_state.h): DropCounters.no_memory.
  LaneCounts NoRingRecords() const;
  // An allocation failed (std::bad_alloc) while handling `lost`: counted (no_memory), and
  // said once on stderr.
  void CountNoMemory(const LaneCounts& lost);
  void OnDocument(uint64_t generation, std::string json);
  // Ends the flusher thread's wait between ticks (CoreState::flusher_wake).
  void WakeSelf();
  // The documents queued (copies of those fetched on the program's threads), in the order
  // they were fetched.
  void ParseDocuments(uint64_t now_ns);
  // A document the flusher's Poll fetched, in the runtime's buffer (SysTraceArbiter::
  // LendPolledDocuments), under the arbiter's lock: the queued ones first (the queue cannot
  // grow meanwhile: it grows under that lock), then it.
  void ParseLentDocument(uint64_t generation, std::string_view json);
  uint64_t poll_now_ns_ = 0;  // the tick's time, for ParseLentDocument
  // One document's events and clock syncs into the batcher (a refused one is counted by the
  // parser). `own_fetch`: the flusher's Poll fetched it from the profiler's own capture.
  void ParseDocument(uint64_t generation, std::string_view json, uint64_t now_ns,
                     bool own_fetch = false);
  void DrainRings(uint64_t now_ns);
  // Woken between ticks by a thread whose ring is three quarters full (the core's WakeFlusher):
  // every ring at least half full has its records copied out as they are (StagedRun), to be
  // built, encoded and sent at the next tick. That copy (~0.2 ms for a default ring's three
  // quarters) is all the wake takes from the program: with the other CPUs busy the flusher
  // runs on a hot thread's CPU, and a whole tick there (building and encoding 24,576 calls,
  // sealing and sending the batch they fill) held such a thread off its CPU 2-4 ms (issue
  // 38). False when a ring that should be copied does not fit in the room left
  // (kStagedSlots): the caller then ticks.
  bool StageFillingRings();
  // At exit, after the last drain: the polls of threads still running since their last
  // recorded ones (ThreadState::polls), which no exit destructor of theirs will write, as the
  // events such a destructor writes (Event.polls_only), while recording.
  void CountRunningThreadsPolls(uint64_t now_ns);
  // Faults in a live ring's pages ahead of its producer (event_ring.h's FaultInSlots), and
  // notes a new ring's first writes (new_thread_slots_).
  void FaultInAhead(EventRing* ring);
  // A state whose ring is empty and has no thread, onto CoreState::spare_threads if there is
  // room (kMaxSpareRings); false if not (the caller frees it).
  bool AddSpare(ThreadState* ts);
  // Unmaps the ring of a state on no list (punching its slot of the rings file) and frees it.
  void FreeRing(ThreadState* ts);
  // Makes a spare ring, faulted in for kSpareRingWarmSlots, if none is ready: the next new
  // thread's first calls then write into pages already present and mapped.
  void KeepASpareRing();
  void TakeModels();
  // Lossless mode: the spool file, with the process's Hello first, handed to the shipping
  // core; none (best effort) if the mode is best effort or the file could not be made (said
  // once on stderr).
  void OpenSpool();
  void Final(Clock::time_point deadline);

  // ShippingHost: what the shipping core needs of the process.
  // This process's Hello, with the same process_start_ns every time.
  nrtprof::Hello Hello() override;
  HostDrops Drops() override;
  // Every notice the core has so far (CoreState::notices), into `batch`.
  void SetProcessState(nrtprof::EventBatch* batch) override;
  void OnControl(const nrtprof::CaptureControl& control) override;
  void StopRecording() override;
  void Say(const std::string& line) override;

  CoreState* const core_;
  GrpcLink link_;
  SysTraceArbiter arbiter_;
  DeviceProfiler device_profile_;  // its Collect on the flusher's thread, with strings_

  // Handed over by the program's threads.
  std::mutex queue_mu_;
  std::deque<QueuedDocument> documents_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t document_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;
  uint64_t documents_dropped_ ABSL_GUARDED_BY(queue_mu_) = 0;  // their events, estimated
  std::vector<nrtprof::LoadedModel> models_ ABSL_GUARDED_BY(queue_mu_);

  // The final flush's hand-shake with the exiting thread.
  std::mutex final_mu_;
  std::condition_variable final_cv_;
  bool final_requested_ ABSL_GUARDED_BY(final_mu_) = false;
  bool final_done_ ABSL_GUARDED_BY(final_mu_) = false;
  Clock::time_point final_deadline_ ABSL_GUARDED_BY(final_mu_);
  // The daemon's flushes (CaptureControl.flush), which wake the thread: the latest asked for,
  // and the latest the thread has taken on.
  uint64_t flush_wanted_ ABSL_GUARDED_BY(final_mu_) = 0;
  uint64_t flush_taken_ ABSL_GUARDED_BY(final_mu_) = 0;
  // The daemon asked this process to record (a capture, or its flight recorder), which wakes
  // the thread: it starts the runtime's system trace before the program's calls are recorded,
  // so that no call of a window lacks its device events.
  bool record_wanted_ ABSL_GUARDED_BY(final_mu_) = false;
  // Only the daemon's flight recorder records (no capture): the batcher's larger bounds.
  std::atomic<bool> recorder_only_{false};
  // What the daemon last said: record (a capture, its flight recorder) or not. Until it says,
  // the process records. With NRTPROF_CAPTURE the process records whatever it says.
  std::atomic<bool> daemon_records_{true};
  // The daemon refused this process's credentials: nothing records, ever.
  std::atomic<bool> refused_{false};

  // The first contact: Start() waits (at most kFirstContactNs) until the daemon has answered
  // the first Hello, or there is no daemon to answer, so that a process killed right after its
  // first libnrt call is known to the daemon, which then counts what it made (process_died).
  static constexpr uint64_t kFirstContactNs = 200'000'000;
  std::mutex contact_mu_;
  std::condition_variable contact_cv_;
  bool contact_settled_ ABSL_GUARDED_BY(contact_mu_) = false;
  uint64_t contact_deadline_ns_ = 0;  // the flusher's thread only; 0 once settled

  pthread_t thread_{};  // the flusher's thread, set before it runs

  // The flusher's stack: it needs far less than the 8 MiB default, which under a limit on the
  // process's address space (ulimit -v) is 8 MiB the program cannot have.
  static constexpr size_t kThreadStackBytes = 1 << 20;

  // Flusher thread only.
  std::optional<TickConverter> clock_;  // made when the thread starts (its first rate takes 2 ms)
  StringTable strings_;
  StackTable stacks_;
  EventBuilder builder_;
  DeviceTraceParser device_parser_;
  // Each document's events, the room for up to kKeptParsedEvents kept from one to the next.
  static constexpr size_t kKeptParsedEvents = 4096;
  DeviceTraceOutput device_out_;
  Batcher batcher_;
  std::vector<ThreadState*> threads_snapshot_;
  // Records copied out of rings between ticks (StageFillingRings), oldest first, drained
  // before their rings' at the next DrainRings. The room, kStagedSlots (4 MiB: two default
  // rings' three quarters; a ring of NRTPROF_RING_EVENTS too large for it is drained by a
  // tick, as before), is allocated at the first such wake and kept: its pages stay present,
  // and the next copy does not fault them in again.
  struct StagedRun {
    ThreadState* ts;
    size_t first;  // slot in staged_
    size_t slots;
  };
  static constexpr size_t kStagedSlots = size_t{1} << 16;
  std::unique_ptr<Record[]> staged_;
  size_t staged_slots_ = 0;  // in use
  std::vector<StagedRun> staged_runs_;
  // About how many slots a new thread writes before the flusher's first look at its ring:
  // what the next spare ring gets faulted in for (twice that, 16 KiB to 1 MiB).
  uint64_t new_thread_slots_ = kSpareRingWarmSlots / 2;
  // How full the rings got since the tick before (FaultInAhead, ParseDocument), and the wait
  // it chose after the last tick.
  TickWait tick_wait_{kOwnMaxEventsPerCore};
  uint64_t wait_ns_ = kTickNs;
  LaneCounts freed_rings_dropped_;  // of rings already freed
  uint64_t process_start_ns_ = 0;
  LaneCounts no_memory_;
  bool no_memory_said_ = false;
  nrtprof::Event scratch_event_;  // built here, then encoded into the batch
  // ProgramThreadsGone: this thread's blocked signals (/proc/thread-self/status SigBlk), which
  // every thread gRPC makes inherits; empty if /proc cannot tell.
  std::string shim_signal_mask_;
  uint64_t main_thread_cpu_ns_ = 0;  // the main thread's CPU time at the last look
  // Made last: it calls back into the members above.
  ShippingCore shipping_;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_FLUSHER_H_
