// The backend's one thread: every `kTickNs` it fetches device events (through the arbiter),
// drains every thread's ring, turns records and device documents into events, batches them
// and streams them to the daemon, reconnecting with backoff. It never makes the program wait:
// the program's threads only hand it model files and device documents through short
// mutex-guarded queues (on calls that are not the hot path).
//
// With no daemon, pending events are kept up to a bound and then counted as dropped
// (daemon_away). Batches a broken stream did not acknowledge are sent again on the next one,
// with their sequence numbers (the process's), and the daemon ignores those it has. Every
// batch says how many events the process has sent so far, so the daemon counts what never
// reached it. At exit, FinalFlush() sends everything with final=true and waits for the ack
// within NRTPROF_FLUSH_TIMEOUT_MS; a stream too far behind for that gets the final batch
// overtaken by an event-less copy on a connection of its own.
//
// Thread-safety: all public methods may be called from any thread. Objects of this class are
// never destroyed (the process's exit and fork may happen at any time; see backend.cc).
#ifndef NRTPROF_SHIM_FLUSHER_H_
#define NRTPROF_SHIM_FLUSHER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/socket_trust.h"
#include "common/spool_file.h"
#include "shim/batcher.h"
#include "shim/collector_stream.h"
#include "shim/core_state.h"
#include "shim/device_trace.h"
#include "shim/event_builder.h"
#include "shim/proto_lite/nrtprof.grpc.pb.h"
#include "shim/stack_table.h"
#include "shim/string_table.h"
#include "shim/sys_trace_arbiter.h"
#include "shim/tick_clock.h"

namespace nrtprof::shim {

// How the flusher reaches the daemon: plaintext on a unix socket, or TLS on TCP, verifying the
// daemon with `ca_pem` and sending `token` as "authorization: Bearer TOKEN" and/or presenting
// a client certificate.
struct DaemonTransport {
  std::string target;  // a gRPC target: unix:/path, HOST:PORT, dns:///HOST:PORT
  bool tls = false;
  std::string ca_pem;
  std::string token;                // empty: none
  std::string cert_pem, key_pem;    // empty: no client certificate
  // A unix socket: run before each new stream; OK to open it, NotFound to wait quietly (no
  // daemon yet), anything else to wait and say why once (common/socket_trust.h).
  std::function<absl::Status()> trust_check;
  // Whom this process trusts on this machine: also the owner of its spool folder.
  TrustPolicy trust;
};

class Flusher {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kTickNs = 25'000'000;
  // The profiler's system-trace capacity per NeuronCore: a quarter of the runtime's default
  // (32768), emptied four times as often, so the same event rate fits in a quarter of the
  // runtime's memory (in the simulator ~176 bytes per event per core, allocated at each start:
  // 2.9 MB for two cores instead of 11.5). What overflows is counted (device_overwritten).
  static constexpr uint64_t kOwnMaxEventsPerCore = 1 << 13;
  static constexpr size_t kMaxUnackedBatches = 64;
  static constexpr uint64_t kMaxQueuedDocumentBytes = 64ull << 20;
  // The daemon refuses a ShimMessage over 64 MiB (and with it the stream): no batch is sent
  // larger, and a model file ships only if it leaves room for the rest of its batch.
  static constexpr uint64_t kMaxMessageBytes = 64ull << 20;
  static constexpr uint64_t kMaxModelFileBytes = kMaxMessageBytes - (1ull << 20);

  // `core` outlives the flusher.
  Flusher(CoreState* core, DaemonTransport transport);
  Flusher(const Flusher&) = delete;
  Flusher& operator=(const Flusher&) = delete;

  // Starts the thread (with every signal blocked, so that signals reach the program's
  // threads) and gRPC. False, after one line on stderr, if the thread could not be made.
  bool Start();

  SysTraceArbiter* arbiter() { return &arbiter_; }
  // A model file the program loaded; copied (up to NRTPROF_MAX_MODEL_BYTES) now.
  void OnModelLoaded(uint64_t model_handle, const void* bytes, size_t size);
  // exit(): everything sent with final=true and acked, or the deadline.
  void FinalFlush(Clock::time_point deadline);
  // True once the flusher has created its gRPC channel (gRPC is then unusable after fork).
  bool grpc_started() const { return grpc_started_.load(std::memory_order_acquire); }

 private:
  struct QueuedDocument {
    uint64_t generation;
    std::string json;
  };
  // A batch sent and not yet acknowledged, kept to be sent again on the next stream if this one
  // breaks (the daemon ignores what it already has).
  struct Unacked {
    uint64_t sequence;
    LaneCounts events;
    nrtprof::EventBatch batch;
  };

