#include "daemon/collector_core.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
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
#include "daemon/correlator.h"
#include "daemon/huge_page_allocator.h"
#include "daemon/spool_replay.h"
#include "daemon/step_window.h"
#include "daemon/top.h"
#include "daemon/wire_events.h"
#include "daemon/summary.h"
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

constexpr size_t kMaxCaptureIdLength = 128;
constexpr size_t kMaxOutputDirLength = 4095;  // PATH_MAX less its NUL

// Text from a client in an error message: quoted, on one line (bytes as C escapes), and not
// all of it if it is long.
std::string Quoted(const std::string& s) {
  constexpr size_t kShown = 200;
  return absl::StrCat("'", absl::CHexEscape(s.substr(0, kShown)), s.size() > kShown ? "'..." : "'");
}

// A capture id becomes a folder name: keep it to a safe alphabet.
absl::Status CheckCaptureId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= kMaxCaptureIdLength && id[0] != '.' && id[0] != '-';
  for (char c : id) {
    ok = ok && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("capture id ", Quoted(id), " must be 1 to ", kMaxCaptureIdLength,
                   " letters, digits, '.', '_' or '-', not starting with '.' or '-'"));
}

// An output folder is the one folder it names: absolute, no NUL (which would cut the path the
// system sees short) or other control byte, no '.' or '..' component.
absl::Status CheckOutputDir(const std::string& dir) {
  if (dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("output folder ", Quoted(dir),
                     " is relative; the daemon runs elsewhere, so name it from the root"));
  }
  if (dir.size() > kMaxOutputDirLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output folder ", Quoted(dir), " is longer than ", kMaxOutputDirLength, " bytes"));
  }
  for (char c : dir) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("output folder ", Quoted(dir), " holds a NUL or control character"));
    }
  }
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("output folder ", Quoted(dir), " has a '",
                                                     part, "' component; name the folder itself"));
    }
  }
  return absl::OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// mkdir -p, each new folder 0750 (owner and group: captures hold program details).
absl::Status MakeFolders(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create folder ", prefix, ": ", strerror(errno)));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a folder"));
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write in folder ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// A capture's folder is claimed while the capture is in progress: this file in it, made
// exclusively, names the daemon's pid and the capture. Another capture -- of this daemon or of
// another nrtprofd -- is refused the folder, unless the daemon named is gone (it died): then the
// folder is taken over.
constexpr char kClaimFile[] = ".nrtprof-capture-in-progress";
constexpr uint64_t kStepContextNs = 2'000'000'000;

absl::Status ClaimFolder(const std::string& dir, const std::string& id) {
  const std::string path = absl::StrCat(dir, "/", kClaimFile);
  const std::string mine = absl::StrCat("nrtprofd ", getpid(), " capture ", id, "\n");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd >= 0) {
      const bool wrote = write(fd, mine.data(), mine.size()) == static_cast<ssize_t>(mine.size());
      close(fd);
      if (wrote) return absl::OkStatus();
      unlink(path.c_str());
      return absl::ResourceExhaustedError(absl::StrCat("cannot write in folder ", dir));
    }
    if (errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write in folder ", dir, ": ", strerror(errno)));
    }
    char buf[256] = {};
    const int in = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    const ssize_t n = in >= 0 ? read(in, buf, sizeof(buf) - 1) : -1;
    if (in >= 0) close(in);
    int pid = 0;
    char other[200] = {};
    if (n > 0 && sscanf(buf, "nrtprofd %d capture %199s", &pid, other) == 2 && pid > 0 &&
        (kill(pid, 0) == 0 || errno == EPERM)) {
      return absl::AlreadyExistsError(
          absl::StrCat(dir, " is in use by capture '", other, "' of nrtprofd (pid ", pid,
                       "); choose another folder, or wait for it"));
    }
    unlink(path.c_str());  // its daemon is gone: take the folder over
  }
  return absl::AlreadyExistsError(absl::StrCat(dir, " is in use by another capture"));
}

void ReleaseFolder(const std::string& dir) {
  unlink(absl::StrCat(dir, "/", kClaimFile).c_str());
}

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

