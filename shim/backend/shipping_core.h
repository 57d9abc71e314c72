// The shim's shipping core: how batches, once sealed by the Batcher, reach the daemon, with no
// transport of its own. The flusher (flusher.h) drains rings into the Batcher and calls Tick()
// and Final(); the gRPC adapter (grpc_link.h, collector_stream.h) only carries messages; every
// decision is here, tested with a fake stream and clock (shipping_core_test.cc):
//
// - Sequences and acknowledgements. Batches keep the process's sequence numbers across
//   streams. A batch sent and not acknowledged is kept (at most kMaxUnackedBatches) and sent
//   again, in order, on the next stream if this one breaks; the daemon ignores those it has.
//   Every batch says how many events the process has sent up to it (events_sent), so the
//   daemon counts what never reached it.
// - Daemon away. A new stream is tried with a backoff (100 ms doubling to 5 s). Pending
//   batches wait in the Batcher; past its bound the oldest are counted (daemon_away). A
//   daemon that refuses the process's credentials stops it recording, for good (one line).
// - Lossless (a spool given to UseSpool): every batch goes into the spool first. A new stream
//   gets, from the spool, every batch past the one the daemon says it has (its first Ack), then
//   goes on live; a daemon too far behind gets the spool's batches as acks make room. A batch
//   the spool cannot hold is counted (spool_full) and its event-less copy keeps the sequence.
// - Exit (Final). Best effort: everything, then the final batch, with the last half of the
//   time (up to 1 s) kept for a final batch that counts what could not be sent (daemon_away);
//   one not acknowledged within 100 ms is sent again, event-less, on a connection of its own.
//   Lossless: the final batch is spooled; a daemon on this machine reads the spool, so the
//   exit waits at most 200 ms for it; one across TCP gets the spool's batches until it
//   acknowledges the final one, and then the spool file is removed.
// - Flush. A daemon's CaptureControl.flush (a capture's stop): the flusher seals what it
//   drained and calls Flush(n); the last of the batches then sealed (an empty one if there are
//   none) and every later one carry EventBatch.flushed = n.
// - fork(): the child leaves the parent's batches, stream and spool to the parent
//   (AtForkChild).
//
// Not thread-safe: the flusher's thread owns it (AtForkChild runs in a fork child, which has
// no other thread). The host, link, clock and batcher outlive it.
#ifndef NRTPROF_SHIM_BACKEND_SHIPPING_CORE_H_
#define NRTPROF_SHIM_BACKEND_SHIPPING_CORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/spool_file.h"
#include "shim/backend/batcher.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/backend/shipping_link.h"

namespace nrtprof::shim {

// Drops the shipping core does not count itself, by reason; it adds its own (daemon_away,
// oversized, spool_full) to make each batch's DropCounters.
struct HostDrops {
  LaneCounts ring_full;
  LaneCounts device_overwritten;
  LaneCounts device_malformed;
  LaneCounts no_memory;
};

// What the shipping core needs of the process (the flusher). Called on the flusher's thread,
// except OnControl, which comes on a transport thread.
class ShippingHost {
 public:
  virtual ~ShippingHost() = default;
  // This process's Hello, the same process every time.
  virtual nrtprof::Hello Hello() = 0;
  virtual HostDrops Drops() = 0;
  // What `batch` says of the process as it is now: every notice it has so far, and whether the
  // program holds the runtime's system trace.
  virtual void SetProcessState(nrtprof::EventBatch* batch) = 0;
  virtual void OnControl(const nrtprof::CaptureControl& control) = 0;
  // The daemon refused this process's credentials: stop recording.
  virtual void StopRecording() = 0;
  // One line for the user (stderr), without its newline.
  virtual void Say(const std::string& line) = 0;
};

class ShippingCore {
 public:
  using TimePoint = ShipClock::TimePoint;
  static constexpr size_t kMaxUnackedBatches = 64;
  // The daemon refuses a ShimMessage over 64 MiB (and with it the stream): a larger batch goes
  // out event-less, its events counted (oversized).
  static constexpr uint64_t kMaxMessageBytes = 64ull << 20;
  static constexpr uint64_t kFirstBackoffNs = 100'000'000;
  static constexpr uint64_t kMaxBackoffNs = 5'000'000'000;
  // A daemon that does not answer a lossless stream's Hello with an Ack within this long gets
  // the spool from its start.
  static constexpr uint64_t kHelloAckWaitNs = 1'000'000'000;

