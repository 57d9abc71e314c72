// CollectorCore's captures of the past and of whole steps: the flight recorder's batches of a
// window decoded (BatchDecoder), a big process read in parts (PartReader), each process
// correlated and written before the next (WriteStopped, StreamCapture).
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/collector_core.h"
#include "daemon/collector_core_state.h"
#include "trace/correlator.h"
#include "trace/huge_page_allocator.h"
#include "daemon/spool_replay.h"
#include "trace/step_window.h"
#include "trace/summary.h"
#include "trace/trace_model.h"
#include "daemon/wire_events.h"
#include "google/protobuf/arena.h"

namespace nrtprof::daemon {
namespace {

// How far before a capture of whole steps its recorded batches are read: the correlator's
// context for the first step's executions (clipped away after).
constexpr uint64_t kStepContextNs = 2'000'000'000;

}  // namespace

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
// every core's up to its time. Device work goes with the thread that submitted it, so each part
// holds its calls' executions and their work. Which side of T an execution is on is not read
// from its time alone: mapped to the host's clock it may be off by the mapping's error
// (kCauseSlackNs), and a range's first call starts its execution a microsecond or so after the
// range began. A part takes as many of the thread's executions, in start order, as its
// nrt_execute calls before T ran (the correlator pairs them so), the work inside each going
// with it, where that count puts the boundary within the mapping's error of T; time decides
// otherwise (events lost, outcomes uncertain). Once device events of a thread never seen
// between outermost ranges come (or device events before any clock point), the rest of the
// process is one part. The parts are matched alone: one whose counts disagree falls back to
// containment alone, where the whole process would have for all of its thread.
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
  struct ExecuteCall {
    uint64_t start_ns;
    uint32_t runs;  // executions it ran; kUncertainRuns: it reported an error
  };
  static constexpr uint32_t kUncertainRuns = UINT32_MAX;
  struct Thread {
    uint32_t tid = 0;
    std::vector<uint64_t> outermost;         // starts of its depth-0 ranges not yet in a part
    std::vector<int32_t> cores;              // where its device work ran
    std::vector<ExecuteCall> execute_calls;  // its nrt_execute calls not yet in a part
    std::vector<uint64_t> executions;        // host starts of its executions not yet in a part
    // This attempt's: its host events before `cut` settle (0: none), its executions and the
    // work inside them before `execution_cut`, its other device events before `device_cut`.
    uint64_t cut = 0, execution_cut = 0, device_cut = 0;
    bool ever_outermost = false;  // it had a depth-0 range
  };
  // What decides an event's part (kind_): its thread's cut, execution_cut or device_cut.
  enum Kind : uint8_t { kHost, kExecution, kOtherDevice };
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
    threads_.push_back(Thread());
    threads_.back().tid = tid;
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

  // Whether an execution so named is a collective's (trace_model.h): a few names, each looked
  // up once it has come.
  bool CollectiveName(uint32_t name_iid) {
    for (const auto& [iid, collective] : execution_names_) {
      if (iid == name_iid) return collective;
    }
    const std::string* name = replay_->interned(name_iid);
    if (name == nullptr) return false;
    const bool collective = *name == kCcExecBarrier || *name == kCcRunning;
    execution_names_.emplace_back(name_iid, collective);
    return collective;
  }