struct CollectorCore::Stream {
  Stream(StreamId id, const nrtprof::Hello& hello, const IngestLimits& limits, ControlSender send)
      : id(id),
        key(KeyOf(hello)),
        pid(hello.pid()),
        executable(hello.executable()),
        wanted_capture(hello.capture_id()),
        send(std::move(send)),
        ingest(hello, limits) {}
  const StreamId id;
  const ProcessKey key;
  const uint32_t pid;
  const std::string executable;
  const std::string wanted_capture;  // Hello.capture_id: empty for any
  std::optional<uint32_t> uid;       // the process's user, if on this machine (Caller::uid)
  ControlSender send;                // used under the core's mu_
  // The shim's counters (cumulative for the process) as its earlier or other streams had them
  // when this one began: Status counts only what this stream adds. Under the core's mu_.
  DropCounts counted_elsewhere;
  std::string capture_id;            // the capture it is in, or empty; under the core's mu_
  std::mutex mu;
  ProcessIngest ingest ABSL_GUARDED_BY(mu);
  // The last EventBatch.flushed stored: the shim has sent what it recorded before that flush.
  uint64_t flushed ABSL_GUARDED_BY(mu) = 0;
};

struct CollectorCore::Capture {
  std::string id;
  std::string output_dir;
  uint32_t stack_depth = 0;
  std::optional<uint32_t> owner;  // the user who asked for it; none: the operator
  uint64_t started_ns = 0;        // CLOCK_MONOTONIC
  uint32_t last_ms = 0;           // StartCaptureRequest.last_ms: from the flight recorder
  uint32_t iterations = 0;        // whole steps first_step.. (StartCaptureRequest.iterations)
  uint64_t first_step = 0;
  std::vector<uint32_t> pids;     // StartCaptureRequest.pids: only these join; empty: any
  bool staged = false;            // written in the daemon's own folder, fetched, then removed
  // Writes the files the capture named (StartCaptureRequest.files); null: the core's sink.
  std::unique_ptr<TraceSink> own_sink;
  uint64_t number = 0;   // order of starting: a process without a capture id joins the latest
  bool starting = true;  // the id is reserved, the folder not made yet
  bool stopping = false;
  std::vector<Stream*> members;          // open streams in the capture
  std::vector<ProcessCapture> finished;  // from members that closed their stream
};

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
    c->started_ns = clock_->MonotonicNs();
    c->last_ms = request.last_ms();
    c->iterations = request.iterations();
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

// Parses recorded batches onto an arena that is emptied for each: no allocation and no
// destructor per event. (A ShimMessage parsed into again would free its batch each time: its
// oneof does.)
class CollectorCore::BatchDecoder {
 public:
  BatchDecoder() : block_(new char[kBlock]), arena_(Options(block_.get())) {}
  // Gives the chunk's batch to `replay` (a ForReplay copy); an error if it does not decode.
  absl::StatusOr<uint64_t> Replay(const FlightRecorder::Chunk& chunk, ProcessIngest* replay) {
    if (!FlightRecorder::Bytes(chunk, &wire_)) {
      return absl::DataLossError("its kept bytes do not decompress");
    }
    // Its events read straight from the bytes (wire_events.h), else parsed by protobuf.
    if (ReadWireBatch(wire_, &rest_, &events_, &scratch_)) {
      return replay->OnRecordedBatch(rest_, events_);
    }
    arena_.Reset();
    auto& m = *google::protobuf::Arena::CreateMessage<nrtprof::ShimMessage>(&arena_);
    if (!m.ParseFromString(wire_) || !m.has_batch()) {
      return absl::DataLossError("its kept bytes are not an event batch");
    }
    return replay->OnBatch(m.batch());
  }

 private:
  // Parsed, an event takes ~170 bytes: the largest batches (8192 events, a recorder-only
  // shim's) fit in the arena's first block.
  static constexpr size_t kBlock = size_t{2} << 20;
  static google::protobuf::ArenaOptions Options(char* block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = kBlock;
    return options;
  }
  std::unique_ptr<char[]> block_;
  google::protobuf::Arena arena_;
  std::string wire_;
  nrtprof::EventBatch rest_;
  std::vector<IngestedEvent> events_;
  std::string scratch_;
};

// Every part of a process read in parts copies its model files: past this, it is read whole.
constexpr uint64_t kMaxPartModelBytes = 16 << 20;