  static void* RunThread(void* flusher);
  void Run();
  void Tick();
  // After main() called pthread_exit: true once the program's last thread has ended, so that
  // only the shim's and gRPC's threads keep the process alive (README: "pthread_exit").
  bool ProgramThreadsGone();
  // An allocation failed (std::bad_alloc) while handling `lost`: counted (no_memory), and
  // said once on stderr.
  void CountNoMemory(const LaneCounts& lost);
  void OnDocument(uint64_t generation, std::string json);
  void ParseDocuments(uint64_t now_ns);
  void DrainRings(uint64_t now_ns);
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
  void ServiceStream(uint64_t now_ns, bool final, Clock::time_point deadline);
  void SendReady(bool final);
  void OnControl(const nrtprof::CaptureControl& control);
  nrtprof::DropCounters Drops();
  void AbandonStream(uint64_t now_ns, Clock::time_point deadline);
  // A new stream: sends it the batches the last one did not acknowledge, in order.
  void Resend();
  // Lossless: the stream gets the spool's batches from `offset` on (PumpReplay), as many at a
  // time as may wait for an ack, until it has caught up with the file; meanwhile new batches
  // go into the spool only. So a daemon that was away, restarted or fell behind gets every
  // batch over the stream, on this machine or another.
  void StartReplay(uint64_t offset);
  void PumpReplay();
  // Where in the spool to start reading to find batch `sequence` (at or before it).
  uint64_t SpoolOffsetOf(uint64_t sequence) const;
  static void SayOnce(bool* said, const std::string& line);
  // Best effort at exit, out of time: an event-less final batch with the drop counters, sent
  // past the bound on unacknowledged batches (the caller has discarded what was pending).
  void SendFinalNow();
  // Best effort at exit, the final batch sent and not acknowledged in time: its event-less
  // copy (drop counters, events sent) on a new connection, which the clogged stream's
  // queue cannot hold up. True if the daemon acknowledged it by `deadline`.
  bool SendFinalAlone(Clock::time_point deadline);
  // The connection and final_only stream SendFinalAlone uses, made ahead if the daemon is
  // behind at exit.
  void OpenAlone();
  // Stamps `batch` with the events sent up to and including it (EventBatch.events_sent).
  static void SetEventsSent(const LaneCounts& sent, nrtprof::EventBatch* batch);
  // Every notice the core has so far (CoreState::notices), into `batch`.
  void SetNotices(nrtprof::EventBatch* batch) const;
  // Lossless mode: the spool file, with the process's Hello first; null (best effort) if the
  // mode is best effort or the file could not be made (said once on stderr).
  void OpenSpool();
  // This process's Hello, with the same process_start_ns every time.
  nrtprof::Hello Hello();
  // After a stream closed: if the daemon refused its credentials, says so once and stops.
  void NoteRefusal();
  // After a stream that never reached the daemon: if the process could not connect for want
  // of descriptors or memory, says so once (the flusher keeps retrying).
  void NoteConnectFailure();
  // The process cannot connect for want of descriptors or memory (`error`): said once.
  void NoteStarved(int error);
  void Final(Clock::time_point deadline);
  // Lossless at exit: the final batch spooled, then the stream caught up from the spool until
  // the daemon acknowledges the final batch or the deadline.
  void FinalLossless(Clock::time_point deadline);

  CoreState* const core_;
  DaemonTransport transport_;  // its secrets are dropped once the channel has them
  SysTraceArbiter arbiter_;

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

  // The first contact: Start() waits (at most kFirstContactNs) until the daemon has answered
  // the first Hello, or there is no daemon to answer, so that a process killed right after its
  // first libnrt call is known to the daemon, which then counts what it made (process_died).
  static constexpr uint64_t kFirstContactNs = 200'000'000;
  std::mutex contact_mu_;
  std::condition_variable contact_cv_;
  bool contact_settled_ ABSL_GUARDED_BY(contact_mu_) = false;
  uint64_t contact_deadline_ns_ = 0;  // the flusher's thread only; 0 once settled

  std::atomic<bool> grpc_started_{false};
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
  Batcher batcher_;
  std::vector<ThreadState*> threads_snapshot_;
  // About how many slots a new thread writes before the flusher's first look at its ring:
  // what the next spare ring gets faulted in for (twice that, 16 KiB to 1 MiB).
  uint64_t new_thread_slots_ = kSpareRingWarmSlots / 2;
  LaneCounts freed_rings_dropped_;  // of rings already freed
  LaneCounts daemon_away_;
  LaneCounts oversized_;
  std::unique_ptr<SpoolWriter> spool_;
  std::unique_ptr<SpoolCursor> replay_;  // lossless: the stream is catching up from the spool
  bool replay_awaits_ack_ = false;       // a new stream: replay once the daemon says from where
  uint64_t replay_wait_since_ns_ = 0;
  static constexpr uint64_t kHelloAckWaitNs = 1'000'000'000;
  // The spool offset of batches 1, 1 + kSpoolIndexStride, ...: where a replay starts (it skips
  // what the daemon has). 8 bytes per 64 batches.
  static constexpr uint64_t kSpoolIndexStride = 64;
  std::vector<uint64_t> spool_index_;
  bool replay_failed_ = false;
  uint64_t process_start_ns_ = 0;
  LaneCounts spool_full_;
  LaneCounts no_memory_;
  bool no_memory_said_ = false;
  nrtprof::Event scratch_event_;  // built here, then swapped into the batch
  // ProgramThreadsGone: this thread's blocked signals (/proc/thread-self/status SigBlk), which
  // every thread gRPC makes inherits; empty if /proc cannot tell.
  std::string shim_signal_mask_;
  LaneCounts sent_;  // events in batches numbered so far (EventBatch.events_sent)
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // SendFinalAlone's channel uses them
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<nrtprof::Collector::Stub> stub_;
  std::unique_ptr<CollectorStream> stream_;
  std::shared_ptr<grpc::Channel> alone_channel_;  // at exit: the final batch alone
  std::unique_ptr<nrtprof::Collector::Stub> alone_stub_;
  std::unique_ptr<CollectorStream> alone_;
  StreamInterning interning_;        // what the stream has
  StreamInterning spool_interning_;  // lossless: what batches only spooled have carried
  std::deque<Unacked> unacked_;
  bool final_sent_ = false;
  bool final_attempt_made_ = false;
  uint64_t final_sequence_ = 0;
  uint64_t next_attempt_ns_ = 0;
  uint64_t backoff_ns_ = 0;
  // The daemon refused this process's credentials: no more attempts, nothing recorded.
  bool refused_ = false;
  bool connect_failure_said_ = false;
  bool connect_starved_ = false;  // the last stream failed for want of descriptors or memory
  bool untrusted_said_ = false;   // DaemonTransport::trust_check failed once
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_FLUSHER_H_
