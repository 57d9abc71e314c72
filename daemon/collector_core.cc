// CollectorCore's streams and captures: a process's streams across reconnections, which
// capture each joins and who may start, stop and fetch what (collector_core.h). Captures of the
// past are collector_recorded.cc's; status, top and the metrics' fold, collector_status.cc's;
// a capture's folder, capture_folders.h's.
#include "daemon/collector_core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "daemon/capture_folders.h"
#include "daemon/collector_core_state.h"
#include "trace/correlator.h"
#include "trace/huge_page_allocator.h"
#include "daemon/spool_replay.h"
#include "trace/step_window.h"
#include "daemon/top.h"
#include "daemon/wire_events.h"
#include "trace/summary.h"
#include "google/protobuf/arena.h"

namespace nrtprof::daemon {
namespace {

class RealClock : public CollectorClock {
 public:
  uint64_t MonotonicNs() override { return Read(CLOCK_MONOTONIC); }
  int64_t RealtimeNs() override { return static_cast<int64_t>(Read(CLOCK_REALTIME)); }
  void WaitUntil(std::condition_variable* cv, std::unique_lock<std::mutex>* lock,
                 uint64_t deadline_ns) override {
    // libstdc++'s steady_clock is CLOCK_MONOTONIC.
    cv->wait_until(*lock,
                   std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns)));
  }

 private:
  static uint64_t Read(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
};

nrtprof::CaptureControl Control(bool capturing, const std::string& capture_id,
                                uint32_t stack_depth) {
  nrtprof::CaptureControl c;
  c.set_capturing(capturing);
  c.set_capture_id(capture_id);
  c.set_stack_depth(stack_depth);
  c.set_reads_events_encoded(true);  // wire_events.cc and ProcessIngest::OnBatch read them
  return c;
}

}  // namespace

CollectorClock* SystemClock() {
  static CollectorClock* const clock = new RealClock();
  return clock;
}

CollectorCore::ProcessKey CollectorCore::KeyOf(const nrtprof::Hello& hello) {
  return ProcessKey(hello.host(), hello.boot_id(), hello.pid(), hello.process_start_ns());
}

DropCounts CollectorCore::StreamsOwnDrops(const Stream& s) {
  return CombineDropCounts(s.ingest.drops(), s.counted_elsewhere,
                           [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; });
}

CollectorCore::CollectorCore(CollectorOptions options, TraceSink* sink, CollectorClock* clock)
    : options_(std::move(options)),
      recorder_(options_.flight_recorder
                    ? std::make_unique<FlightRecorder>(options_.flight_recorder_limits,
                                                       options_.flight_recorder_codec)
                    : nullptr),
      sink_(sink),
      clock_(clock),
      started_ns_(clock->MonotonicNs()) {}

nrtprof::CaptureControl CollectorCore::Idle(const std::string& capture_id) const {
  return Control(recorder_ != nullptr, capture_id, 0);
}

void CollectorCore::ForgetEmptied(const std::vector<uint64_t>& emptied) {
  for (uint64_t id : emptied) recorded_closed_.erase(id);
}

CollectorCore::~CollectorCore() = default;

bool CollectorCore::MayJoin(const Stream& stream, const Capture& capture) {
  if (!capture.pids.empty() &&
      std::find(capture.pids.begin(), capture.pids.end(), stream.pid) == capture.pids.end()) {
    return false;
  }
  if (!capture.job.empty() && !(stream.job == capture.job)) return false;
  return !capture.owner || stream.uid == capture.owner;
}

void CollectorCore::Join(Stream* stream, Capture* capture) {
  stream->capture_id = capture->id;
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->ingest.BeginCapture();
  }
  capture->members.push_back(stream);
}

void CollectorCore::AttachRingsFile(StreamId stream, std::shared_ptr<const RingsFile> rings) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    s = it->second;
  }
  std::lock_guard<std::mutex> stream_lock(s->mu);
  s->ingest.SetRingsFile(std::move(rings));
}