// A process's recorded batches read in parts (CollectorOptions::past_part_events), each
// correlated and written (ProcessTrace::continues) before the next is read.
//
// A part ends, for each thread, where nothing of the thread was open: at the start T of an
// outermost range (depth 0 on the wire). Once that range's record has come, every record of
// the thread that began before T has come too: a thread's records leave its ring in order, a
// range when it ends, and no range was open at T (nor a call: the thread was beginning the
// range). The thread's device work before T has come once each NeuronCore it used (every core,
// if none of its device work has come yet) has sent an event from past_part_device_settle_ns
// after T: a core's events come in its order, and a fetch of the runtime's system trace brings
// every core's up to its time. Device work
// goes with the thread that submitted it, so each part holds its calls' executions and their work.
// Once device events of a thread never seen between outermost ranges come (or device events
// before any clock point), the rest of the process is one part. The parts are matched alone:
// one whose counts disagree falls back to containment alone, where the whole process would have
// for all of its thread.
class CollectorCore::PartReader {
 public:
  PartReader(CollectorCore* core, const Capture* capture, const Recorded& recorded,
             std::vector<std::string>* notes)
      : core_(core),
        capture_(capture),
        recorded_(recorded),
        part_events_(core->options_.past_part_events),
        settle_ns_(core->options_.past_part_device_settle_ns),
        next_attempt_(part_events_) {
    replay_ = core->BeginReplay(capture, recorded, 2 * part_events_ + 8192, notes, &final_,
                                /*in_parts=*/true);
    // Every part copies the model files: a process with big ones is read whole.
    sliceable_ = replay_->model_bytes() <= kMaxPartModelBytes;
    // Read whole from the start, BeginReplay kept the newest and said so; in parts, what the
    // bound leaves out of a part (one that could not be cut) is said at the last.
    unsaid_overflow_from_ = sliceable_ ? replay_->daemon_drops().daemon_overflow : UINT64_MAX;
    notes_ = notes;
  }

  ProcessCapture Next(BatchDecoder* decoder, Part* part) {
    part->first = parts_ == 0;
    for (;;) {
      if (sliceable_ && replay_->capture_events().size() >= next_attempt_) {
        if (std::optional<ProcessCapture> taken = Cut(); taken) {
          ++parts_;
          part->last = false;
          next_attempt_ = replay_->capture_events().size() + part_events_;
          return std::move(*taken);
        }
        next_attempt_ = replay_->capture_events().size() + part_events_ / 4;
      }
      if (chunk_ == recorded_.chunks.size()) break;
      core_->ReplayChunk(capture_, *recorded_.chunks[chunk_++], recorded_.stream->pid, decoder,
                         replay_.get());
    }
    if (const uint64_t overflow = replay_->daemon_drops().daemon_overflow;
        overflow > unsaid_overflow_from_) {
      notes_->push_back(absl::StrFormat(
          "pid %d: %d of its events in the window were left out: from some point on they could "
          "not be read in parts, and the daemon keeps at most %d events of a process at once "
          "(nrtprofd --max_events_per_process); ask for a shorter window, or raise the bound",
          recorded_.stream->pid, overflow - unsaid_overflow_from_,
          core_->options_.limits.max_events_per_process));
    }
    ProcessCapture last = replay_->TakeCapture();
    last.final = final_;
    last.stream_closed = recorded_.closed;
    part->last = true;
    return last;
  }

 private:
  // Per thread and core, what decides a cut, kept from one attempt to the next: each attempt
  // reads only the events that came since. Threads and cores are few: looked up by a scan, the
  // one found last first.
  struct Thread {
    uint32_t tid = 0;
    std::vector<uint64_t> outermost;  // starts of its depth-0 ranges not yet in a part
    std::vector<int32_t> cores;       // where its device work ran
    uint64_t cut = 0;                 // this attempt's: its events before it settle; 0: none
    bool ever_outermost = false;      // it had a depth-0 range
  };
  struct Core {
    int32_t nc_idx = 0;
    uint64_t latest = 0;  // its latest device event's start
  };

  Thread& ThreadOf(uint32_t tid) {
    if (last_thread_ < threads_.size() && threads_[last_thread_].tid == tid) {
      return threads_[last_thread_];
    }
    for (last_thread_ = 0; last_thread_ < threads_.size(); ++last_thread_) {
      if (threads_[last_thread_].tid == tid) return threads_[last_thread_];
    }
    threads_.push_back({tid, {}, {}, 0, false});
    return threads_.back();
  }

  Core& CoreOf(int32_t nc) {
    if (last_core_ < cores_.size() && cores_[last_core_].nc_idx == nc) return cores_[last_core_];
    for (last_core_ = 0; last_core_ < cores_.size(); ++last_core_) {
      if (cores_[last_core_].nc_idx == nc) return cores_[last_core_];
    }
    cores_.push_back({nc, 0});
    return cores_.back();
  }

