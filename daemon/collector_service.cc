#include "daemon/collector_service.h"

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/control_service.h"
#include "daemon/peer.h"
#include "daemon/rings_reader.h"
#include "daemon/wire_events.h"
#include "google/protobuf/arena.h"
#include "grpcpp/alarm.h"
#include "grpcpp/support/proto_buffer_writer.h"

namespace nrtprof::daemon {
namespace {

constexpr char kStreamMethod[] = "/nrtprof.Collector/Stream";

// One shim's stream. Reads are handled one at a time on gRPC's callback threads; writes
// (acks, and capture controls that the core sends from control threads) queue and go out one
// at a time. Deletes itself once gRPC is done with it (OnDone) and the Hello timer, if any, has
// fired or been cancelled.
class ShimStream final : public grpc::ServerGenericBidiReactor {
 public:
  // `peer`: who is at the other end (peer.h), read while its connection is surely open.
  ShimStream(CollectorCore* core, uint64_t id, uint32_t hello_timeout_ms,
             uint64_t max_message_elements, Peer peer)
      : core_(core), id_(id), peer_(peer), max_message_elements_(max_message_elements) {
    if (hello_timeout_ms != 0) {
      holds_ = 2;  // OnDone, and the timer's callback, which runs once whatever happens
      hello_timer_.Set(
          std::chrono::system_clock::now() + std::chrono::milliseconds(hello_timeout_ms),
          [this, hello_timeout_ms](bool expired) {
            if (expired) OnHelloTimeout(hello_timeout_ms);
            Release();
          });
    }
    StartRead(&in_bytes_);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      first_read_done_ = true;
      if (timed_out_) return;  // ended already: Finish is on its way
    }
    if (!ok) {  // the shim closed its side, or the stream broke
      SendHeldAck();
      CloseInCore();
      FinishAfterWrites(grpc::Status::OK);
      return;
    }
    ++messages_read_;
    grpc::Status handled = Parse();
    if (handled.ok()) handled = Handle();
    if (!handled.ok()) {
      CloseInCore();
      FinishAfterWrites(handled);
      return;
    }
    StartRead(&in_bytes_);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    out_.pop_front();
    writing_ = false;
    if (!ok) out_.clear();  // the shim is gone: nothing more will get through
    Pump(&lock);
  }