absl::StatusOr<nrtprof::CaptureControl> CollectorCore::OnHello(StreamId stream,
                                                               const nrtprof::Hello& hello,
                                                               ControlSender send,
                                                               Caller caller) {
  if (absl::Status s = ProcessIngest::ValidateHello(hello); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_.count(stream) != 0) {
    return absl::FailedPreconditionError("a second Hello on one stream");
  }
  auto s = std::make_shared<Stream>(stream, hello, options_.limits, std::move(send));
  s->uid = caller.uid;
  // A process back on a new stream: batches its earlier streams stored are duplicates now.
  uint64_t stored = 0;
  auto max = [](uint64_t a, uint64_t b) { return std::max(a, b); };
  if (auto it = stored_sequences_.find(s->key); it != stored_sequences_.end()) {
    stored = it->second.sequence;
    s->counted_elsewhere = it->second.shim_drops;
    stored_sequences_.erase(it);
  }
  for (const auto& [id, other] : streams_) {
    if (other->key != s->key) continue;
    std::lock_guard<std::mutex> other_lock(other->mu);
    stored = std::max(stored, other->ingest.last_sequence());
    s->counted_elsewhere = CombineDropCounts(s->counted_elsewhere, other->ingest.shim_drops(), max);
  }
  if (stored != 0) {
    std::lock_guard<std::mutex> stream_lock(s->mu);
    s->ingest.ResumeAfter(stored);
  }
  streams_[stream] = s;
  Capture* join = nullptr;
  for (auto& [id, c] : captures_) {
    if (c->starting || c->stopping || !MayJoin(*s, *c)) continue;
    if (hello.capture_id().empty() ? (join == nullptr || c->number > join->number)
                                   : id == hello.capture_id()) {
      join = c.get();
    }
  }
  nrtprof::CaptureControl control;
  if (join != nullptr) {
    Join(s.get(), join);
    control = Control(true, join->id, join->stack_depth);
  } else {
    control = Idle(hello.capture_id());
  }
  s->send(control);
  return control;
}

absl::StatusOr<uint64_t> CollectorCore::OnBatch(StreamId stream, const nrtprof::EventBatch& batch,
                                                std::string wire) {
  return OnBatch(stream, batch, nullptr, std::move(wire));
}

absl::StatusOr<uint64_t> CollectorCore::OnBatch(StreamId stream, const nrtprof::EventBatch& rest,
                                                const std::vector<IngestedEvent>& events,
                                                std::string wire) {
  return OnBatch(stream, rest, &events, std::move(wire));
}

absl::StatusOr<uint64_t> CollectorCore::OnBatch(StreamId stream, const nrtprof::EventBatch& batch,
                                                const std::vector<IngestedEvent>* events,
                                                std::string wire) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) {
      return absl::FailedPreconditionError("an event batch before the stream's Hello");
    }
    s = it->second;
  }
  absl::StatusOr<uint64_t> ack;
  bool final = false, final_alone = false, flushed = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    const uint64_t before = s->ingest.events_received();
    const bool final_before = s->ingest.final();
    const uint64_t sequence_before = s->ingest.last_sequence();
    ack = events != nullptr ? s->ingest.OnBatch(batch, *events) : s->ingest.OnBatch(batch);
    const size_t event_count = events != nullptr ? events->size() : CountEvents(batch);
    // A batch stored (not a duplicate) goes to the flight recorder as it came; one that carries
    // model files without them (the stream's state keeps those).
    if (recorder_ != nullptr && ack.ok() && s->ingest.last_sequence() != sequence_before &&
        event_count != 0) {
      FlightRecorder::Chunk chunk;
      chunk.stream = stream;
      chunk.arrival_ns = clock_->MonotonicNs();
      chunk.sequence = batch.sequence();
      chunk.events = static_cast<uint32_t>(event_count);
      if (wire.empty() || batch.models_size() != 0) {
        // Made from the message; a batch read as records has its events only in `wire`
        // (which protobuf parses: the wire reader takes nothing else, wire_events_test).
        nrtprof::ShimMessage m;
        if (events == nullptr || !m.ParseFromString(wire)) *m.mutable_batch() = batch;
        m.mutable_batch()->clear_models();
        chunk.bytes = m.SerializeAsString();
      } else {
        chunk.bytes = std::move(wire);
      }
      std::vector<uint64_t> emptied;
      recorder_->Add(std::move(chunk), &emptied);
      if (!emptied.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        ForgetEmptied(emptied);
      }
    }
    events_received_ += s->ingest.events_received() - before;
    final = s->ingest.final();
    final_alone = final && !final_before && s->ingest.hello().final_only();
    if (ack.ok() && batch.flushed() > s->flushed) {
      s->flushed = batch.flushed();
      flushed = true;
    }
  }
  if ((final || flushed) && ack.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (final_alone) ++final_batches_alone_;
    cv_.notify_all();
  }
  return ack;
}