  // The events before each thread's cut, if they are enough for a part.
  std::optional<ProcessCapture> Cut() {
    const IngestedEvents& events = replay_->capture_events();
    // Each new event's start on the host's clock (device events from their core's, as the
    // correlator maps them).
    std::optional<ClockMap> clock;
    host_.resize(events.size());
    for (size_t i = scanned_; i < events.size(); ++i) {
      const IngestedEvent& e = events[i];
      host_[i] = e.start_ns;
      if (e.kind == nrtprof::EVENT_RANGE && e.depth == 0) {
        ThreadOf(e.tid).outermost.push_back(e.start_ns);
      }
      if (e.kind != nrtprof::EVENT_DEVICE_EXEC && e.kind != nrtprof::EVENT_DEVICE_OP &&
          e.kind != nrtprof::EVENT_DEVICE_DMA) {
        continue;
      }
      if (!e.host_clock) {
        if (!clock) clock.emplace(replay_->clock_syncs());
        if (!clock->ToHost(e.nc_idx, e.start_ns, &host_[i])) {
          sliceable_ = false;  // no clock point yet: read it whole, as the correlator counts it
          return std::nullopt;
        }
      }
      Core& core = CoreOf(e.nc_idx);
      core.latest = std::max(core.latest, host_[i]);
      std::vector<int32_t>& used = ThreadOf(e.tid).cores;
      if (std::find(used.begin(), used.end(), e.nc_idx) == used.end()) used.push_back(e.nc_idx);
    }
    scanned_ = events.size();
    for (Thread& t : threads_) {
      t.cut = 0;
      if (t.outermost.empty()) {
        if (!t.cores.empty() && !t.ever_outermost) {
          sliceable_ = false;  // device work of a thread never seen between ranges
          return std::nullopt;
        }
        continue;
      }
      t.ever_outermost = true;
      // Its cores say how far its device work has come; a thread none of whose device work
      // has come yet goes by every core's (a program that fetches the system trace itself
      // sends it late; a thread's first executions may be on their way). No core yet: no cut.
      if (cores_.empty()) continue;
      uint64_t bound = UINT64_MAX;
      for (const Core& core : cores_) {
        if (!t.cores.empty() &&
            std::find(t.cores.begin(), t.cores.end(), core.nc_idx) == t.cores.end()) {
          continue;
        }
        bound = std::min(bound, core.latest > settle_ns_ ? core.latest - settle_ns_ : 0);
      }
      for (uint64_t start : t.outermost) {
        if (start <= bound) t.cut = std::max(t.cut, start);
      }
    }
    settled_.assign(events.size(), 0);
    size_t n = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      if (host_[i] < ThreadOf(events[i].tid).cut) {
        settled_[i] = 1;
        ++n;
      }
    }
    if (n < part_events_ / 2) return std::nullopt;
    ProcessCapture part = replay_->TakePart(settled_);
    // What stays, as the events that stay.
    size_t kept = 0;
    for (size_t i = 0; i < settled_.size(); ++i) {
      if (settled_[i] == 0) host_[kept++] = host_[i];
    }
    host_.resize(kept);
    scanned_ = kept;
    for (Thread& t : threads_) {
      t.outermost.erase(std::remove_if(t.outermost.begin(), t.outermost.end(),
                                       [&](uint64_t start) { return start < t.cut; }),
                        t.outermost.end());
    }
    return part;
  }

  CollectorCore* const core_;
  const Capture* const capture_;
  const Recorded& recorded_;
  const uint64_t part_events_;
  const uint64_t settle_ns_;
  std::unique_ptr<ProcessIngest> replay_;
  bool final_ = false;
  bool sliceable_ = true;
  uint64_t unsaid_overflow_from_;  // the replay's overflow count past which none was said
  std::vector<std::string>* notes_;
  size_t chunk_ = 0;
  uint64_t parts_ = 0;
  uint64_t next_attempt_;
  std::vector<Thread> threads_;
  std::vector<Core> cores_;
  size_t last_thread_ = 0, last_core_ = 0;
  size_t scanned_ = 0;            // events read by Cut so far
  std::vector<uint64_t> host_;    // by event: its start on the host's clock
  std::vector<uint8_t> settled_;  // Cut's, by event: it goes in the part
};

