// The collector's core: shim streams, captures and the daemon's status, with no transport.
// CollectorService (gRPC streams from shims) and ControlService (the CLI's RPCs) only adapt the
// wire to these calls, so everything here is tested without a socket.
//
// A process belongs to a capture when its Hello names the capture, or when its Hello names
// none and the capture is in progress while it is connected (started before or after it
// connected) and it is in no other capture. StopCapture tells the capture's processes to stop
// recording, waits (up to wait_ms) until each has sent its final batch or closed its stream,
// correlates what they sent, and hands the Trace to the sink.
//
// Who is on the other end: a process on this machine is known by its socket's credentials
// (Caller::uid). The daemon's own user, root, and callers without a uid (over TCP, where the
// gate admitted them with the operator's token or certificate; or in the same process) act
// for the operator: their captures take every process, and they may stop and fetch any
// capture. Another user of a shared service (--socket_group) acts for itself only: its
// captures take only its own processes, it may stop and fetch only its captures, and Status
// shows it only its processes. A local caller other than the daemon's user (root included)
// never has a capture written where it asked: it goes under output_root/users/UID/ID (the
// daemon's, private) and is fetched (FetchableCapture) to be written by the caller's own CLI
// with the caller's own permissions.
//
// Thread-safe. Calls for one stream (OnHello, OnBatch, OnStreamClosed) must come in that
// order, one at a time, as a gRPC stream delivers them. The sink and clock passed to the
// constructor must outlive the core.
#ifndef NRTPROF_DAEMON_COLLECTOR_CORE_H_
#define NRTPROF_DAEMON_COLLECTOR_CORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/flight_recorder.h"
#include "daemon/ingest.h"
#include "daemon/metrics.h"
#include "trace/trace_sink.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

// The party to a stream or a control call.
struct Caller {
  // The uid of a process on this machine (SO_PEERCRED); none: the operator (see above).
  std::optional<uint32_t> uid;
};

// Time as the core sees it, injected so tests drive it (Perfetto's dependencies.h).
class CollectorClock {
 public:
  virtual ~CollectorClock() = default;
  virtual uint64_t MonotonicNs() = 0;  // CLOCK_MONOTONIC, the clock of every host event
  virtual int64_t RealtimeNs() = 0;    // CLOCK_REALTIME
  // As `cv->wait(*lock)`, but returns by the time MonotonicNs() reaches deadline_ns. May return
  // early (spuriously): callers re-check their condition and the time.
  virtual void WaitUntil(std::condition_variable* cv, std::unique_lock<std::mutex>* lock,
                         uint64_t deadline_ns) = 0;
};

// The system's clocks; the instance is never destroyed.
CollectorClock* SystemClock();