uint64_t CollectorCore::StoredSequence(StreamId stream) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return 0;
    s = it->second;
  }
  std::lock_guard<std::mutex> stream_lock(s->mu);
  return s->ingest.last_sequence();
}

void CollectorCore::OnStreamClosed(StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  std::shared_ptr<Stream> s = it->second;
  streams_.erase(it);
  if (recorder_ != nullptr && recorder_->Holds(stream)) recorded_closed_[stream] = s;
  std::lock_guard<std::mutex> stream_lock(s->mu);
  closed_drops_ += StreamsOwnDrops(*s);
  if (options_.ended_without_final && !s->ingest.final()) {  // trigger_captures.h
    options_.ended_without_final(s->ingest.hello(), s->uid.has_value());
  }
  // A process that may come back: remember how far it was stored. The bound keeps a daemon
  // that sees many processes die from growing; one forgotten only stores a resent batch twice.
  if (!s->ingest.final() && s->ingest.last_sequence() != 0) {
    if (stored_sequences_.size() >= kMaxRememberedProcesses) {
      stored_sequences_.erase(stored_sequences_.begin());
    }
    Stored& stored = stored_sequences_[s->key];
    stored.sequence = std::max(stored.sequence, s->ingest.last_sequence());
    stored.shim_drops = CombineDropCounts(stored.shim_drops, s->ingest.shim_drops(),
                                          [](uint64_t a, uint64_t b) { return std::max(a, b); });
  }
  auto capture = captures_.find(s->capture_id);
  if (!s->capture_id.empty() && capture != captures_.end()) {
    Capture& c = *capture->second;
    c.members.erase(std::find(c.members.begin(), c.members.end(), s.get()));
    c.finished.push_back(s->ingest.TakeCapture());
    c.finished.back().stream_closed = true;
  }
  cv_.notify_all();
}

std::string CollectorCore::NewCaptureId(const std::string& root) {
  const absl::Time now = absl::FromUnixNanos(clock_->RealtimeNs());
  const std::string base = absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone());
  std::string id = base;
  for (int n = 2; captures_.count(id) != 0 ||
                  Exists(absl::StrCat(root, "/", id));
       ++n) {
    id = absl::StrCat(base, "-", n);
  }
  return id;
}