absl::Status CollectorCore::WriteStopped(Capture* capture, std::vector<std::string>* notes,
                                         nrtprof::CaptureFiles* files) {
  // A process at a time when every writer can take it so, and nothing needs the whole Trace:
  // clipping to steps works on all of it; the fleet store is handed it.
  std::unique_ptr<TraceStream> stream;
  if (capture->iterations == 0 && !options_.capture_written) {
    TraceSink* sink = capture->own_sink != nullptr ? capture->own_sink.get() : sink_;
    stream = sink->OpenStream(capture->output_dir);
  }
  // A capture of the past is made of what the flight recorder kept, which holds the window's
  // live batches too. Whole steps begin after the start; the seconds before give the
  // correlator the context it matches executions to calls in (clipped away after).
  const bool past = capture->last_ms != 0 || capture->iterations != 0;
  const uint64_t back =
      capture->iterations != 0 ? kStepContextNs : uint64_t{capture->last_ms} * 1'000'000;
  const uint64_t since = capture->started_ns > back ? capture->started_ns - back : 0;
  // Lossless processes' spool files replace what came over the streams. Without any, a capture
  // of the past decodes each process's recorded batches only when it comes to it: it never
  // holds more than one process's events, decoded or correlated.
  if (stream != nullptr && past && !HasSpoolFiles(options_.spool_dir, capture->id)) {
    std::vector<ProcessCapture>().swap(capture->finished);
    std::vector<Recorded> recorded = RecordedStreams(capture, since, UINT64_MAX, notes);
    std::vector<const nrtprof::Hello*> hellos;
    for (const Recorded& r : recorded) hellos.push_back(&r.stream->ingest.hello());
    const std::vector<std::vector<size_t>> order = ProcessOrder(hellos);
    size_t next = 0;
    BatchDecoder decoder;
    std::unique_ptr<PartReader> parts;  // of the process being read in parts
    return StreamCapture(
        capture, stream.get(),
        [&](std::vector<ProcessCapture>* streams, Part* part) {
          streams->clear();
          *part = Part();
          if (parts == nullptr) {
            if (next == order.size()) return false;
            const std::vector<size_t>& group = order[next++];
            const uint64_t part_events = options_.past_part_events;
            if (group.size() == 1 && part_events != 0 &&
                recorded[group[0]].events() > 2 * part_events) {
              parts = std::make_unique<PartReader>(this, capture, recorded[group[0]], notes);
            } else {
              for (size_t i : group) {
                streams->push_back(DecodeRecorded(capture, recorded[i], &decoder, notes));
                // Ended without its final batch: what its rings say it made.
                CountRecordsOfAnEndedProcess(&streams->back());
              }
              return true;
            }
          }
          streams->push_back(parts->Next(&decoder, part));
          if (part->last) {
            CountRecordsOfAnEndedProcess(&streams->back());
            parts.reset();
          }
          return true;
        },
        files);
  }
  if (past) capture->finished = FromRecorder(capture, since, UINT64_MAX, notes);
  // For a user's capture, only the spool files that user made.
  std::vector<std::string> problems;
  ApplySpools(options_.spool_dir, capture->id, options_.limits, &capture->finished, &problems,
              capture->owner);
  // Processes that ended without their final batch: what their rings say they made.
  for (ProcessCapture& pc : capture->finished) CountRecordsOfAnEndedProcess(&pc);
  for (const std::string& p : problems) {
    if (options_.log) options_.log(absl::StrCat("capture '", capture->id, "': ", p));
  }
  if (stream == nullptr) return WriteCapture(capture, files);
  std::vector<ProcessCapture>& raw = capture->finished;
  const std::vector<std::vector<size_t>> order = ProcessOrder(raw);
  size_t next = 0;
  return StreamCapture(
      capture, stream.get(),
      [&](std::vector<ProcessCapture>* streams, Part* part) {
        if (next == order.size()) return false;
        *part = Part();
        streams->clear();
        for (size_t i : order[next]) streams->push_back(std::move(raw[i]));
        ++next;
        return true;
      },
      files);
}

// The capture's processes are correlated, summed up and written one by one, each freed before
// the next is asked for, so that the capture never holds more than one process's Trace and
// lanes: the files and the reply are WriteCapture's.
absl::Status CollectorCore::StreamCapture(Capture* capture, TraceStream* stream,
                                          const NextProcess& next, nrtprof::CaptureFiles* out) {
  CaptureCorrelator correlator(
      capture->id, clock_->RealtimeNs() - static_cast<int64_t>(clock_->MonotonicNs()));
  SummaryBuilder summary;
  uint64_t events = 0, dropped = 0;
  uint32_t processes = 0;
  absl::Status added;
  std::vector<ProcessCapture> group;
  Part part;
  while (next(&group, &part)) {
    Trace one;
    one.capture_id = capture->id;
    if (part.first && part.last) {
      std::vector<ProcessCapture*> streams;
      for (ProcessCapture& p : group) streams.push_back(&p);
      one.processes.push_back(correlator.Next(streams));
    } else {
      one.processes.push_back(correlator.NextPart(&group[0], part.first, part.last));
    }
    one.realtime_offset_ns = correlator.header().realtime_offset_ns;
    const ProcessTrace& p = one.processes.back();
    events += p.ranges.size() + p.calls.size() + p.device.size();
    dropped += p.drops.total();
    if (part.first) ++processes;
    summary.Add(one);
    if (absl::Status s = stream->Add(one); added.ok() && !s.ok()) added = s;
  }
  std::vector<ProcessCapture>().swap(group);
  std::vector<ProcessCapture>().swap(capture->finished);
  const Trace& header = correlator.header();
  const Summary s = summary.Finish(header);
  std::vector<std::string> written;
  absl::Status wrote = stream->Finish(header, s, &written);
  if (wrote.ok()) wrote = added;
  out->set_output_dir(capture->output_dir);
  for (const std::string& f : written) out->add_files(f);
  out->set_summary_text(FormatSummary(s));
  out->set_events(events);
  out->set_events_dropped(dropped);
  out->set_processes(processes);
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
    // The capture's big vectors reuse the pages of those it freed (huge_page_allocator.h),
    // until the scope ends.
    HugePageReuse reuse;
    // Correlating and writing take a while: no lock, so streams and other captures go on.
    wrote = WriteStopped(capture.get(), &notes, &files);
  }
  ReleaseFolder(capture->output_dir);
  for (const std::string& n : notes) files.add_notes(n);
  // The capture's memory is free now: give it back to the system. glibc keeps much of it in
  // its arenas otherwise (~170 bytes per event of the capture, measured), so that between
  // captures the daemon would hold memory no stream needs.
  malloc_trim(0);
  RemoveCaptureSpool(options_.spool_dir, capture->id);

  std::lock_guard<std::mutex> lock(mu_);
  --stops_in_flight_;
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