  // The events before each thread's cut, if they are enough for a part.
  std::optional<ProcessCapture> Cut() {
    const IngestedEvents& events = replay_->capture_events();
    // Each new event's start on the host's clock (device events from their core's, as the
    // correlator maps them).
    std::optional<ClockMap> clock;
    host_.resize(events.size());
    thread_.resize(events.size());
    kind_.resize(events.size());
    for (size_t i = scanned_; i < events.size(); ++i) {
      const IngestedEvent& e = events[i];
      host_[i] = e.start_ns;
      kind_[i] = kHost;
      Thread& thread = ThreadOf(e.tid);
      thread_[i] = static_cast<uint8_t>(std::min<size_t>(&thread - threads_.data(), kManyThreads));
      if (e.kind == nrtprof::EVENT_RANGE && e.depth == 0) thread.outermost.push_back(e.start_ns);
      if (e.kind == nrtprof::EVENT_API_CALL && (e.function == nrtprof::API_NRT_EXECUTE ||
                                                e.function == nrtprof::API_NRT_EXECUTE_REPEAT)) {
        thread.execute_calls.push_back(
            {e.start_ns, e.status == 0 ? std::max<uint32_t>(e.repeat, 1) : kUncertainRuns});
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
      // An asynchronous request's work is matched by its number, and a collective's by its
      // own calls, not in order with nrt_execute's: time decides.
      if (e.nrta_seq == 0 &&
          (e.kind != nrtprof::EVENT_DEVICE_EXEC || !CollectiveName(e.name_iid))) {
        const bool execution = e.kind == nrtprof::EVENT_DEVICE_EXEC && e.device.parent == 0;
        if (execution) thread.executions.push_back(host_[i]);
        kind_[i] =
            execution || e.device.parent != 0 || e.device.exec != 0 ? kExecution : kOtherDevice;
      }
      Core& core = CoreOf(e.nc_idx);
      core.latest = std::max(core.latest, host_[i]);
      std::vector<int32_t>& used = thread.cores;
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
    for (Thread& t : threads_) CutDevice(&t);
    // By thread_, not the events' own 120 bytes each, read again on every attempt: they were
    // most of the attempt's time (cache misses).
    uint64_t cuts[kManyThreads][3];
    for (size_t t = 0; t < threads_.size() && t < kManyThreads; ++t) {
      cuts[t][kHost] = threads_[t].cut;
      cuts[t][kExecution] = threads_[t].execution_cut;
      cuts[t][kOtherDevice] = threads_[t].device_cut;
    }
    settled_.assign(events.size(), 0);
    size_t n = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      uint64_t cut = 0;
      if (thread_[i] != kManyThreads) {
        cut = cuts[thread_[i]][kind_[i]];
      } else {
        const Thread& t = ThreadOf(events[i].tid);
        cut = kind_[i] == kHost ? t.cut : kind_[i] == kExecution ? t.execution_cut : t.device_cut;
      }
      const bool settled = host_[i] < cut;
      settled_[i] = settled;
      n += settled;
    }
    if (n < part_events_ / 2) return std::nullopt;
    ProcessCapture part = replay_->TakePart(settled_, n);
    // What stays, as the events that stay.
    size_t kept = 0;
    for (size_t i = 0; i < settled_.size(); ++i) {
      if (settled_[i] == 0) {
        host_[kept] = host_[i];
        kind_[kept] = kind_[i];
        thread_[kept++] = thread_[i];
      }
    }
    host_.resize(kept);
    thread_.resize(kept);
    kind_.resize(kept);
    scanned_ = kept;
    for (Thread& t : threads_) {
      t.outermost.erase(std::remove_if(t.outermost.begin(), t.outermost.end(),
                                       [&](uint64_t start) { return start < t.cut; }),
                        t.outermost.end());
      t.execute_calls.erase(
          std::remove_if(t.execute_calls.begin(), t.execute_calls.end(),
                         [&](const ExecuteCall& c) { return c.start_ns < t.cut; }),
          t.execute_calls.end());
      t.executions.erase(std::remove_if(t.executions.begin(), t.executions.end(),
                                        [&](uint64_t start) { return start < t.execution_cut; }),
                         t.executions.end());
    }
    return part;
  }

  // Where thread `t`'s device events are cut, given its host events' cut: its executions and
  // the work inside them after as many executions as its nrt_execute calls before the cut ran,
  // when that count agrees with time within the clock mapping's error; its other device work
  // at the cut, or before it if the first execution past the count maps before it. Otherwise
  // all at the cut, by time alone.
  void CutDevice(Thread* t) {
    t->execution_cut = t->device_cut = t->cut;
    if (t->cut == 0) return;
    uint64_t runs = 0;
    for (const ExecuteCall& c : t->execute_calls) {
      if (c.start_ns >= t->cut) continue;
      if (c.runs == kUncertainRuns) return;
      runs += c.runs;
    }
    if (runs == 0) return;
    std::vector<uint64_t>& executions = t->executions;
    if (!std::is_sorted(executions.begin(), executions.end())) {
      std::sort(executions.begin(), executions.end());
    }
    // Executions before every call still here are not theirs (a look back's first ones, whose
    // calls were before the window): they are not counted.
    uint64_t first_call = UINT64_MAX;
    for (const ExecuteCall& c : t->execute_calls) first_call = std::min(first_call, c.start_ns);
    size_t skip = 0;
    while (skip < executions.size() && executions[skip] + kCauseSlackNs < first_call) ++skip;
    if (runs > executions.size() - skip) return;
    // The part's last execution, and the one after it (if it has come).
    const uint64_t last = executions[skip + runs - 1];
    if (last >= t->cut + kCauseSlackNs) return;
    if (skip + runs == executions.size()) {
      t->execution_cut = std::max(t->cut, last + 1);
      return;
    }
    const uint64_t next = executions[skip + runs];
    if (next + kCauseSlackNs < t->cut) return;
    t->execution_cut = next;
    t->device_cut = std::min(t->cut, next);
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
  std::vector<std::pair<uint32_t, bool>> execution_names_;  // CollectiveName's
  size_t last_thread_ = 0, last_core_ = 0;
  size_t scanned_ = 0;  // events read by Cut so far
  // By event: its start on the host's clock, and its thread's index in threads_ (kManyThreads
  // from there on: found by its tid).
  static constexpr size_t kManyThreads = 255;
  std::vector<uint64_t> host_;
  std::vector<uint8_t> thread_;
  std::vector<uint8_t> kind_;     // Kind
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
  Trace header = correlator.header();  // without processes: a cheap copy
  header.trigger = capture->trigger;
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
    // A capture of whole steps replays the seconds before its start as context for the
    // correlator only: what the process dropped then (a flood of ops at its start, before the
    // steps) is not the capture's. Its drops count from the last batch that came before it
    // began.
    uint64_t drops_after = recorded.chunks.front()->sequence - 1;
    if (capture != nullptr && capture->iterations != 0) {
      for (const auto& chunk : recorded.chunks) {
        if (chunk->arrival_ns > capture->started_ns) break;
        drops_after = chunk->sequence;
      }
    }
    replay = s->ingest.ForReplay(recorded.chunks.front()->sequence - 1,
                                 /*models=*/capture != nullptr && !capture->id.empty(),
                                 drops_after);
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

void CollectorCore::ForEachRecordedProcess(
    const Capture* capture, uint64_t since_ns, uint64_t until_ns, std::vector<std::string>* notes,
    const std::function<void(std::vector<ProcessCapture>*)>& each) {
  const std::vector<Recorded> recorded = RecordedStreams(capture, since_ns, until_ns, notes);
  std::vector<const nrtprof::Hello*> hellos;
  for (const Recorded& r : recorded) hellos.push_back(&r.stream->ingest.hello());
  BatchDecoder decoder;
  std::vector<ProcessCapture> streams;
  for (const std::vector<size_t>& group : ProcessOrder(hellos)) {
    streams.clear();
    for (size_t i : group) streams.push_back(DecodeRecorded(capture, recorded[i], &decoder, notes));
    each(&streams);
  }
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

}  // namespace nrtprof::daemon