absl::StatusOr<nrtprof::StartCaptureReply> CollectorCore::StartCapture(
    const nrtprof::StartCaptureRequest& request, Caller caller) {
  if (!request.capture_id().empty()) {
    if (absl::Status s = CheckCaptureId(request.capture_id()); !s.ok()) return s;
  }
  if ((request.last_ms() != 0 || request.iterations() != 0) && recorder_ == nullptr) {
    return absl::FailedPreconditionError(
        "this daemon's flight recorder is off (--flight_recorder_seconds 0): it holds no past "
        "to capture");
  }
  uint32_t file_kinds = 0;  // a bit per CaptureFileKind named; none: every file
  for (int kind : request.files()) {
    if (kind == nrtprof::CAPTURE_FILE_KIND_UNSPECIFIED || !nrtprof::CaptureFileKind_IsValid(kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request names a kind of capture file this daemon does not know (", kind,
                       ")"));
    }
    file_kinds |= 1u << kind;
  }
  if (file_kinds != 0 && !options_.sink_for_files) {
    return absl::FailedPreconditionError(
        "this daemon writes every file of a capture: it cannot write only some");
  }
  if (absl::Status s = AwaitStart(request.start_monotonic_ns()); !s.ok()) return s;
  // Another user's capture is staged in the daemon's own folder and fetched: the daemon never
  // writes where such a caller asks, since it cannot know what that user may write.
  // So is root's: the daemon runs as its own user and cannot write as root. An operator's is
  // staged when it asks to fetch the files (a caller on another machine), in output_root.
  const bool for_user = caller.uid.has_value() && *caller.uid != options_.daemon_uid;
  const bool staged = for_user || request.fetch();
  const std::string users_root = absl::StrCat(options_.output_root, "/users");
  const std::string root =
      for_user ? absl::StrCat(users_root, "/", *caller.uid) : options_.output_root;
  if (!staged && !request.output_dir().empty()) {
    if (absl::Status s = CheckOutputDir(request.output_dir()); !s.ok()) return s;
  }
  if (for_user) {
    if (absl::Status s = MakeFolders(options_.output_root); !s.ok()) return s;
    // Private to the daemon's user, whatever the output root's mode: the other users' captures
    // must not be readable through it.
    for (const std::string& d : {users_root, root}) {
      if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create folder ", d, ": ", strerror(errno)));
      }
    }
  }
  const bool auto_id = request.capture_id().empty();
  std::string id, dir;
  absl::Status made;
  for (int attempt = 0;; ++attempt) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return absl::UnavailableError("the daemon is shutting down");
    id = request.capture_id().empty() ? NewCaptureId(root) : request.capture_id();
    if (captures_.count(id) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("capture '", id, "' is already in progress"));
    }
    dir = staged || request.output_dir().empty() ? absl::StrCat(root, "/", id)
                                                 : request.output_dir();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    for (const auto& [other_id, c] : captures_) {
      if (c->output_dir == dir) {
        return absl::AlreadyExistsError(
            absl::StrCat("capture '", other_id, "' is already writing to ", dir));
      }
    }
    // Reserved while the folder is made, outside the lock: streams never wait on the disk.
    auto c = std::make_unique<Capture>();
    c->id = id;
    c->output_dir = dir;
    c->stack_depth = request.stack_depth();
    if (!IsOperator(caller)) c->owner = caller.uid;
    c->pids.assign(request.pids().begin(), request.pids().end());
    c->job = {request.job(), !request.job().empty() && request.job_from_command_line()};
    c->started_ns = clock_->MonotonicNs();
    c->last_ms = request.last_ms();
    c->iterations = request.iterations();
    if (request.has_trigger()) {  // daemon/triggers.h: the rule and its reason, for the files
      // When the anomaly began: the asking daemon's wall clock (a peer's too), on this one's
      // monotonic clock as the events are; 0 if not said (trace.pftrace's instant, at_ns).
      const int64_t at_ns = static_cast<int64_t>(request.trigger().unix_ms()) * 1'000'000 -
                            (clock_->RealtimeNs() - static_cast<int64_t>(c->started_ns));
      c->trigger = {request.trigger().rule(),
                    request.trigger().condition(),
                    request.trigger().reason(),
                    request.trigger().value_ns(),
                    request.trigger().threshold_ns(),
                    request.trigger().unix_ms() != 0 && at_ns > 0 ? static_cast<uint64_t>(at_ns)
                                                                  : 0};
    }
    if (file_kinds != 0) c->own_sink = options_.sink_for_files(file_kinds);
    if (c->iterations != 0) {
      // The next step number that is a multiple of K after the latest any of the capture's
      // processes marked: processes in step record the same numbers.
      int64_t latest = -1;
      for (const auto& [stream_id, st] : streams_) {
        if (!MayJoin(*st, *c)) continue;
        std::lock_guard<std::mutex> stream_lock(st->mu);
        latest = std::max(latest, st->ingest.last_step());
      }
      const uint64_t k = std::max<uint32_t>(request.step_multiple(), 1);
      c->first_step = (static_cast<uint64_t>(latest + 1) + k - 1) / k * k;
    }
    c->staged = staged;
    c->number = ++captures_started_;
    captures_[id] = std::move(c);
  }
  made = MakeFolders(dir);
  if (made.ok() && Exists(dir + "/trace.pftrace")) {
    made = absl::AlreadyExistsError(absl::StrCat(
        dir, " already holds a capture (trace.pftrace); choose another folder or remove it"));
  }
  if (made.ok()) made = ClaimFolder(dir, id);
  // Another daemon took the same id in the same second (its folder is there now): the next.
  if (!made.ok() && auto_id && made.code() == absl::StatusCode::kAlreadyExists && attempt < 20) {
    std::lock_guard<std::mutex> lock(mu_);
    captures_.erase(id);
    continue;
  }
  break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = captures_.find(id);
  if (made.ok() && shutting_down_) {
    ReleaseFolder(dir);
    made = absl::UnavailableError("the daemon is shutting down");
  }
  if (!made.ok()) {
    captures_.erase(it);
    return made;
  }
  Capture& c = *it->second;
  c.starting = false;
  // So that a daemon started after this one dies carries the capture on (lossless mode).
  if (absl::Status m =
          WriteCaptureManifest(options_.spool_dir, {id, dir, c.stack_depth, c.owner});
      !m.ok() && options_.log) {
    options_.log(absl::StrCat("capture '", id, "': ", m.message(),
                              "; it will not survive a restart of the daemon"));
  }
  const nrtprof::CaptureControl start = Control(true, id, c.stack_depth);
  for (auto& [stream_id, s] : streams_) {
    if (!s->capture_id.empty()) continue;  // in another capture
    if (!s->wanted_capture.empty() && s->wanted_capture != id) continue;
    if (!MayJoin(*s, c)) continue;
    Join(s.get(), &c);
    s->send(start);
  }
  nrtprof::StartCaptureReply reply;
  reply.set_capture_id(id);
  reply.set_output_dir(dir);
  reply.set_spool_dir(options_.spool_dir);
  reply.set_fetch(staged);
  reply.set_first_step(c.first_step);
  reply.set_started_monotonic_ns(c.started_ns);
  return reply;
}