nrtprof::StatusReply CollectorCore::Status(Caller caller) {
  nrtprof::StatusReply reply;
  reply.set_address(options_.address);
  reply.set_daemon_version(options_.daemon_version);
  reply.set_events_received(events_received_.load());
  if (options_.add_status) options_.add_status(&reply);
  std::lock_guard<std::mutex> lock(mu_);
  reply.set_uptime_ms((clock_->MonotonicNs() - started_ns_) / 1'000'000);
  reply.set_final_batches_alone(final_batches_alone_);
  DropCounts drops = closed_drops_;
  const bool all = IsOperator(caller);
  for (const auto& [id, s] : streams_) {
    if (!all && s->uid != caller.uid) continue;  // another user's program: not this caller's to see
    nrtprof::ConnectedProcess* p = reply.add_processes();
    p->set_pid(s->pid);
    p->set_executable(s->executable);
    p->set_capture_id(s->capture_id);
    std::lock_guard<std::mutex> stream_lock(s->mu);
    p->set_events_received(s->ingest.events_received());
    p->set_last_step(s->ingest.last_step());
    drops += StreamsOwnDrops(*s);
  }
  for (auto [reason, events] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"ring_full", drops.ring_full},
           {"daemon_away", drops.daemon_away},
           {"spool_full", drops.spool_full},
           {"device_overwritten", drops.device_overwritten},
           {"oversized", drops.oversized},
           {"no_memory", drops.no_memory},
           {"device_malformed", drops.device_malformed},
           {"daemon_overflow", drops.daemon_overflow}}) {
    nrtprof::DropReason* d = reply.add_dropped();
    d->set_reason(reason);
    d->set_events(events);
  }
  reply.mutable_dropped_by_lane()->set_framework(drops.by_lane.framework);
  reply.mutable_dropped_by_lane()->set_runtime(drops.by_lane.runtime);
  reply.mutable_dropped_by_lane()->set_hardware(drops.by_lane.hardware);
  reply.set_captures_written(captures_written_);
  for (const auto& [id, c] : captures_) {
    if (c->starting || !MayControl(caller, c->owner)) continue;
    nrtprof::CaptureInProgress* p = reply.add_captures();
    p->set_capture_id(id);
    p->set_running_ms((clock_->MonotonicNs() - c->started_ns) / 1'000'000);
    p->set_processes(static_cast<uint32_t>(c->members.size()));
    p->set_last_ms(c->last_ms);
    p->set_iterations(c->iterations);
    p->set_first_step(c->first_step);
    p->set_output_dir(c->output_dir);
  }
  if (recorder_ != nullptr) {
    const uint64_t now = clock_->MonotonicNs();
    std::vector<uint64_t> emptied;
    recorder_->Expire(now, &emptied);
    ForgetEmptied(emptied);
    const FlightRecorder::Stats stats = recorder_->stats();
    nrtprof::FlightRecorderStatus* r = reply.mutable_flight_recorder();
    r->set_seconds_limit(options_.flight_recorder_limits.max_age_ns / 1'000'000'000);
    r->set_bytes_limit(options_.flight_recorder_limits.max_bytes);
    r->set_bytes(stats.bytes);
    r->set_batches(stats.chunks);
    r->set_events(stats.events);
    r->set_oldest_age_ms(stats.oldest_ns != 0 && now > stats.oldest_ns
                             ? (now - stats.oldest_ns) / 1'000'000
                             : 0);
    r->set_evicted_events(stats.evicted_events);
  }
  return reply;
}