struct CollectorOptions {
  std::string address;      // where the daemon listens, as Status reports it
  std::string output_root;  // a capture without an output_dir writes to output_root/CAPTURE_ID
  IngestLimits limits;
  std::string daemon_version;
  // Lossless mode's folder (spool_replay.h): capture manifests and the shims' spool files.
  // Empty: no manifests, no spools read.
  std::string spool_dir;
  // The daemon's own user: callers of this uid act for the operator.
  uint32_t daemon_uid = static_cast<uint32_t>(getuid());
  // The flight recorder (flight_recorder.h): with it, every connected process records all the
  // time, and its batches are kept within these bounds for captures of the past
  // (StartCaptureRequest.last_ms). Off: processes record only while in a capture.
  bool flight_recorder = false;
  FlightRecorder::Limits flight_recorder_limits;
  FlightRecorder::Codec flight_recorder_codec = FlightRecorder::Codec::kLz4;
  // A capture of the past reads a process of one stream with more recorded events than twice
  // this in parts of about this many (CollectorCore::PartReader), each correlated and written
  // before the next is read, when every writer streams: the capture then holds about a part of
  // the process at once. 0: every process whole. (nrtprofd --capture_part_events; parts of
  // 64 Ki events were the quickest of 16 Ki to 512 Ki, BENCHMARKS.md "capture --last".)
  uint64_t past_part_events = uint64_t{1} << 16;
  // How much later than a part's end each NeuronCore's device events must reach before the
  // part is taken (a core's events come in its order; this is the slack for those that come
  // by another way, as the device profile's).
  uint64_t past_part_device_settle_ns = 1'000'000'000;
  // Where the core says what the daemon's log should (one line each); null: nowhere.
  std::function<void(const std::string&)> log;
  // The fleet store (fleet_exporter.h), if any: told of each capture written (with its trace,
  // summary and files), and asked for its part of Status. Must not block nor call the core.
  std::function<void(const Trace&, const Summary&, const nrtprof::CaptureFiles&)>
      capture_written;
  std::function<void(nrtprof::StatusReply*)> add_status;
  // A sink that writes only the files of `kinds` (a bit, 1 << k, per nrtprof::CaptureFileKind
  // k; never none), for a capture that names its files (StartCaptureRequest.files). Unset: such
  // a request is refused, and every capture goes to the core's sink.
  std::function<std::unique_ptr<TraceSink>(uint32_t kinds)> sink_for_files;
  // Each fold's window (FoldMetrics), after the metrics took it: the trigger rules
  // (daemon/triggers.h). Called under the fold's lock: it must not fold, and should not block.
  std::function<void(const Trace&)> folded;
  // A stream ended without its process's final batch (OnStreamClosed): its Hello, and whether
  // the process is on this machine (its socket's credentials are known). For the trigger
  // rules' `exit by signal`. Called with the core's lock held: it must not block nor call in.
  std::function<void(const nrtprof::Hello&, bool local)> ended_without_final;
};

class CollectorCore {
 public:
  using StreamId = uint64_t;
  // Delivers a CaptureControl to one stream's shim. Called with the core's lock held: it must
  // not block nor call into the core.
  using ControlSender = std::function<void(const nrtprof::CaptureControl&)>;

  CollectorCore(CollectorOptions options, TraceSink* sink, CollectorClock* clock);
  ~CollectorCore();
  CollectorCore(const CollectorCore&) = delete;
  CollectorCore& operator=(const CollectorCore&) = delete;

  // A stream's first message. `stream` is the caller's id for it, unique among open streams.
  // Every CaptureControl for this stream, the first included, goes through `send`, in order;
  // the first is also returned.
  // `caller`: the process at the stream's other end; it joins only captures it may be in.
  absl::StatusOr<nrtprof::CaptureControl> OnHello(StreamId stream, const nrtprof::Hello& hello,
                                                  ControlSender send, Caller caller = {});
  // Returns the sequence to acknowledge. An error (malformed batch, no Hello yet) leaves the
  // stream's state as it was; the caller should then close the stream. `wire`: the message as
  // it came (a serialized ShimMessage), for the flight recorder; empty: made from `batch`.
  absl::StatusOr<uint64_t> OnBatch(StreamId stream, const nrtprof::EventBatch& batch,
                                   std::string wire = "");
  // The same for a batch whose events the transport read as records (wire_events.h): `rest`
  // is the batch without them, `wire` the message as it came.
  absl::StatusOr<uint64_t> OnBatch(StreamId stream, const nrtprof::EventBatch& rest,
                                   const std::vector<IngestedEvent>& events, std::string wire);
  // Whether OnBatch keeps batches as they came (the flight recorder is on): the transport
  // then passes them (`wire`); else it need not copy them.
  bool KeepsWire() const { return recorder_ != nullptr; }
  // The process's rings file (rings_reader.h), opened by the transport for a stream on this
  // machine, right after its Hello.
  void AttachRingsFile(StreamId stream, std::shared_ptr<const RingsFile> rings);
  // The sequence up to which the stream's process is stored (by this stream or an earlier one
  // of the same process), to acknowledge at once after the Hello so that the shim lets go of
  // what it would resend; 0 if none.
  uint64_t StoredSequence(StreamId stream);
  // The stream ended (the process exited, or the stream failed). No more `send` after this
  // returns.
  void OnStreamClosed(StreamId stream);