absl::Status CollectorCore::AwaitStart(uint64_t start_ns) {
  const uint64_t now = clock_->MonotonicNs();
  if (start_ns <= now) return absl::OkStatus();
  if (start_ns - now > kMaxStartAheadNs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the start time is %.3f s ahead of this daemon's clock; at most %d s",
        static_cast<double>(start_ns - now) / 1e9, kMaxStartAheadNs / 1'000'000'000));
  }
  // On the core's condition (which waiting releases): what wakes it early is checked again.
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_ && clock_->MonotonicNs() < start_ns) {
    clock_->WaitUntil(&cv_, &lock, start_ns);
  }
  if (shutting_down_) return absl::UnavailableError("the daemon is shutting down");
  return absl::OkStatus();
}

nrtprof::ClockReply CollectorCore::ReadClock() {
  nrtprof::ClockReply reply;
  reply.set_monotonic_ns(clock_->MonotonicNs());
  reply.set_realtime_ns(clock_->RealtimeNs());
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) reply.set_hostname(name);
  return reply;
}

bool CollectorCore::AllFlushed(const Capture& capture, uint64_t flush) {
  for (Stream* s : capture.members) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->ingest.final() && s->flushed < flush) return false;
  }
  return true;
}

// Correlates a stopped capture and hands its Trace to the sink; fills *out with what was
// written. The Trace and the raw events are freed when this returns.
absl::Status CollectorCore::WriteCapture(Capture* capture, nrtprof::CaptureFiles* out) {
  Trace trace = Correlate(capture->id, std::move(capture->finished),
                          clock_->RealtimeNs() - static_cast<int64_t>(clock_->MonotonicNs()));
  trace.trigger = capture->trigger;
  if (capture->iterations != 0) {
    std::vector<std::string> notes;
    ClipToSteps(capture->first_step, capture->first_step + capture->iterations - 1, &trace,
                &notes);
    for (const std::string& n : notes) out->add_notes(n);
  }
  // The raw events are in the Trace now: give their memory back before the writers take theirs.
  std::vector<ProcessCapture>().swap(capture->finished);
  nrtprof::CaptureFiles& files = *out;
  files.set_output_dir(capture->output_dir);
  // Once for the capture: the summary files, the reply's table and the fleet's rows.
  const Summary summary = ComputeSummary(trace);
  std::vector<std::string> written;
  TraceSink* sink = capture->own_sink != nullptr ? capture->own_sink.get() : sink_;
  absl::Status wrote = sink->Write(trace, summary, capture->output_dir, &written);
  for (const std::string& f : written) files.add_files(f);
  files.set_summary_text(FormatSummary(summary));
  uint64_t events = 0, dropped = 0;
  for (const ProcessTrace& p : trace.processes) {
    events += p.ranges.size() + p.calls.size() + p.device.size();
    dropped += p.drops.total();
  }
  files.set_events(events);
  files.set_events_dropped(dropped);
  files.set_processes(static_cast<uint32_t>(trace.processes.size()));
  if (options_.capture_written) options_.capture_written(trace, summary, files);
  return wrote;
}