std::vector<CollectorCore::Recorded> CollectorCore::RecordedStreams(
    const Capture* capture, uint64_t since_ns, uint64_t until_ns,
    std::vector<std::string>* notes) {
  std::vector<uint64_t> emptied;
  recorder_->Expire(clock_->MonotonicNs(), &emptied);
  const FlightRecorder::Stats stats = recorder_->stats();
  auto chunks = recorder_->Since(since_ns, until_ns);
  // The streams that decode them, and may be in this capture.
  std::vector<Recorded> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ForgetEmptied(emptied);
    for (auto& [id, list] : chunks) {
      std::shared_ptr<Stream> s;
      bool closed = false;
      if (auto it = streams_.find(id); it != streams_.end()) {
        s = it->second;
      } else if (auto c = recorded_closed_.find(id); c != recorded_closed_.end()) {
        s = c->second;
        closed = true;
      }
      if (s == nullptr || (capture != nullptr && !MayJoin(*s, *capture))) continue;
      work.push_back({std::move(s), std::move(list), closed});
    }
  }
  // Only when the window lost something: after a quiet spell the recorder reaches back less
  // far than asked for, yet held everything that came since. Only for a look back (--last): a
  // capture of whole steps asked for no span of the past, and its "asked for" would be the wait.
  if (capture != nullptr && capture->last_ms != 0 && stats.evicted_events != 0 &&
      stats.newest_evicted_ns >= since_ns) {
    const uint64_t now = clock_->MonotonicNs();
    const double held_s =
        stats.oldest_ns != 0 && now > stats.oldest_ns ? (now - stats.oldest_ns) / 1e9 : 0.0;
    notes->push_back(absl::StrFormat(
        "the flight recorder held only the last %.1f s of the %.1f s asked for (its bounds: %u s, "
        "%u MiB; %u events evicted since the daemon started)",
        held_s, (now - since_ns) / 1e9,
        static_cast<unsigned>(options_.flight_recorder_limits.max_age_ns / 1'000'000'000),
        static_cast<unsigned>(options_.flight_recorder_limits.max_bytes >> 20),
        static_cast<unsigned>(stats.evicted_events)));
  }
  return work;
}

std::unique_ptr<ProcessIngest> CollectorCore::BeginReplay(const Capture* capture,
                                                          const Recorded& recorded,
                                                          std::optional<uint64_t> reserve,
                                                          std::vector<std::string>* notes,
                                                          bool* final, bool in_parts) {
  Stream* s = recorded.stream.get();
  std::unique_ptr<ProcessIngest> replay;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    replay = s->ingest.ForReplay(recorded.chunks.front()->sequence - 1,
                                 /*models=*/capture != nullptr && !capture->id.empty());
    *final = s->ingest.final();
  }
  uint64_t events = recorded.events();
  // More than the daemon keeps of a process: the newest are kept, as the recorder keeps the
  // newest batches -- what a look back asks for, the seconds just before. A capture of whole
  // steps keeps its first, as a live capture does: its steps begin at the start. Read in parts,
  // the daemon holds a part at a time, and the bound is each part's.
  const uint64_t bound = options_.limits.max_events_per_process;
  const bool parts_bounded = in_parts && replay->model_bytes() <= kMaxPartModelBytes;
  if (events > bound && !parts_bounded && (capture == nullptr || capture->iterations == 0)) {
    replay->DropOldest(events - bound);
    notes->push_back(absl::StrFormat(
        "pid %d: the oldest %d of its %d events in the window were left out: the daemon keeps "
        "at most %d events of a process (nrtprofd --max_events_per_process); ask for a shorter "
        "window, or raise the bound",
        s->pid, events - bound, events, bound));
    events = bound;
  }
  replay->BeginCapture(reserve ? std::min(*reserve, events) : events);
  return replay;
}

void CollectorCore::ReplayChunk(const Capture* capture, const FlightRecorder::Chunk& chunk,
                                uint32_t pid, BatchDecoder* decoder, ProcessIngest* replay) {
  if (absl::StatusOr<uint64_t> ack = decoder->Replay(chunk, replay); !ack.ok() && options_.log) {
    options_.log(absl::StrCat(capture != nullptr ? "capture '" + capture->id + "'" : "metrics",
                              ": a recorded batch of pid ", pid,
                              " does not decode: ", ack.status().message()));
  }
}