  ShippingCore(ShippingHost* host, ShipLink* link, ShipClock* clock, Batcher* batcher);
  ShippingCore(const ShippingCore&) = delete;
  ShippingCore& operator=(const ShippingCore&) = delete;

  // The address was given (NRTPROF_ADDR), not the default: a process that ends without ever
  // reaching a daemon there says so in one line at exit (a daemon absent from the default
  // address is the usual state of an always-on shim and goes unsaid).
  void SayIfNeverReached() { say_if_never_reached_ = true; }

  // Lossless mode: `spool`, which holds the process's Hello, gets every batch from now on.
  void UseSpool(std::unique_ptr<SpoolWriter> spool);
  bool lossless() const { return spool_ != nullptr; }

  // Every tick, after the batcher was given what was drained: acks, a new stream if due,
  // sending, replay, the batcher's bounds.
  void Tick();
  // Everything the host recorded before the daemon's flush `n` is in the batcher, sealed: the
  // batches sent from now on say so (EventBatch.flushed), one at the next Tick even if empty.
  void Flush(uint64_t n);
  // True once the first contact is settled: no stream, or one that the daemon answered with
  // an Ack, or that broke.
  bool FirstContactSettled();

  // At exit: the deadline the final flush keeps to (lossless to a daemon on this machine,
  // which reads the spool: at most 200 ms from now).
  TimePoint ExitDeadline(TimePoint deadline);
  // At exit, everything drained and sealed: everything sent, the final batch last, within
  // `deadline` (see above); the stream is closed.
  void Final(TimePoint deadline);

  // In a fork child: nothing of the parent's is ever sent or removed from here on (Tick and
  // Final do nothing). True if the child may ship on its own (the parent's transport never
  // started, so the child's is intact).
  bool AtForkChild();

  // What the core counts, by reason, and the DropCounters every batch carries.
  nrtprof::DropCounters Drops();

 private:
  // A batch sent and not yet acknowledged, kept to be sent again on the next stream if this
  // one breaks (the daemon ignores what it already has).
  // A batch sent and not yet acknowledged: the message the stream has (shared, not copied).
  struct Unacked {
    uint64_t sequence;
    LaneCounts events;
    std::shared_ptr<const nrtprof::ShimMessage> message;
    const nrtprof::EventBatch& batch() const { return message->batch(); }
  };