  void OnDone() override {
    CloseInCore();
    hello_timer_.Cancel();  // its callback still runs, at once
    grpc::Alarm* ack_timer = nullptr;  // no reaction replaces it any more
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ack_timer_armed_) ack_timer = ack_timer_.get();
    }
    if (ack_timer != nullptr) ack_timer->Cancel();  // likewise
    Release();
  }

 private:
  void Release() {
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --holds_ == 0;
    }
    if (last) delete this;
  }

  void OnHelloTimeout(uint32_t timeout_ms) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (first_read_done_) return;
      timed_out_ = true;
    }
    FinishAfterWrites(
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                     absl::StrCat("no Hello within ", timeout_ms, " ms of the stream's start")));
  }

  // Before Finish: by the time the shim sees the stream's end, the daemon has counted the
  // process as gone (a capture waiting for it stops waiting). The core sends nothing more
  // after this returns.
  void CloseInCore() {
    if (hello_seen_ && !closed_in_core_) core_->OnStreamClosed(id_);
    closed_in_core_ = true;
  }

  grpc::Status Parse() {
    // Each message is parsed onto the arena, emptied first: its events cost no allocation and
    // no destructor each. (Parsed again into one ShimMessage, a batch and every event in it
    // would be freed and made anew each time: its oneof does that.) The arena gives its blocks
    // back as it is emptied, so an idle stream holds none.
    arena_.Reset();
    in_ = google::protobuf::Arena::CreateMessage<nrtprof::ShimMessage>(&arena_);
    rest_ = google::protobuf::Arena::CreateMessage<nrtprof::EventBatch>(&arena_);
    wire_.clear();
    read_as_records_ = false;
    bool parsed = false;
    // The message as it came: counted before it is read, and kept by the flight recorder,
    // which keeps batches undecoded.
    grpc::Slice slice;
    const bool whole = in_bytes_.DumpToSingleSlice(&slice).ok();
    in_bytes_.Clear();
    if (whole) wire_.assign(reinterpret_cast<const char*>(slice.begin()), slice.size());
    // Each field becomes a record or a message of a hundred bytes or more when read: a message
    // of millions of tiny fields is refused unread (gRPC's size bound alone would let 64 MiB
    // of them become gigabytes).
    if (uint64_t elements = 0; whole && CountWireElements(wire_, &elements) &&
                               elements > max_message_elements_) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("message ", messages_read_, " of the stream holds ", elements,
                       " events, strings and other elements (at most ", max_message_elements_,
                       ")"));
    }
    if (whole && core_->KeepsWire()) {
      // A batch's events are read from the bytes straight into records (wire_events.h);
      // what that reader declines is parsed by protobuf.
      read_as_records_ = hello_seen_ && ReadWireBatch(wire_, rest_, &Records(), &Scratch());
      parsed = read_as_records_ || in_->ParseFromString(wire_);
    } else if (whole) {
      parsed = in_->ParseFromString(wire_);
      std::string().swap(wire_);  // no recorder: not kept, nor its buffer by an idle stream
    }
    if (parsed) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("message ", messages_read_,
                                     " of the stream is not a ShimMessage (malformed, or a "
                                     "string field that is not UTF-8)"));
  }

  grpc::Status Handle() {
    if (!hello_seen_) {
      if (in_->msg_case() != nrtprof::ShimMessage::kHello) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "the first message of a stream must be a Hello");
      }
      absl::StatusOr<nrtprof::CaptureControl> control =
          core_->OnHello(id_, in_->hello(), [this](const nrtprof::CaptureControl& c) {
            nrtprof::DaemonMessage m;
            *m.mutable_control() = c;
            Send(std::move(m));
          }, peer_.caller);
      if (!control.ok()) return ToGrpcStatus(control.status());
      hello_seen_ = true;
      // A process on this machine names the memory it records into: held from now on, it says
      // what the process made even after a SIGKILL.
      // The process is the one that connected, by its credentials, not the pid its Hello
      // claims (which is also its own namespace's).
      if (peer_.local && in_->hello().rings_fd() > 0) {
        const int rings = OpenRingsFile(peer_.pid != 0 ? static_cast<uint32_t>(peer_.pid)
                                                       : in_->hello().pid(),
                                        in_->hello().rings_fd());
        if (rings >= 0) core_->AttachRingsFile(id_, std::make_shared<const RingsFile>(rings));
      }
      hello_timer_.Cancel();
      // Every process learns at once how far the daemon has it (0: not at all; a process back
      // after a broken stream, more): a lossless shim sends from there, what this daemon
      // never had (it restarted) included.
      nrtprof::DaemonMessage m;
      m.mutable_ack()->set_sequence(core_->StoredSequence(id_));
      Send(std::move(m));
      return grpc::Status::OK;
    }
    if (!read_as_records_ && in_->msg_case() != nrtprof::ShimMessage::kBatch) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          in_->msg_case() == nrtprof::ShimMessage::kHello
                              ? "a second Hello on one stream"
                              : "a message that is neither Hello nor EventBatch");
    }
    absl::StatusOr<uint64_t> ack =
        read_as_records_ ? core_->OnBatch(id_, *rest_, Records(), std::move(wire_))
                         : core_->OnBatch(id_, in_->batch(), std::move(wire_));
    // A batch far larger than a shim's (a message may be 64 MiB) leaves nothing behind.
    if (Records().capacity() > kRecordsKept) std::vector<IngestedEvent>().swap(Records());
    if (Scratch().capacity() > kScratchKept) std::string().swap(Scratch());
    if (!ack.ok()) return ToGrpcStatus(ack.status());
    AckBatch(*ack, read_as_records_ ? rest_->final() : in_->batch().final());
    return grpc::Status::OK;
  }

  // Acks are cumulative, and each costs the shim's gRPC threads a few wake-ups (reading it,
  // the window update it answers with, the socket writable again): a batch's ack waits up to
  // kAckDelay for later batches to go with it (a shim sending every 100 ms gets one ack in
  // three). A final batch is acked at once, and so is the kMaxAcksHeld-th waiting batch (a shim
  // keeps at most 64 batches unacknowledged, and replays its spool as acks come).
  void AckBatch(uint64_t sequence, bool final) {
    std::unique_lock<std::mutex> lock(mu_);
    held_ack_ = sequence;
    ++acks_held_;
    if (final || acks_held_ >= kMaxAcksHeld) {
      lock.unlock();
      SendHeldAck();
      return;
    }
    if (ack_timer_armed_ || finishing_) return;
    ack_timer_armed_ = true;
    ++holds_;
    // A new alarm each time: the last one's callback has started (it cleared ack_timer_armed_),
    // and an Alarm destroyed while its callback runs lets it finish.
    ack_timer_ = std::make_unique<grpc::Alarm>();
    ack_timer_->Set(std::chrono::system_clock::now() + kAckDelay, [this](bool) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ack_timer_armed_ = false;
      }
      SendHeldAck();
      Release();
    });
  }

  void SendHeldAck() {
    uint64_t sequence;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (acks_held_ == 0) return;
      acks_held_ = 0;
      sequence = held_ack_;
    }
    nrtprof::DaemonMessage m;
    m.mutable_ack()->set_sequence(sequence);
    Send(std::move(m));
  }

  void Send(nrtprof::DaemonMessage message) {
    std::unique_lock<std::mutex> lock(mu_);
    if (finishing_) return;
    // An ack not yet on its way is superseded by a later one: acks are cumulative, and a shim
    // that reads slowly then costs one message, not one per batch.
    if (message.has_ack() && out_.size() > (writing_ ? 1u : 0u) && out_.back().has_ack()) {
      out_.back().mutable_ack()->set_sequence(message.ack().sequence());
    } else {
      out_.push_back(std::move(message));
    }
    Pump(&lock);
  }

  void FinishAfterWrites(grpc::Status status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    finish_status_ = std::move(status);
    Pump(&lock);
  }

  // Starts the next write, or Finish once the queue is empty. gRPC calls go outside mu_: a
  // reaction may run before they return.
  void Pump(std::unique_lock<std::mutex>* lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_) return;
    if (!out_.empty()) {
      writing_ = true;
      out_bytes_.Clear();
      bool own_buffer;
      grpc::GenericSerialize<grpc::ProtoBufferWriter, nrtprof::DaemonMessage>(
          out_.front(), &out_bytes_, &own_buffer);
      lock->unlock();
      StartWrite(&out_bytes_);  // out_bytes_ stays put until OnWriteDone
      return;
    }
    if (finishing_ && !finished_) {
      finished_ = true;
      const grpc::Status status = finish_status_;
      lock->unlock();
      Finish(status);
    }
  }

  CollectorCore* const core_;
  const uint64_t id_;
  const Peer peer_;
  const uint64_t max_message_elements_;
  grpc::ByteBuffer in_bytes_;  // one read at a time
  // Blocks of 64 KiB to 1 MiB: a batch of 8,192 events (a recorder-only shim's) parses into
  // about 1.4 MB, in a few blocks.
  static google::protobuf::ArenaOptions ArenaBlocks() {
    google::protobuf::ArenaOptions options;
    options.start_block_size = 64 << 10;
    options.max_block_size = 1 << 20;
    return options;
  }
  google::protobuf::Arena arena_{ArenaBlocks()};
  nrtprof::ShimMessage* in_ = nullptr;  // in_bytes_, parsed onto arena_
  std::string wire_;           // in_bytes_, as they came
  // Or, when read_as_records_, a batch read from wire_ as records: the rest of it on arena_, its
  // events in Records().
  bool read_as_records_ = false;
  nrtprof::EventBatch* rest_ = nullptr;
  // A message is read and handled on one gRPC thread, in one reaction: the records of its
  // batch are that thread's, so that their memory is kept per thread (a few), not per stream
  // (an idle stream holds none), and is not mapped anew for each batch (a recorder-only shim's
  // batches are 8,192 events: 900 KB of records, which freed and taken again per batch cost
  // more in page faults than the reading itself).
  static std::vector<IngestedEvent>& Records() {
    thread_local std::vector<IngestedEvent> records;
    return records;
  }
  static std::string& Scratch() {  // the rest's bytes, read by protobuf
    thread_local std::string scratch;
    return scratch;
  }
  static constexpr size_t kRecordsKept = 16384;    // twice a recorder-only shim's batch
  static constexpr size_t kScratchKept = 4 << 20;  // a first batch's strings
  uint64_t messages_read_ = 0;
  // Only on the reading side, and in OnDone, which gRPC runs after every other reaction.
  bool hello_seen_ = false;
  bool closed_in_core_ = false;

  std::mutex mu_;
  std::deque<nrtprof::DaemonMessage> out_ ABSL_GUARDED_BY(mu_);  // front: being written
  grpc::ByteBuffer out_bytes_ ABSL_GUARDED_BY(mu_);              // out_.front(), serialized
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  bool first_read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool timed_out_ ABSL_GUARDED_BY(mu_) = false;
  int holds_ ABSL_GUARDED_BY(mu_) = 1;  // the stream is deleted when none is left
  grpc::Alarm hello_timer_;
  static constexpr std::chrono::milliseconds kAckDelay{250};
  static constexpr uint64_t kMaxAcksHeld = 8;
  uint64_t held_ack_ ABSL_GUARDED_BY(mu_) = 0;   // the newest ack not yet sent
  uint64_t acks_held_ ABSL_GUARDED_BY(mu_) = 0;  // batches it answers
  bool ack_timer_armed_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Alarm> ack_timer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerGenericBidiReactor* CollectorService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  if (context->method() != kStreamMethod) {
    class Unimplemented : public grpc::ServerGenericBidiReactor {
     public:
      explicit Unimplemented(const std::string& method) {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            absl::StrCat("nrtprofd has no method ", method)));
      }
      void OnDone() override { delete this; }
    };
    return new Unimplemented(context->method());
  }
  return new ShimStream(core_, next_stream_++, options_.hello_timeout_ms,
                        options_.max_message_elements, PeerOf(context->peer()));
}

}  // namespace nrtprof::daemon