absl::StatusOr<nrtprof::CaptureFiles> CollectorCore::StopCapture(
    const nrtprof::StopCaptureRequest& request, Caller caller) {
  std::unique_ptr<Capture> capture;
  {
    std::unique_lock<std::mutex> lock(mu_);
    std::string id = request.capture_id();
    if (id.empty()) {
      std::vector<std::string> active;
      for (const auto& [other_id, c] : captures_) {
        if (!c->starting && !c->stopping && MayControl(caller, c->owner)) {
          active.push_back(other_id);
        }
      }
      if (active.empty()) return absl::NotFoundError("no capture is in progress");
      if (active.size() > 1) {
        return absl::InvalidArgumentError(absl::StrCat("name the capture to stop: ", active.size(),
                                                       " are in progress (",
                                                       absl::StrJoin(active, ", "), ")"));
      }
      id = active[0];
    }
    auto it = captures_.find(id);
    if (it == captures_.end() || it->second->starting) {
      return absl::NotFoundError(absl::StrCat("no capture '", id, "' in progress"));
    }
    Capture* c = it->second.get();
    if (!MayControl(caller, c->owner)) {
      return absl::PermissionDeniedError(
          absl::StrCat("capture '", id, "' is another user's; you can stop only your own"));
    }
    if (c->stopping) {
      return absl::FailedPreconditionError(
          absl::StrCat("capture '", id, "' is already being stopped"));
    }
    c->stopping = true;
    // A later first step (capture --hosts: every host's the same): the recorder holds it.
    if (c->iterations != 0 && request.first_step() > c->first_step) {
      c->first_step = request.first_step();
    }
    ++stops_in_flight_;
    // The shims send what they recorded up to the stop at once (CaptureControl.flush), a
    // process that exits its final batch; the stop waits for those, within wait_ms.
    nrtprof::CaptureControl stop = Idle("");
    stop.set_flush(++flushes_);
    for (Stream* s : c->members) s->send(stop);
    const uint64_t deadline = clock_->MonotonicNs() + uint64_t{request.wait_ms()} * 1'000'000;
    while (!AllFlushed(*c, stop.flush()) && clock_->MonotonicNs() < deadline) {
      clock_->WaitUntil(&cv_, &lock, deadline);
    }
    for (Stream* s : c->members) {
      s->capture_id.clear();
      std::lock_guard<std::mutex> stream_lock(s->mu);
      c->finished.push_back(s->ingest.TakeCapture());
    }
    c->members.clear();
    capture = std::move(it->second);
    captures_.erase(it);
  }

  std::vector<std::string> notes;
  nrtprof::CaptureFiles files;
  absl::Status wrote;
  {
    // The capture's big vectors reuse the pages of those it freed (huge_page_allocator.h), and
    // the next capture's do too, until the daemon is idle of captures (ReleaseIdleMemory).
    HugePageReuse reuse(HugePageReuse::kKeepAfter);
    // Correlating and writing take a while: no lock, so streams and other captures go on.
    wrote = WriteStopped(capture.get(), &notes, &files);
  }
  ReleaseFolder(capture->output_dir);
  for (const std::string& n : notes) files.add_notes(n);
  RemoveCaptureSpool(options_.spool_dir, capture->id);

  std::lock_guard<std::mutex> lock(mu_);
  --stops_in_flight_;
  last_written_ns_ = clock_->MonotonicNs();
  memory_kept_ = true;
  if (wrote.ok()) {
    ++captures_written_;
    // Remembered for FetchCapture: the files by their names in the folder.
    Written& w = written_[capture->id];
    w.order = ++writes_;
    w.owner = capture->owner;
    w.files.dir = capture->output_dir;
    w.files.staged = capture->staged;
    w.files.names.clear();
    for (const std::string& f : files.files()) {
      if (f.find('/') == std::string::npos && f != "." && f != "..") w.files.names.push_back(f);
    }
    if (written_.size() > kRememberedCaptures) {
      auto oldest = written_.begin();
      for (auto it = written_.begin(); it != written_.end(); ++it) {
        if (it->second.order < oldest->second.order) oldest = it;
      }
      written_.erase(oldest);
    }
  }
  cv_.notify_all();
  if (!wrote.ok()) {
    return absl::Status(wrote.code(), absl::StrCat("capture '", capture->id, "' to ",
                                                   capture->output_dir, ": ", wrote.message()));
  }
  return files;
}