ProcessCapture CollectorCore::DecodeRecorded(const Capture* capture, const Recorded& recorded,
                                             BatchDecoder* decoder,
                                             std::vector<std::string>* notes) {
  bool final = false;
  std::unique_ptr<ProcessIngest> replay =
      BeginReplay(capture, recorded, std::nullopt, notes, &final);
  for (const auto& chunk : recorded.chunks) {
    ReplayChunk(capture, *chunk, recorded.stream->pid, decoder, replay.get());
  }
  ProcessCapture out = replay->TakeCapture();
  out.final = final;
  out.stream_closed = recorded.closed;
  return out;
}

std::vector<ProcessCapture> CollectorCore::FromRecorder(const Capture* capture, uint64_t since_ns,
                                                        uint64_t until_ns,
                                                        std::vector<std::string>* notes) {
  std::vector<ProcessCapture> processes;
  BatchDecoder decoder;
  for (const Recorded& r : RecordedStreams(capture, since_ns, until_ns, notes)) {
    processes.push_back(DecodeRecorded(capture, r, &decoder, notes));
  }
  return processes;
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

void CollectorCore::FoldMetrics(Metrics* metrics) {
  if (recorder_ == nullptr) return;
  std::lock_guard<std::mutex> lock(metrics_mu_);
  const uint64_t now = clock_->MonotonicNs();
  if (now < kMetricsSettleNs) return;
  const uint64_t until = now - kMetricsSettleNs;
  if (until <= metrics_folded_ns_) return;
  HugePageReuse reuse;  // as a capture's (StopCapture); ends after the Trace
  std::vector<std::string> notes;
  // The fold counts what ended in [begin, until) (ClipToEnds), read from all that arrived from
  // a settle before `begin` up to now: the device events of a call arrive after it (the shim
  // fetches the runtime's trace every few ms, and sends in batches), so a call near the end
  // finds its executions, and one just before the start takes its own instead of leaving them
  // to this fold as uncorrelated. Cutting by arrival, the fold split calls from their device
  // events: executions without a model ("unknown"), device time "(uncorrelated)" (issue 36).
  const uint64_t begin = metrics_folded_ns_;
  std::vector<ProcessCapture> processes = FromRecorder(
      nullptr, begin > kMetricsSettleNs ? begin - kMetricsSettleNs : 0, UINT64_MAX, &notes);
  metrics_folded_ns_ = until;
  if (processes.empty()) return;
  // A process whose monotonic clock is not the daemon's (on another machine: they differ by
  // far more than a second) is put on it through the wall clock both read.
  const int64_t daemon_offset =
      clock_->RealtimeNs() - static_cast<int64_t>(clock_->MonotonicNs());
  std::map<std::pair<uint32_t, std::string>, int64_t> shifts;
  for (const ProcessCapture& p : processes) {
    const int64_t shift = p.realtime_offset_ns - daemon_offset;
    if (p.realtime_offset_ns != 0 && (shift > 1'000'000'000 || shift < -1'000'000'000)) {
      shifts[{p.hello.pid(), p.hello.host()}] = shift;
    }
  }
  Trace trace = Correlate("metrics", std::move(processes), daemon_offset);
  ClipToEnds(begin, until, &trace, [&shifts](const ProcessTrace& p) -> int64_t {
    auto it = shifts.find({p.pid, p.host});
    return it == shifts.end() ? 0 : it->second;
  });
  metrics->Add(trace);
}

absl::StatusOr<nrtprof::TopReply> CollectorCore::Top(const nrtprof::TopRequest& request,
                                                      Caller caller) {
  if (recorder_ == nullptr) {
    return absl::FailedPreconditionError(
        "the daemon keeps no flight recorder (nrtprofd --flight_recorder_seconds 0), so it has "
        "no recent events to show");
  }
  const uint64_t window_ns = (request.window_ms() == 0 ? 5000 : request.window_ms()) * 1'000'000ull;
  const uint64_t now = clock_->MonotonicNs();
  const uint64_t until = now > kMetricsSettleNs ? now - kMetricsSettleNs : 0;
  const uint64_t since = until > window_ns ? until - window_ns : 0;
  // Whose processes: an unnamed scope of the caller's (every process, for the operator).
  Capture scope;
  if (!IsOperator(caller)) scope.owner = caller.uid;
  std::vector<std::string> notes;
  std::vector<ProcessCapture> processes = FromRecorder(&scope, since, until, &notes);
  const Trace trace = Correlate("top", std::move(processes),
                                clock_->RealtimeNs() - static_cast<int64_t>(now));
  return ComputeTop(trace, until - since);
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