  // For a caller that is not the operator, or one that asks (request.fetch), the reply's
  // `fetch` says the files are to be fetched; request.output_dir is then the caller's
  // business, not the daemon's. With request.start_monotonic_ns ahead, waits until the clock
  // reads it (InvalidArgument if more than kMaxStartAheadNs ahead) before anything else.
  absl::StatusOr<nrtprof::StartCaptureReply> StartCapture(
      const nrtprof::StartCaptureRequest& request, Caller caller = {});
  // Writes the capture and returns what was written. Blocks up to request.wait_ms, then for the
  // correlation and the sinks. An empty capture_id names the one capture in progress (of the
  // caller's, for a user). PermissionDenied for another user's capture.
  absl::StatusOr<nrtprof::CaptureFiles> StopCapture(const nrtprof::StopCaptureRequest& request,
                                                    Caller caller = {});
  nrtprof::StatusReply Status(Caller caller = {});
  static constexpr uint64_t kMaxStartAheadNs = 60'000'000'000;
  // The core's clocks now and the machine's name, for a caller's offset estimate.
  nrtprof::ClockReply ReadClock();

  // A written capture's files, for FetchCapture: its folder and their names in it. NotFound if
  // no capture of that id was written lately (the daemon remembers the last
  // kRememberedCaptures), PermissionDenied if it is another user's.
  struct Fetchable {
    std::string dir;
    std::vector<std::string> names;
    bool staged = false;  // a user's, or one asked to be fetched: removed once fetched
  };
  absl::StatusOr<Fetchable> FetchableCapture(const std::string& capture_id, const Caller& caller);
  // After a whole fetch: removes a staged capture's files and folder, and forgets it. Only a
  // staged one: an operator's capture stays where it was written.
  void FetchedCapture(const std::string& capture_id);
  static constexpr size_t kRememberedCaptures = 256;

  // `nrtprof top`: the flight recorder's last request.window_ms (default 5 s) up to
  // kMetricsSettleNs ago, decoded and correlated, by process, model and op (daemon/top.h). A
  // user of a shared service sees only its own processes. FailedPrecondition without a flight
  // recorder.
  absl::StatusOr<nrtprof::TopReply> Top(const nrtprof::TopRequest& request, Caller caller = {});

  // Folds into `metrics` the calls that ended since the last fold, up to FoldSettleNs() ago
  // (so that the batches holding them, and the device events of an execution, have come):
  // decoded and correlated as a capture would be. Needs the flight recorder; one fold at a
  // time.
  void FoldMetrics(Metrics* metrics);
  static constexpr uint64_t kMetricsSettleNs = 1'000'000'000;
  // How long ago the fold's window ends: the longest batch age a connected process declared
  // (Hello.batch_age_ms, at least kDefaultBatchAgeMs), and kFoldMarginNs for a flusher late on
  // a busy machine; kMetricsSettleNs while no process is connected. A call whose window closed
  // before its batch came is never counted: with the window ending 1 s before the fold and
  // batches of up to 500 ms, a loaded CI run's /metrics said 5,997 executions of 6,000 (session
  // 33); a process whose batches wait 5 s (NRTPROF_RECORDER_BATCH_MS=5000) would have lost all
  // but about the last second of each batch (reasoned, not measured).
  uint64_t FoldSettleNs();
  static constexpr uint64_t kDefaultBatchAgeMs = 500;
  static constexpr uint64_t kMaxBatchAgeMs = 60'000;  // a process that says more is held to it
  static constexpr uint64_t kFoldMarginNs = 2'000'000'000;

  // At the daemon's start: the captures a predecessor had in progress (their manifests in the
  // spool folder) are in progress again, so their processes rejoin them and their spools are
  // read when they stop. Returns what it found, a line each, for the log.
  std::vector<std::string> RecoverCaptures();

  // For the daemon's exit: refuses new captures, stops and writes every capture in progress
  // (waiting up to wait_ms for each one's processes) and waits for stops already under way.
  // Returns the first error of those writes.
  absl::Status Shutdown(uint32_t wait_ms);