std::vector<std::string> CollectorCore::RecoverCaptures() {
  std::vector<std::string> lines = RemoveOrphanSpools(options_.spool_dir);
  std::vector<CaptureManifest> manifests = ReadCaptureManifests(options_.spool_dir, &lines);
  std::lock_guard<std::mutex> lock(mu_);
  for (CaptureManifest& m : manifests) {
    if (!CheckCaptureId(m.capture_id).ok() || captures_.count(m.capture_id) != 0) continue;
    auto c = std::make_unique<Capture>();
    c->id = m.capture_id;
    c->output_dir = m.output_dir;
    c->stack_depth = m.stack_depth;
    c->owner = m.owner;
    c->staged = m.owner.has_value();
    c->number = ++captures_started_;
    c->starting = false;
    lines.push_back(absl::StrCat("capture '", c->id, "' (to ", c->output_dir,
                                 ") was in progress when the daemon stopped; it goes on"));
    captures_[m.capture_id] = std::move(c);
  }
  return lines;
}

absl::StatusOr<CollectorCore::Fetchable> CollectorCore::FetchableCapture(
    const std::string& capture_id, const Caller& caller) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = written_.find(capture_id);
  if (it == written_.end()) {
    return absl::NotFoundError(absl::StrCat("no written capture '", capture_id,
                                            "' to fetch (the daemon remembers the last ",
                                            kRememberedCaptures, ")"));
  }
  if (!MayControl(caller, it->second.owner)) {
    return absl::PermissionDeniedError(
        absl::StrCat("capture '", capture_id, "' is another user's; you can fetch only your own"));
  }
  return it->second.files;
}

void CollectorCore::FetchedCapture(const std::string& capture_id) {
  Fetchable files;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = written_.find(capture_id);
    if (it == written_.end() || !it->second.files.staged) return;
    files = std::move(it->second.files);
    written_.erase(it);
  }
  for (const std::string& name : files.names) unlink((files.dir + "/" + name).c_str());
  if (rmdir(files.dir.c_str()) != 0 && options_.log) {
    options_.log(absl::StrCat("capture '", capture_id, "' was fetched but ", files.dir,
                              " could not be removed: ", strerror(errno)));
  }
}

bool CollectorCore::ReleaseIdleMemory() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!memory_kept_ || stops_in_flight_ != 0 ||
        clock_->MonotonicNs() < last_written_ns_ + kIdleMemoryNs) {
      return false;
    }
    memory_kept_ = false;
  }
  // Outside the lock (malloc_trim takes a while). While a capture or a fold is written (its
  // HugePageReuse in scope) nothing goes: the next call tries again.
  if (ReleaseKeptPages()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  memory_kept_ = true;
  return false;
}

absl::Status CollectorCore::Shutdown(uint32_t wait_ms) {
  std::vector<std::string> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    cv_.notify_all();  // a StartCapture waiting for its start time gives up
    for (const auto& [id, c] : captures_) {
      if (!c->stopping) active.push_back(id);
    }
  }
  absl::Status first;
  for (const std::string& id : active) {
    nrtprof::StopCaptureRequest stop;
    stop.set_capture_id(id);
    stop.set_wait_ms(wait_ms);
    absl::StatusOr<nrtprof::CaptureFiles> files = StopCapture(stop);
    // NOT_FOUND: a capture still starting (its folder failed) or stopped meanwhile.
    if (!files.ok() && files.status().code() != absl::StatusCode::kNotFound &&
        files.status().code() != absl::StatusCode::kFailedPrecondition && first.ok()) {
      first = files.status();
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stops_in_flight_ == 0; });
  return first;
}

}  // namespace nrtprof::daemon
