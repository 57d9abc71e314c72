#include "shim/backend/shipping_core.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "common/clock.h"

namespace nrtprof::shim {
namespace {

// The shortage a failure message names (EMFILE, ENFILE, ENOMEM, ENOBUFS: the process lacks what
// it takes to connect), or 0.
int StarvedError(absl::string_view failure) {
  for (int error : {EMFILE, ENFILE, ENOMEM, ENOBUFS}) {
    if (absl::StrContains(failure, strerror(error))) return error;
  }
  return 0;
}

class SystemClock final : public ShipClock {
 public:
  uint64_t MonotonicNs() override { return nrtprof::MonotonicNs(); }
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
};

}  // namespace

ShipClock* SystemShipClock() {
  static ShipClock* const clock = new SystemClock();
  return clock;
}

ShippingCore::ShippingCore(ShippingHost* host, ShipLink* link, ShipClock* clock, Batcher* batcher)
    : host_(host), link_(link), clock_(clock), batcher_(batcher) {}

void ShippingCore::UseSpool(std::unique_ptr<SpoolWriter> spool) { spool_ = std::move(spool); }

void ShippingCore::Tick() {
  if (forked_away_) return;
  ServiceStream(clock_->MonotonicNs(), /*final=*/false, clock_->Now());
  SendReady(/*final=*/false);
  PumpReplay();
  daemon_away_ += batcher_->EnforceBounds();
}

void ShippingCore::Flush(uint64_t n) {
  if (n <= flushed_) return;
  flushed_ = n;
  flush_due_ = true;
}

bool ShippingCore::FirstContactSettled() {
  return stream_ == nullptr || stream_->ack_seen() || stream_->broken();
}

bool ShippingCore::AtForkChild() {
  forked_away_ = true;
  return !link_->started();
}

nrtprof::DropCounters ShippingCore::Drops() {
  const HostDrops host = host_->Drops();
  nrtprof::DropCounters drops;
  drops.set_ring_full(host.ring_full.total());
  drops.set_device_malformed(host.device_malformed.total());
  drops.set_daemon_away(daemon_away_.total());
  drops.set_device_overwritten(host.device_overwritten.total());
  drops.set_oversized(oversized_.total());
  drops.set_spool_full(spool_full_.total());
  drops.set_no_memory(host.no_memory.total());
  const LaneCounts all = host.ring_full + daemon_away_ + host.device_overwritten + oversized_ +
                         spool_full_ + host.no_memory + host.device_malformed;
  drops.mutable_by_lane()->set_framework(all.framework);
  drops.mutable_by_lane()->set_runtime(all.runtime);
  drops.mutable_by_lane()->set_hardware(all.hardware);
  return drops;
}

// ---- The stream ----

void ShippingCore::ServiceStream(uint64_t now_ns, bool final, TimePoint deadline) {
  if (stream_ != nullptr) {
    const uint64_t acked = stream_->acked();
    while (!unacked_.empty() && unacked_.front().sequence <= acked) unacked_.pop_front();
    if (stream_->heard_from_daemon()) {
      backoff_ns_ = 0;
      connect_starved_ = false;
      ever_heard_ = true;
    }
    if (stream_->broken()) AbandonStream(now_ns, final ? deadline : clock_->Now());
  }
  if (stream_ != nullptr || refused_) return;
  if (final) {
    // At exit one attempt is made at once, whatever the backoff says, and only one.
    if (final_attempt_made_) return;
    final_attempt_made_ = true;
  } else if (now_ns < next_attempt_ns_) {
    return;
  }
  if (!Trusted(now_ns)) return;
  // Lossless streams wait for a daemon that is away to come back, so that one back within a
  // second of the process's end still gets everything (seen: a new stream failing at once
  // in gRPC's reconnection backoff, at exit, left a restarted daemon across TCP with nothing).
  // A process that could not connect for want of descriptors may have them back: at exit its
  // one attempt reconnects at once (not at the transport's next backoff) and waits for the
  // connection within the flush's time, so that what it kept reaches the daemon.
  const bool starved_at_exit = final && connect_starved_;
  if (starved_at_exit) link_->ResetBackoff();
  ShippingHost* host = host_;
  // Each stream's daemon says for itself whether it reads events_encoded.
  auto reads_encoded = std::make_shared<std::atomic<bool>>(false);
  reads_encoded_ = reads_encoded;
  stream_ = link_->Open(
      HelloMessage(),
      [host, reads_encoded](const nrtprof::CaptureControl& control) {
        if (control.reads_events_encoded()) reads_encoded->store(true, std::memory_order_release);
        host->OnControl(control);
      },
      /*wait_for_ready=*/spool_ != nullptr || starved_at_exit);
  interning_ = StreamInterning();
  if (spool_ != nullptr) {
    // Lossless: the new stream gets, from the spool, every batch past the one the daemon says
    // it has (its first Ack), then goes on live (PumpReplay). A daemon that restarted has
    // none of what its predecessor acknowledged, and gets it all again.
    unacked_.clear();
    replay_.reset();
    replay_awaits_ack_ = true;
    replay_wait_since_ns_ = now_ns;
    return;
  }
  // The final batch counts as sent only if this stream gets it again.
  final_sent_ = !unacked_.empty() && unacked_.back().batch().final();
  Resend();
}

bool ShippingCore::Trusted(uint64_t now_ns) {
  // The socket may have changed hands since the last stream: nothing is sent to a daemon that
  // is not to be trusted, and the next attempt checks again.
  const absl::Status trust = link_->CheckTrust();
  if (trust.ok()) return true;
  if (trust.code() == absl::StatusCode::kResourceExhausted) {
    // Not a verdict on the daemon: the process has no descriptor (or memory) to check with.
    const int error = StarvedError(trust.message());
    NoteStarved(error != 0 ? error : EMFILE);
  } else if (trust.code() != absl::StatusCode::kNotFound) {
    SayOnce(&untrusted_said_, "nrtprof: not trusting the daemon at " + link_->target() + ": " +
                                  std::string(trust.message()) + "; not sending it anything");
  }
  BackOff(now_ns);
  return false;
}

nrtprof::ShimMessage ShippingCore::HelloMessage() {
  nrtprof::ShimMessage hello;
  *hello.mutable_hello() = host_->Hello();
  if (spool_ == nullptr) hello.mutable_hello()->set_mode(nrtprof::MODE_BEST_EFFORT);
  return hello;
}

void ShippingCore::AbandonStream(uint64_t now_ns, TimePoint deadline) {
  // Batches the daemon did not acknowledge stay in unacked_ for the next stream: the daemon
  // may have stored some of them (their acks lost with the stream) and ignores those by their
  // sequence numbers; a daemon that restarted takes them all.
  stream_->Close(deadline, /*graceful=*/false);
  NoteRefusal();
  NoteConnectFailure();
  stream_.reset();
  replay_.reset();  // the next stream starts where its daemon says
  replay_awaits_ack_ = false;
  BackOff(now_ns);
}

void ShippingCore::BackOff(uint64_t now_ns) {
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
  next_attempt_ns_ = now_ns + backoff_ns_;
}

void ShippingCore::CloseStream(TimePoint deadline, bool graceful) {
  if (stream_ == nullptr) return;
  if (stream_->heard_from_daemon()) ever_heard_ = true;
  stream_->Close(deadline, graceful);
  NoteRefusal();
  stream_.reset();
}

void ShippingCore::NoteConnectFailure() {
  if (stream_->heard_from_daemon()) {
    connect_starved_ = false;
    ever_heard_ = true;
    return;
  }
  // A daemon that is not there (no socket, nobody listening) is the usual state of an
  // always-on shim and goes unsaid; the process lacking what it takes to connect does not.
  if (const int error = StarvedError(stream_->failure()); error != 0) NoteStarved(error);
}

void ShippingCore::NoteStarved(int error) {
  connect_starved_ = true;
  SayOnce(&connect_failure_said_, "nrtprof: cannot connect to the daemon at " + link_->target() +
                                      ": " + strerror(error) +
                                      "; retrying, its events waiting meanwhile (past " +
                                      std::to_string(Batcher::Options().max_pending_events) +
                                      ", the oldest are counted as dropped: daemon_away)");
}

void ShippingCore::NoteRefusal() {
  if (refused_ || !stream_->refused_by_daemon()) return;
  // Credentials the daemon refused once it refuses every time: stop asking, stop recording.
  refused_ = true;
  host_->StopRecording();
  host_->Say("nrtprof: the daemon at " + link_->target() +
             " refused this process's credentials (UNAUTHENTICATED); not profiling it");
}

void ShippingCore::SayOnce(bool* said, const std::string& line) {
  if (*said) return;
  *said = true;
  host_->Say(line);
}

// ---- Sending ----

void ShippingCore::Resend() {
  for (Unacked& u : unacked_) {
    // The earlier stream may still hold its message: the new stream's is a copy.
    auto message = std::make_shared<nrtprof::ShimMessage>(*u.message);
    batcher_->Restamp(message->mutable_batch(), &interning_);
    FitForDaemon(message->mutable_batch());
    u.message = message;
    stream_->Send(std::move(message));
  }
}

void ShippingCore::SendReady(bool final) {
  // Best effort keeps batches until a stream takes them; lossless spools them as they are
  // ready, and sends them too when a stream is there.
  while (batcher_->has_ready() || (final && !final_sent_) || flush_due_) {
    bool connected = stream_ != nullptr && !stream_->broken();
    if (connected && unacked_.size() >= kMaxUnackedBatches) {
      if (spool_ == nullptr) break;  // wait for acks
      // A daemon this far behind: the spool carries on alone, and the stream gets what it
      // missed from it as acks make room (PumpReplay).
      if (replay_ == nullptr) StartReplay(spool_->bytes());
      connected = false;  // (also if the spool could not be read back: never past the bound)
    }
    // Lossless, while the stream catches up from the spool, batches go into the spool only.
    if (replay_ != nullptr || replay_awaits_ack_) connected = false;
    if (!connected && spool_ == nullptr) break;
    LaneCounts events;
    nrtprof::ShimMessage message;
    // A batch only spooled must not count its strings as sent on the stream (the replay adds
    // what the stream lacks): it carries those the spool has not had through spool-only ones.
    // The spool has all of them before their first use either way, since every batch is in it.
    nrtprof::EventBatch batch =
        batcher_->TakeNext(connected ? &interning_ : &spool_interning_, Drops(), final, &events);
    if (!batcher_->has_ready()) {
      // The last of what was sealed: later batches than this hold nothing from before flushed_.
      stamped_flush_ = flushed_;
      flush_due_ = false;
    }
    batch.set_flushed(stamped_flush_);
    FitForDaemon(&batch);
    message.mutable_batch()->Swap(&batch);
    host_->SetProcessState(message.mutable_batch());
    if (message.ByteSizeLong() > kMaxMessageBytes) {
      // Keep the sequence without a gap: send the batch's frame, count what it carried.
      oversized_ += events;
      message.mutable_batch()->clear_events();
      message.mutable_batch()->clear_events_encoded();
      message.mutable_batch()->clear_models();
      *message.mutable_batch()->mutable_drops() = Drops();
      events = LaneCounts();
    }
    SetEventsSent(sent_ + events, message.mutable_batch());
    if (spool_ != nullptr) events = Spool(&message, events);
    sent_ += events;
    const uint64_t sequence = message.batch().sequence();
    if (message.batch().final()) {
      final_sent_ = true;
      final_sequence_ = sequence;
    }
    if (!connected) continue;
    auto shared = std::make_shared<const nrtprof::ShimMessage>(std::move(message));
    unacked_.push_back({sequence, events, shared});
    stream_->Send(std::move(shared));
  }
}

LaneCounts ShippingCore::Spool(nrtprof::ShimMessage* message, LaneCounts events) {
  if ((message->batch().sequence() - 1) % kSpoolIndexStride == 0) {
    spool_index_.push_back(spool_->bytes());
  }
  if (spool_->Append(message->SerializeAsString())) return events;
  // The spool's bound (or the disk) is reached: the daemon reads lossless processes from their
  // spools, so what this batch carried is lost. Counted, and the count goes into the spool's
  // reserve in an event-less copy of the batch (strings and stacks kept, so later batches
  // still find them). The stream gets the same copy: its events are counted as lost, so they
  // are not sent either.
  spool_full_ += events;
  nrtprof::EventBatch* batch = message->mutable_batch();
  batch->clear_events();
  batch->clear_events_encoded();
  *batch->mutable_drops() = Drops();
  SetEventsSent(sent_, batch);
  nrtprof::ShimMessage counts = *message;
  counts.mutable_batch()->clear_models();
  counts.mutable_batch()->clear_clock_syncs();
  spool_->Append(counts.SerializeAsString(), /*reserve=*/true);
  return LaneCounts();
}

void ShippingCore::FitForDaemon(nrtprof::EventBatch* batch) {
  if (reads_encoded_->load(std::memory_order_acquire)) return;
  // The batcher wrote them: they always decode.
  DecodeEncodedEvents(batch);
}

void ShippingCore::SetEventsSent(const LaneCounts& sent, nrtprof::EventBatch* batch) {
  nrtprof::EventsByLane* lanes = batch->mutable_events_sent();
  lanes->set_framework(sent.framework);
  lanes->set_runtime(sent.runtime);
  lanes->set_hardware(sent.hardware);
}

// ---- Replay from the spool ----

void ShippingCore::StartReplay(uint64_t offset) {
  replay_ = std::make_unique<SpoolCursor>();
  std::string error;
  if (!replay_->Open(spool_->path(), offset, &error)) {
    // Cannot happen short of the file being removed under the process; the daemon on this
    // machine reads the spool itself, a remote one misses what was not sent live (counted
    // through events_sent).
    replay_.reset();
    SayOnce(&replay_failed_, "nrtprof: cannot read back the spool file: " + error);
  }
}

uint64_t ShippingCore::SpoolOffsetOf(uint64_t sequence) const {
  const uint64_t i = sequence == 0 ? 0 : (sequence - 1) / kSpoolIndexStride;
  return i < spool_index_.size() ? spool_index_[i] : spool_->bytes();
}

void ShippingCore::PumpReplay() {
  // A daemon that does not answer the Hello with an Ack (one older than that rule) gets the
  // spool from its start after a second; it ignores what it already has.
  if (replay_awaits_ack_ && stream_ != nullptr &&
      (stream_->ack_seen() || clock_->MonotonicNs() - replay_wait_since_ns_ > kHelloAckWaitNs)) {
    replay_awaits_ack_ = false;
    StartReplay(SpoolOffsetOf(stream_->acked() + 1));
  }
  while (replay_ != nullptr && stream_ != nullptr && !stream_->broken() &&
         unacked_.size() < kMaxUnackedBatches) {
    std::string record, error;
    const SpoolCursor::Next next = replay_->Read(&record, &error);
    if (next != SpoolCursor::Next::kRecord) {
      if (next == SpoolCursor::Next::kError) {
        SayOnce(&replay_failed_, "nrtprof: cannot read back the spool file: " + error);
      }
      replay_.reset();  // caught up: batches go out live again
      return;
    }
    auto message = std::make_shared<nrtprof::ShimMessage>();
    if (!message->ParseFromString(record) || !message->has_batch()) continue;  // the Hello
    nrtprof::EventBatch* batch = message->mutable_batch();
    if (batch->sequence() <= stream_->acked()) continue;  // the daemon has it
    batcher_->Restamp(batch, &interning_);
    FitForDaemon(batch);
    unacked_.push_back({batch->sequence(), LaneCounts::Of(*batch), message});
    stream_->Send(std::move(message));
  }
}

// ---- Exit ----

ShippingCore::TimePoint ShippingCore::ExitDeadline(TimePoint deadline) {
  // Lossless to a daemon on this machine: everything is on disk once spooled, and that daemon
  // reads the spool, so the exit waits only briefly for acks. A daemon across TCP cannot read
  // it: the exit may then spend the whole flush time sending it what it has not had.
  if (spool_ != nullptr && !link_->remote()) {
    return std::min(deadline, clock_->Now() + std::chrono::milliseconds(200));
  }
  return deadline;
}

void ShippingCore::Final(TimePoint deadline) {
  if (forked_away_) return;
  ServiceStream(clock_->MonotonicNs(), /*final=*/true, deadline);
  if (spool_ != nullptr) {
    FinalLossless(deadline);
  } else {
    FinalBestEffort(deadline);
  }
  // Said once, and only if nothing else said why (a starved or untrusted connection).
  if (say_if_never_reached_ && !ever_heard_ && !refused_ && !connect_failure_said_ &&
      !untrusted_said_ && !link_->trouble_said()) {
    host_->Say("nrtprof: no daemon answered at " + link_->target() +
               " (NRTPROF_ADDR) while this process ran: it was not profiled" +
               (spool_ != nullptr ? "; its events are in the spool file " + spool_->path()
                                  : std::string()));
  }
}

void ShippingCore::FinalBestEffort(TimePoint deadline) {
  // Everything, then the final batch; when too many batches wait for an ack, wait for one.
  // Best effort keeps the last half of the time (up to 1 s) for a final batch that counts
  // what could not be sent, so that a daemon too busy to take it all still learns how much is
  // missing (seen: 7 of 64 processes of the full load test cut off, 7,184 calls missing and
  // uncounted; then, keeping a quarter up to 500 ms and sending the final batch alone when
  // it was left, 4 of 64 still cut off).
  const TimePoint give_up = deadline - std::min<TimePoint::duration>(
                                           std::chrono::seconds(1), (deadline - clock_->Now()) / 2);
  // A daemon this far behind will likely need the final batch sent alone: the connection for
  // it is made now, while the rest goes out, so that only the batch is left to send then.
  if (stream_ != nullptr && !refused_ && unacked_.size() >= kMaxUnackedBatches / 4) OpenAlone();
  while (stream_ != nullptr && !final_sent_ && clock_->Now() < give_up) {
    SendReady(/*final=*/true);
    if (final_sent_) break;
    if (!unacked_.empty()) stream_->WaitForAck(unacked_.front().sequence, give_up);
    ServiceStream(clock_->MonotonicNs(), /*final=*/true, deadline);
  }
  if (stream_ != nullptr && !final_sent_) {
    daemon_away_ += batcher_->DiscardAll();
    SendFinalNow();
  }
  // A final batch not acknowledged within 100 ms is stuck behind batches the daemon has not
  // read yet (seen: 51 of 64 processes of the full load test cut off, 118,329 calls
  // uncounted); its copy on a connection of its own overtakes them, with the rest of the time.
  bool acknowledged = false;
  if (stream_ != nullptr && final_sent_) {
    acknowledged = stream_->WaitForAck(
        final_sequence_, std::min(deadline, clock_->Now() + std::chrono::milliseconds(100)));
    if (!acknowledged && !stream_->broken() && !refused_) {
      acknowledged = SendFinalAlone(deadline);
    }
  }
  if (alone_ != nullptr) {
    // Unused (the stream caught up), it goes without a batch: the daemon counts nothing of it.
    alone_->Close(deadline, /*graceful=*/acknowledged);
    alone_.reset();
  }
  CloseStream(deadline, acknowledged);
}

void ShippingCore::FinalLossless(TimePoint deadline) {
  // Everything and the final batch into the spool (and onto the stream, if it keeps up).
  SendReady(/*final=*/true);
  bool acknowledged = false;
  while (stream_ != nullptr && clock_->Now() < deadline) {
    PumpReplay();
    if (final_sent_ && stream_->acked() >= final_sequence_) {
      acknowledged = true;
      break;
    }
    stream_->WaitForAck(unacked_.empty() ? final_sequence_ : unacked_.front().sequence, deadline);
    ServiceStream(clock_->MonotonicNs(), /*final=*/true, deadline);
  }
  CloseStream(deadline, acknowledged);
  // A daemon across TCP has all of it and never reads (nor removes) this machine's spool
  // files; one it did not acknowledge stays, for whoever wants to know what it missed.
  if (acknowledged && link_->remote()) unlink(spool_->path().c_str());
}

void ShippingCore::SendFinalNow() {
  LaneCounts events;
  nrtprof::ShimMessage message;
  nrtprof::EventBatch batch = batcher_->TakeNext(&interning_, Drops(), /*final=*/true, &events);
  batch.set_flushed(flushed_);
  FitForDaemon(&batch);
  message.mutable_batch()->Swap(&batch);
  host_->SetProcessState(message.mutable_batch());
  sent_ += events;
  SetEventsSent(sent_, message.mutable_batch());
  final_sent_ = true;
  final_sequence_ = message.batch().sequence();
  auto shared = std::make_shared<const nrtprof::ShimMessage>(std::move(message));
  unacked_.push_back({final_sequence_, events, shared});
  stream_->Send(std::move(shared));
}

void ShippingCore::OpenAlone() {
  if (alone_ != nullptr) return;
  // A connection of its own is a new connection: the socket is checked again, as for any new
  // stream (its Hello carries the command line).
  const absl::Status trust = link_->CheckTrust();
  if (!trust.ok() && trust.code() != absl::StatusCode::kNotFound &&
      trust.code() != absl::StatusCode::kResourceExhausted) {
    return;
  }
  nrtprof::ShimMessage hello;
  *hello.mutable_hello() = host_->Hello();
  hello.mutable_hello()->set_mode(nrtprof::MODE_BEST_EFFORT);
  hello.mutable_hello()->set_final_only(true);
  alone_ = link_->OpenAlone(std::move(hello));
}

bool ShippingCore::SendFinalAlone(TimePoint deadline) {
  OpenAlone();
  if (alone_ == nullptr) return false;  // the socket is no longer to be trusted
  nrtprof::ShimMessage report;
  nrtprof::EventBatch* batch = report.mutable_batch();
  batch->set_sequence(final_sequence_);
  batch->set_final(true);
  *batch->mutable_drops() = Drops();
  host_->SetProcessState(batch);
  *batch->mutable_clock() = unacked_.back().batch().clock();
  *batch->mutable_events_sent() = unacked_.back().batch().events_sent();
  alone_->Send(std::make_shared<const nrtprof::ShimMessage>(std::move(report)));
  return alone_->WaitForAck(final_sequence_, deadline);
}

}  // namespace nrtprof::shim