  // A capture's memory stays with the daemon after it is written -- the huge pages its
  // vectors freed and malloc's free heap (HugePageReuse::kKeepAfter) -- for the next capture,
  // which then takes no fresh pages for them; once no capture has been written for
  // kIdleMemoryNs, this gives it back (ReleaseKeptPages), so that the daemon holds again what
  // its streams and the flight recorder need. nrtprofd calls it every kIdleMemoryPollNs (its
  // main thread), so a capture's memory is held at most their sum after the capture. Returns
  // whether memory was given back.
  bool ReleaseIdleMemory();
  static constexpr uint64_t kIdleMemoryNs = 20'000'000'000;
  static constexpr uint64_t kIdleMemoryPollNs = 1'000'000'000;

 private:
  absl::StatusOr<uint64_t> OnBatch(StreamId stream, const nrtprof::EventBatch& batch,
                                   const std::vector<IngestedEvent>* events, std::string wire);
  struct Stream;
  struct Capture;
  // A process across its streams: host, boot id, pid and start time.
  using ProcessKey = std::tuple<std::string, std::string, uint32_t, uint64_t>;
  static ProcessKey KeyOf(const nrtprof::Hello& hello);
  // How many processes' stored sequences are remembered after their streams close.
  static constexpr size_t kMaxRememberedProcesses = 1 << 16;

  void Join(Stream* stream, Capture* capture) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the stream's process lost as this stream alone adds to the daemon's totals. Needs
  // mu_ and the stream's mu.
  static DropCounts StreamsOwnDrops(const Stream& s);
  // Every member sent its final batch, or what it recorded before flush `flush`.
  bool AllFlushed(const Capture& capture, uint64_t flush) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns once the monotonic clock reads start_ns (at once if it is past); Unavailable if
  // the daemon shuts down meanwhile.
  absl::Status AwaitStart(uint64_t start_ns) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WriteCapture(Capture* capture, nrtprof::CaptureFiles* out);
  // Sets a process's streams (of one pid, host and boot) into *streams; false when there are
  // no more. Processes come in the Trace's order (ProcessOrder).
  // With each: all of the process, or which part of it (ProcessTrace::continues; one stream).
  struct Part {
    bool first = true;
    bool last = true;
  };
  using NextProcess = std::function<bool(std::vector<ProcessCapture>* streams, Part* part)>;
  // WriteCapture a process at a time, into `stream` (the sink's, when it has one): each is
  // correlated, summed up and written before the next is asked for.
  absl::Status StreamCapture(Capture* capture, TraceStream* stream, const NextProcess& next,
                             nrtprof::CaptureFiles* out);
  // A new id, free among the captures in progress and in `root`'s folders.
  std::string NewCaptureId(const std::string& root) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsOperator(const Caller& caller) const {
    return !caller.uid || *caller.uid == 0 || *caller.uid == options_.daemon_uid;
  }
  // Captures of the operator take every process; a user's, only that user's; one that names
  // pids, only those.
  static bool MayJoin(const Stream& stream, const Capture& capture);
  bool MayControl(const Caller& caller, const std::optional<uint32_t>& owner) const {
    return IsOperator(caller) || owner == caller.uid;
  }