  // Acks free batches; a broken stream is abandoned; a new one opened when due.
  void ServiceStream(uint64_t now_ns, bool final, TimePoint deadline);
  void OpenStream(bool final);
  // False (the next attempt backed off) if the daemon may not be connected to now.
  bool Trusted(uint64_t now_ns);
  void SendReady(bool final);
  // `message`'s batch (numbered, stamped) into the spool; what the spool cannot hold counted
  // as spool_full and left out of the message. Returns the events it carries.
  LaneCounts Spool(nrtprof::ShimMessage* message, LaneCounts events);
  void AbandonStream(uint64_t now_ns, TimePoint deadline);
  void BackOff(uint64_t now_ns);
  // A new stream: sends it the batches the last one did not acknowledge, in order.
  void Resend();
  // Lossless: the stream gets the spool's batches from `offset` on (PumpReplay), as many at a
  // time as may wait for an ack, until it has caught up with the file; meanwhile new batches
  // go into the spool only.
  void StartReplay(uint64_t offset);
  void PumpReplay();
  // Where in the spool to start reading to find batch `sequence` (at or before it).
  uint64_t SpoolOffsetOf(uint64_t sequence) const;
  void SayOnce(bool* said, const std::string& line);
  // Best effort at exit, out of time: an event-less final batch with the drop counters, sent
  // past the bound on unacknowledged batches (the caller has discarded what was pending).
  void SendFinalNow();
  // Best effort at exit, the final batch sent and not acknowledged in time: its event-less
  // copy on a connection of its own. True if the daemon acknowledged it by `deadline`.
  bool SendFinalAlone(TimePoint deadline);
  // The connection SendFinalAlone uses, made ahead if the daemon is behind at exit.
  void OpenAlone();
  void FinalBestEffort(TimePoint deadline);
  void FinalLossless(TimePoint deadline);
  void CloseStream(TimePoint deadline, bool graceful);
  // Stamps `batch` with the events sent up to and including it (EventBatch.events_sent).
  static void SetEventsSent(const LaneCounts& sent, nrtprof::EventBatch* batch);
  // `batch` as the stream's daemon reads it: its events_encoded moved into `events` unless the
  // daemon has said it reads them (CaptureControl.reads_events_encoded; until it has, it is
  // taken not to). What goes into the spool is written so too.
  void FitForDaemon(nrtprof::EventBatch* batch);
  nrtprof::ShimMessage HelloMessage();
  // After a stream closed: if the daemon refused its credentials, says so once and stops.
  void NoteRefusal();
  // After a stream that never reached the daemon: if the process could not connect for want
  // of descriptors or memory, says so once (the core keeps retrying).
  void NoteConnectFailure();
  void NoteStarved(int error);

  ShippingHost* const host_;
  ShipLink* const link_;
  ShipClock* const clock_;
  Batcher* const batcher_;

  std::unique_ptr<ShipStream> stream_;
  // The stream's daemon said it reads EventBatch.events_encoded (set on gRPC's thread).
  std::shared_ptr<std::atomic<bool>> reads_encoded_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<ShipStream> alone_;  // at exit: the final batch alone
  StreamInterning interning_;          // what the stream has
  StreamInterning spool_interning_;    // lossless: what batches only spooled have carried
  std::deque<Unacked> unacked_;
  LaneCounts sent_;  // events in batches numbered so far (EventBatch.events_sent)
  LaneCounts daemon_away_;
  LaneCounts oversized_;
  LaneCounts spool_full_;

  std::unique_ptr<SpoolWriter> spool_;
  std::unique_ptr<SpoolCursor> replay_;  // lossless: the stream is catching up from the spool
  bool replay_awaits_ack_ = false;       // a new stream: replay once the daemon says from where
  uint64_t replay_wait_since_ns_ = 0;
  // The spool offset of batches 1, 1 + kSpoolIndexStride, ...: where a replay starts (it skips
  // what the daemon has). 8 bytes per 64 batches.
  static constexpr uint64_t kSpoolIndexStride = 64;
  std::vector<uint64_t> spool_index_;
  bool replay_failed_ = false;

  bool final_sent_ = false;
  uint64_t flushed_ = 0;        // the last Flush(n)
  uint64_t stamped_flush_ = 0;  // EventBatch.flushed of the batches sent now
  bool flush_due_ = false;      // flushed_ not yet stamped: a batch goes even if none is ready
  bool final_attempt_made_ = false;
  bool say_if_never_reached_ = false;
  bool ever_heard_ = false;  // some stream of this process's was answered by a daemon
  uint64_t final_sequence_ = 0;
  uint64_t next_attempt_ns_ = 0;
  uint64_t backoff_ns_ = 0;
  bool forked_away_ = false;  // a fork child: the parent's state, never touched
  // The daemon refused this process's credentials: no more attempts, nothing recorded.
  bool refused_ = false;
  bool connect_failure_said_ = false;
  bool connect_starved_ = false;  // the last stream failed for want of descriptors or memory
  bool untrusted_said_ = false;   // ShipLink::CheckTrust failed once
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_SHIPPING_CORE_H_