  // A capture of the past: its processes (all of them for a null `capture`) as the flight
  // recorder has them from since_ns until until_ns.
  // (For the metrics, capture is null, and for top it has no id: the model files stay out.)
  std::vector<ProcessCapture> FromRecorder(const Capture* capture, uint64_t since_ns,
                                           uint64_t until_ns, std::vector<std::string>* notes);
  // The same a process at a time: each process's streams (in the Trace's order, ProcessOrder)
  // decoded and handed to `each`, which may consume them, before the next process is decoded.
  void ForEachRecordedProcess(const Capture* capture, uint64_t since_ns, uint64_t until_ns,
                              std::vector<std::string>* notes,
                              const std::function<void(std::vector<ProcessCapture>*)>& each);
  // The same in two steps, so that a capture written a process at a time decodes each
  // process's batches only when it comes to it: the streams and their recorded batches (a note
  // if the recorder no longer held all of the time asked for), then a stream's batches decoded.
  struct Recorded {
    std::shared_ptr<Stream> stream;
    std::vector<std::shared_ptr<const FlightRecorder::Chunk>> chunks;  // oldest first
    bool closed = false;  // the stream had ended (ProcessCapture::stream_closed)
    uint64_t events() const {
      uint64_t n = 0;
      for (const auto& chunk : chunks) n += chunk->events;
      return n;
    }
  };
  std::vector<Recorded> RecordedStreams(const Capture* capture, uint64_t since_ns,
                                        uint64_t until_ns, std::vector<std::string>* notes);
  class BatchDecoder;
  class PartReader;
  ProcessCapture DecodeRecorded(const Capture* capture, const Recorded& recorded,
                                BatchDecoder* decoder, std::vector<std::string>* notes);
  // A ForReplay copy of the recorded stream, its capture begun (`reserve` events) and the
  // per-process bound applied (noted), for `recorded`'s chunks; *final: the stream's. Read in
  // parts (`in_parts`), the bound holds for each part, not for the window: unless its model
  // files are too big to copy into each part (PartReader), the whole window is kept.
  std::unique_ptr<ProcessIngest> BeginReplay(const Capture* capture, const Recorded& recorded,
                                             std::optional<uint64_t> reserve,
                                             std::vector<std::string>* notes, bool* final,
                                             bool in_parts = false);
  void ReplayChunk(const Capture* capture, const FlightRecorder::Chunk& chunk, uint32_t pid,
                   BatchDecoder* decoder, ProcessIngest* replay);
  // StopCapture's part after the processes are gathered: reads spools and writes the files.
  absl::Status WriteStopped(Capture* capture, std::vector<std::string>* notes,
                            nrtprof::CaptureFiles* files);
  // The control a process out of every capture gets: record for the flight recorder, or not.
  nrtprof::CaptureControl Idle(const std::string& capture_id) const;
  void ForgetEmptied(const std::vector<uint64_t>& emptied) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CollectorOptions options_;
  std::unique_ptr<FlightRecorder> recorder_;  // null when off
  TraceSink* const sink_;
  CollectorClock* const clock_;
  const uint64_t started_ns_;
  std::atomic<uint64_t> events_received_{0};

  std::mutex mu_;               // before any Stream::mu
  std::condition_variable cv_;  // a stream sent its final batch or closed; a stop finished
  std::map<StreamId, std::shared_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  // Closed streams the flight recorder still holds batches of: what decodes them.
  std::map<StreamId, std::shared_ptr<Stream>> recorded_closed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Capture>> captures_ ABSL_GUARDED_BY(mu_);
  uint64_t captures_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t captures_written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t final_batches_alone_ ABSL_GUARDED_BY(mu_) = 0;  // final_only Hellos
  int stops_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // When the last capture was written, and whether its memory is still kept (ReleaseIdleMemory).
  uint64_t last_written_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool memory_kept_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t flushes_ ABSL_GUARDED_BY(mu_) = 0;  // CaptureControl.flush asked so far
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  DropCounts closed_drops_ ABSL_GUARDED_BY(mu_);  // of streams already closed
  // Each process whose stream closed before its final batch: the last sequence stored, where a
  // new stream of it resumes (what the shim resends up to it is ignored), and the shim's
  // counters then, which the new stream's do not count again in Status.
  struct Stored {
    uint64_t sequence = 0;
    DropCounts shim_drops;
  };
  std::map<ProcessKey, Stored> stored_sequences_ ABSL_GUARDED_BY(mu_);
  // Captures written lately, for FetchableCapture: by id, with the order of writing.
  struct Written {
    uint64_t order = 0;
    Fetchable files;
    std::optional<uint32_t> owner;
  };
  std::map<std::string, Written> written_ ABSL_GUARDED_BY(mu_);
  std::mutex metrics_mu_;  // one fold at a time; before mu_
  uint64_t metrics_folded_ns_ ABSL_GUARDED_BY(metrics_mu_) = 0;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_COLLECTOR_CORE_H_
