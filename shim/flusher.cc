#include "shim/flusher.h"

#include <dirent.h>
#include <errno.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "shim/process_info.h"
#include "shim/symbolizer.h"
#include "shim/utf8.h"

namespace nrtprof::shim {
namespace {

// One line on stderr, newline added.
void Report(const std::string& line) {
  const std::string text = line + "\n";
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

// Whether this thread is the flusher's (exit() may be called on it: see ProgramThreadsGone).
thread_local bool t_on_flusher_thread = false;

// A file of /proc, read into `buffer` (NUL-terminated) without allocating; false if it cannot.
bool ReadProcFile(const char* path, char* buffer, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = 0;
  while (n + 1 < size) {
    const ssize_t got = read(fd, buffer + n, size - 1 - n);
    if (got <= 0) break;
    n += static_cast<size_t>(got);
  }
  close(fd);
  buffer[n] = '\0';
  return n > 0;
}

// The value of `field` ("Name:", "State:", "SigBlk:") in a /proc status file, or empty.
std::string_view StatusField(const char* status, const char* field) {
  const char* at = strstr(status, field);
  if (at == nullptr) return {};
  at += strlen(field);
  while (*at == ' ' || *at == '\t') ++at;
  const char* end = strchr(at, '\n');
  return std::string_view(at, end != nullptr ? static_cast<size_t>(end - at) : strlen(at));
}

// The names the shim's threads have: the flusher's, and those gRPC 1.51 gives its own (cut to
// 15 bytes by the kernel); a thread gRPC has just made still has its maker's.
bool IsShimThreadName(std::string_view name) {
  for (const char* known : {"nrtprof-flush", "default-executo", "resolver-execut",
                            "grpc_global_tim", "event_engine", "timer_manager",
                            "nexting_thread"}) {
    if (name == known) return true;
  }
  return name.substr(0, 4) == "grpc";
}

constexpr char kNoMemoryLine[] =
    "nrtprof: the profiler ran out of memory (is the process's address space limited, ulimit "
    "-v?); what it could not keep is counted as dropped (no_memory)\n";

// The shortage a failure message names (EMFILE, ENFILE, ENOMEM, ENOBUFS: the process lacks what
// it takes to connect), or 0.
int StarvedError(absl::string_view failure) {
  for (int error : {EMFILE, ENFILE, ENOMEM, ENOBUFS}) {
    if (absl::StrContains(failure, strerror(error))) return error;
  }
  return 0;
}

constexpr uint64_t kFirstBackoffNs = 100'000'000;
constexpr uint64_t kMaxBackoffNs = 5'000'000'000;

// The runtime's system-trace functions, found in the libnrt the program's calls went to (it
// may be dlopen()ed RTLD_LOCAL, out of reach of a global look-up).
SysTraceFunctions ResolveSysTrace(CoreState* core) {
  SysTraceFunctions f;
  void* known = nullptr;
  for (unsigned i = 0; i < kNumApiFunctions && known == nullptr; ++i) {
    known = core->real_functions[i].load(std::memory_order_acquire);
  }
  void* handle = nullptr;
  Dl_info info;
  if (known != nullptr && dladdr(known, &info) != 0 && info.dli_fname != nullptr) {
    handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }
  if (handle == nullptr) handle = dlopen("libnrt.so.1", RTLD_LAZY | RTLD_NOLOAD);
  auto find = [&](const char* name) -> void* {
    return handle != nullptr ? core->real_dlsym(handle, name) : nullptr;
  };
  auto wrapped = [&](ApiFunction fn) -> void* {
    void* p = core->real_functions[fn].load(std::memory_order_acquire);
    return p != nullptr ? p : find(ApiFunctionName(fn));
  };
  f.config_allocate = reinterpret_cast<decltype(f.config_allocate)>(
      find("nrt_sys_trace_config_allocate"));
  f.config_free =
      reinterpret_cast<decltype(f.config_free)>(find("nrt_sys_trace_config_free"));
  f.config_set_max_events_per_nc = reinterpret_cast<decltype(f.config_set_max_events_per_nc)>(
      find("nrt_sys_trace_config_set_max_events_per_nc"));
  f.start = reinterpret_cast<decltype(f.start)>(wrapped(kNrtSysTraceStart));
  f.stop = reinterpret_cast<decltype(f.stop)>(wrapped(kNrtSysTraceStop));
  f.fetch_events = reinterpret_cast<decltype(f.fetch_events)>(wrapped(kNrtSysTraceFetchEvents));
  f.buffer_free = reinterpret_cast<decltype(f.buffer_free)>(wrapped(kNrtSysTraceBufferFree));
  // Failed look-ups leave a message for dlerror(); the program's next dlerror() is its own.
  dlerror();
  return f;
}

// Roughly how many events a document holds, for what is dropped unparsed.
uint64_t CountEvents(const std::string& json) {
  uint64_t n = 0;
  for (size_t at = json.find("\"event_type\":"); at != std::string::npos;
       at = json.find("\"event_type\":", at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

Flusher::Flusher(CoreState* core, DaemonTransport transport)
    : core_(core),
      transport_(std::move(transport)),
      arbiter_(
          kOwnMaxEventsPerCore, [core] { return ResolveSysTrace(core); },
          [this](uint64_t generation, std::string json) {
            OnDocument(generation, std::move(json));
          }),
      stacks_(&strings_, &SymbolizeReturnAddress),
      builder_(&strings_, &stacks_),
      device_parser_(&strings_),
      batcher_(Batcher::Options(), &strings_, &stacks_) {}

bool Flusher::Start() {
  // Signals sent to the process must reach the program's threads, not this one nor gRPC's
  // (created now, they inherit this mask).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  // The channel (and with it gRPC's threads) is created here, on the program's first libnrt
  // call, so that whether a forked child may use gRPC never depends on timing.
  grpc_started_.store(true, std::memory_order_release);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (transport_.tls) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = std::move(transport_.ca_pem);
    tls.pem_cert_chain = std::move(transport_.cert_pem);
    tls.pem_private_key = std::move(transport_.key_pem);
    credentials = grpc::SslCredentials(tls);
    if (!transport_.token.empty()) {
      // Sent as "authorization: Bearer TOKEN" on every call, only over TLS.
      credentials = grpc::CompositeChannelCredentials(
          credentials, grpc::AccessTokenCredentials(transport_.token));
    }
    transport_.token.clear();
  }
  credentials_ = credentials;
  channel_ = grpc::CreateCustomChannel(transport_.target, credentials, args);
  stub_ = nrtprof::Collector::NewStub(channel_);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, kThreadStackBytes);
  pthread_t thread;
  contact_deadline_ns_ = MonotonicNs() + kFirstContactNs;
  const int error = pthread_create(&thread, &attr, &Flusher::RunThread, this);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (error == 0) {
    // The program's first libnrt call waits for the first contact (measured: that call took
    // 35 ms instead of 28 with a daemon on this machine; nothing more without one): a process
    // killed right after it is then known to the daemon.
    std::unique_lock<std::mutex> lock(contact_mu_);
    contact_cv_.wait_for(lock, std::chrono::nanoseconds(kFirstContactNs),
                         [this] { return contact_settled_; });
  }
  if (error != 0) {
    char line[256];
    snprintf(line, sizeof(line),
             "nrtprof: cannot start the profiler's thread (%s); not profiling this process\n",
             strerror(error));
    ssize_t ignored = write(STDERR_FILENO, line, strlen(line));
    (void)ignored;
    return false;
  }
  return true;
}

void* Flusher::RunThread(void* flusher) {
  t_on_flusher_thread = true;
  static_cast<Flusher*>(flusher)->Run();
  return nullptr;
}

void Flusher::OnModelLoaded(uint64_t model_handle, const void* bytes, size_t size) {
  // On the program's thread: an allocation that fails ships the model's size only, or nothing.
  nrtprof::LoadedModel model;
  try {
    model.set_model_handle(model_handle);
    model.set_size(size);
    if (size <= std::min(core_->config.max_model_bytes, kMaxModelFileBytes)) {
      try {
        model.set_model_file(std::string(static_cast<const char*>(bytes), size));
      } catch (const std::bad_alloc&) {
        model.clear_model_file();
      }
    }
    std::lock_guard<std::mutex> lock(queue_mu_);
    models_.push_back(std::move(model));
  } catch (const std::bad_alloc&) {
  }
}

void Flusher::OnDocument(uint64_t generation, std::string json) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (document_bytes_ + json.size() > kMaxQueuedDocumentBytes) {
    documents_dropped_ += CountEvents(json);
    return;
  }
  try {
    documents_.push_back({generation, std::move(json)});
    document_bytes_ += documents_.back().json.size();
  } catch (const std::bad_alloc&) {
    documents_dropped_ += CountEvents(json);
  }
}

void Flusher::FinalFlush(Clock::time_point deadline) {
  if (t_on_flusher_thread) {
    // exit() called by the flusher itself, the program's threads all gone: the flush is done
    // here, in the order of the program's atexit handlers.
    try {
      Final(deadline);
    } catch (const std::bad_alloc&) {
      CountNoMemory(LaneCounts());
    }
    return;
  }
  std::unique_lock<std::mutex> lock(final_mu_);
  final_requested_ = true;
  final_deadline_ = deadline;
  final_cv_.notify_all();
  // A little past the deadline: the flusher closes the stream within it.
  final_cv_.wait_until(lock, deadline + std::chrono::milliseconds(100),
                       [this] { return final_done_; });
}

void Flusher::Run() {
  pthread_setname_np(pthread_self(), "nrtprof-flush");
  char status[4096];
  if (ReadProcFile("/proc/thread-self/status", status, sizeof(status))) {
    shim_signal_mask_ = std::string(StatusField(status, "SigBlk:"));
  }
  clock_.emplace(core_->tick_source);
  try {
    OpenSpool();
  } catch (const std::bad_alloc&) {
    spool_.reset();
    CountNoMemory(LaneCounts());
  }
  while (true) {
    bool final = false;
    Clock::time_point deadline;
    {
      std::lock_guard<std::mutex> lock(final_mu_);
      final = final_requested_;
      deadline = final_deadline_;
    }
    if (final) {
      try {
        Final(deadline);
      } catch (const std::bad_alloc&) {
        CountNoMemory(LaneCounts());
      }
      std::lock_guard<std::mutex> lock(final_mu_);
      final_done_ = true;
      final_cv_.notify_all();
      return;
    }
    try {
      Tick();
    } catch (const std::bad_alloc&) {
      // What waited to be sent goes (it frees memory), counted.
      CountNoMemory(batcher_.DiscardAll());
    }
    // glibc ends a process whose last thread exits with exit(0); the shim's threads must not
    // keep one alive whose program has no thread left (main() called pthread_exit).
    if (ProgramThreadsGone()) exit(0);
    uint64_t wait_ns = kTickNs;
    if (contact_deadline_ns_ != 0) {
      // Until the first contact settles, look every millisecond instead of every tick.
      if (stream_ == nullptr || stream_->ack_seen() || stream_->broken() ||
          MonotonicNs() >= contact_deadline_ns_) {
        contact_deadline_ns_ = 0;
        std::lock_guard<std::mutex> contact(contact_mu_);
        contact_settled_ = true;
        contact_cv_.notify_all();
      } else {
        wait_ns = 1'000'000;
      }
    }
    std::unique_lock<std::mutex> lock(final_mu_);
    final_cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns),
                       [this] { return final_requested_; });
  }
}

nrtprof::Hello Flusher::Hello() {
  nrtprof::Hello hello = BuildHello(core_->config);
  // The start time is worked out from clocks that move between reads: the first one names the
  // process in every Hello (the daemon matches a spool file to its streams by it).
  if (process_start_ns_ == 0) process_start_ns_ = hello.process_start_ns();
  hello.set_process_start_ns(process_start_ns_);
  if (core_->rings_header.load(std::memory_order_acquire) != nullptr) {
    hello.set_rings_fd(core_->rings_fd);
  }
  return hello;
}

void Flusher::OpenSpool() {
  if (core_->config.requested_mode != ShimMode::kLossless) return;
  nrtprof::ShimMessage hello;
  *hello.mutable_hello() = Hello();
  const std::string dir =
      core_->config.spool_dir[0] != '\0' ? core_->config.spool_dir : DefaultSpoolDir();
  auto spool = std::make_unique<SpoolWriter>();
  std::string error;
  if (!spool->Open(dir,
                   SpoolFileName(hello.hello().capture_id(), hello.hello().pid(),
                                 hello.hello().process_start_ns()),
                   core_->config.spool_max_bytes, transport_.trust, &error) ||
      !spool->Append(hello.SerializeAsString())) {
    if (error.empty()) error = "cannot write the spool file";
    Report("nrtprof: NRTPROF_MODE=lossless: " + error + "; running best_effort");
    return;
  }
  spool_ = std::move(spool);
}

void Flusher::Tick() {
  const uint64_t now = MonotonicNs();
  arbiter_.Poll(/*final=*/false);
  ParseDocuments(now);
  DrainRings(now);
  KeepASpareRing();
  TakeModels();
  batcher_.SealIfDue(now);
  ServiceStream(now, /*final=*/false, Clock::now());
  SendReady(/*final=*/false);
  PumpReplay();
  daemon_away_ += batcher_.EnforceBounds();
}

void Flusher::ParseDocuments(uint64_t now_ns) {
  std::deque<QueuedDocument> documents;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    documents.swap(documents_);
    document_bytes_ = 0;
  }
  const bool capturing = core_->recording.load(std::memory_order_relaxed) != 0;
  for (QueuedDocument& doc : documents) {
    uint64_t added = 0;
    try {
      DeviceTraceOutput out;
      std::string error;
      if (!device_parser_.Parse(doc.generation, doc.json, &out, &error)) continue;
      for (const nrtprof::DeviceClockSync& sync : out.clock_syncs) {
        batcher_.AddClockSync(sync, now_ns);
      }
      if (!capturing) continue;
      for (nrtprof::Event& event : out.events) {
        batcher_.AddEvent(now_ns)->Swap(&event);
        ++added;
      }
    } catch (const std::bad_alloc&) {
      LaneCounts lost;
      const uint64_t in_document = CountEvents(doc.json);
      lost.hardware = in_document > added ? in_document - added : 0;
      CountNoMemory(lost);
    }
    doc.json = std::string();  // its memory back at once
  }
}

void Flusher::DrainRings(uint64_t now_ns) {
  threads_snapshot_.clear();
  pthread_mutex_lock(&core_->registry_mu);
  for (ThreadState* ts = core_->threads; ts != nullptr; ts = ts->next) {
    threads_snapshot_.push_back(ts);
  }
  pthread_mutex_unlock(&core_->registry_mu);
  clock_->Anchor();
  for (ThreadState* ts : threads_snapshot_) {
    // Read before draining: a retired thread has committed its last record.
    const bool retired = ts->retired.load(std::memory_order_acquire) != 0;
    const uint32_t tid = ts->tid;
    ts->ring->Drain([&](const Record& record) {
      try {
        scratch_event_.Clear();
        builder_.Build(record, tid, *clock_, &scratch_event_);
        batcher_.AddEvent(now_ns)->Swap(&scratch_event_);
      } catch (const std::bad_alloc&) {
        LaneCounts lost;
        if (record.kind == RecordKind::kRange) {
          lost.framework = 1;
        } else {
          lost.runtime = 1;
        }
        CountNoMemory(lost);
      }
    });
    if (!retired) {
      FaultInAhead(ts->ring);
      continue;
    }
    pthread_mutex_lock(&core_->registry_mu);
    for (ThreadState** link = &core_->threads; *link != nullptr; link = &(*link)->next) {
      if (*link == ts) {
        *link = ts->next;
        break;
      }
    }
    pthread_mutex_unlock(&core_->registry_mu);
    freed_rings_dropped_.runtime += ts->ring->dropped(RecordKind::kApiCall);
    freed_rings_dropped_.framework += ts->ring->dropped(RecordKind::kRange);
    RingsFileHeader* h = core_->rings_header.load(std::memory_order_acquire);
    if (h != nullptr && ts->ring_offset >= 0) {
      // The ring's counts move to the header before its memory goes or is emptied for another
      // thread (its counters then read as zeros), so that a reader after the process's death
      // still finds them.
      for (RecordKind kind : {RecordKind::kApiCall, RecordKind::kRange}) {
        const size_t k = static_cast<size_t>(kind) % kRingsKinds;
        h->retired_committed[k].fetch_add(ts->ring->committed(kind), std::memory_order_relaxed);
        h->retired_dropped[k].fetch_add(ts->ring->dropped(kind), std::memory_order_relaxed);
      }
    }
    // The ring, its pages faulted in, waits for the next new thread (kMaxSpareRings at most).
    ts->ring->Reset();
    ts->range_depth = 0;
    ts->next_correlation_id = ts->correlation_block_end = 0;
    ts->retired.store(0, std::memory_order_relaxed);
    if (!AddSpare(ts)) FreeRing(ts);
  }
}

void Flusher::FreeRing(ThreadState* ts) {
  if (core_->rings_header.load(std::memory_order_acquire) != nullptr && ts->ring_offset >= 0) {
    // Its slot of the rings file then reads as zeros (its counts are in the header).
    fallocate(core_->rings_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, ts->ring_offset,
              static_cast<off_t>(ts->ring_bytes));
  }
  munmap(ts->ring, ts->ring_bytes);
  free(ts);
}

bool Flusher::AddSpare(ThreadState* ts) {
  pthread_mutex_lock(&core_->registry_mu);
  const bool room = core_->spare_count < kMaxSpareRings;
  if (room) {
    ts->next = core_->spare_threads;
    core_->spare_threads = ts;
    ++core_->spare_count;
  }
  pthread_mutex_unlock(&core_->registry_mu);
  return room;
}

void Flusher::KeepASpareRing() {
  pthread_mutex_lock(&core_->registry_mu);
  const bool have = core_->spare_count != 0;
  pthread_mutex_unlock(&core_->registry_mu);
  if (have || core_->new_spare_thread == nullptr) return;
  ThreadState* ts = core_->new_spare_thread();
  if (ts == nullptr) return;  // no memory: new threads fault their rings in as they write
  // As much as the last new threads wrote at once, twice over, within 16 KiB to 1 MiB: a
  // process whose threads make a few calls each does not pay 1 MiB for each (measured: 64
  // long-lived threads started 30 ms apart, 89 MiB peak with every spare at 1 MiB).
  FaultInSlots(ts->ring, std::clamp<uint64_t>(2 * new_thread_slots_, kInitialFaultInSlots,
                                              kSpareRingWarmSlots));
  if (!AddSpare(ts)) FreeRing(ts);
}

void Flusher::CountNoMemory(const LaneCounts& lost) {
  no_memory_ += lost;
  if (no_memory_said_) return;
  no_memory_said_ = true;
  ssize_t ignored = write(STDERR_FILENO, kNoMemoryLine, sizeof(kNoMemoryLine) - 1);
  (void)ignored;
}

bool Flusher::ProgramThreadsGone() {
  if (shim_signal_mask_.empty()) return false;
  // The main thread, once it has called pthread_exit, stays a zombie until the process ends.
  const pid_t pid = getpid();
  char path[64], status[4096];
  snprintf(path, sizeof(path), "/proc/self/task/%d/status", static_cast<int>(pid));
  if (!ReadProcFile(path, status, sizeof(status)) ||
      StatusField(status, "State:").substr(0, 1) != "Z") {
    return false;
  }
  // Every other task must be the shim's: its signals all blocked as the flusher's (gRPC's
  // threads are made by the flusher's, or under its mask in Start), and a name of theirs.
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  bool gone = true;
  while (const dirent* entry = readdir(tasks)) {
    const int tid = atoi(entry->d_name);
    if (tid <= 0 || tid == pid) continue;
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
    if (!ReadProcFile(path, status, sizeof(status))) continue;  // it has just ended
    const std::string_view state = StatusField(status, "State:").substr(0, 1);
    if (state == "Z" || state == "X") continue;
    if (StatusField(status, "SigBlk:") != shim_signal_mask_ ||
        !IsShimThreadName(StatusField(status, "Name:"))) {
      gone = false;
      break;
    }
  }
  closedir(tasks);
  return gone;
}

void Flusher::FaultInAhead(EventRing* ring) {
  const uint64_t written = ring->written_slots();
  const uint64_t recent = written - ring->seen_written_slots();
  // A thread's first writes seen: how much a new thread writes at once, for the next spare.
  // A larger one counts at once; smaller ones bring the estimate down by half each.
  if (ring->seen_written_slots() == 0 && written != 0) {
    new_thread_slots_ = std::max(written, new_thread_slots_ / 2);
  }
  ring->set_seen_written_slots(written);
  if (ring->populated_slots() >= ring->capacity()) return;
  // Room for twice what the thread wrote since the last tick, and at least 16 KiB, past where
  // it is now.
  FaultInSlots(ring, written + std::max<uint64_t>(kInitialFaultInSlots, 2 * recent));
}

void Flusher::TakeModels() {
  std::vector<nrtprof::LoadedModel> models;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    models.swap(models_);
  }
  for (nrtprof::LoadedModel& model : models) batcher_.AddModel(std::move(model));
}

nrtprof::DropCounters Flusher::Drops() {
  LaneCounts ring_full = freed_rings_dropped_;
  ring_full.runtime += core_->lost_calls.load(std::memory_order_relaxed);
  ring_full.framework += core_->lost_ranges.load(std::memory_order_relaxed);
  pthread_mutex_lock(&core_->registry_mu);
  for (ThreadState* ts = core_->threads; ts != nullptr; ts = ts->next) {
    ring_full.runtime += ts->ring->dropped(RecordKind::kApiCall);
    ring_full.framework += ts->ring->dropped(RecordKind::kRange);
  }
  pthread_mutex_unlock(&core_->registry_mu);
  LaneCounts device_overwritten;
  device_overwritten.hardware = device_parser_.overwritten_total();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    device_overwritten.hardware += documents_dropped_;  // fetched but never parsed
  }
  LaneCounts device_malformed;
  device_malformed.hardware = device_parser_.malformed_total();
  nrtprof::DropCounters drops;
  drops.set_ring_full(ring_full.total());
  drops.set_device_malformed(device_malformed.total());
  drops.set_daemon_away(daemon_away_.total());
  drops.set_device_overwritten(device_overwritten.total());
  drops.set_oversized(oversized_.total());
  drops.set_spool_full(spool_full_.total());
  drops.set_no_memory(no_memory_.total());
  LaneCounts all = ring_full;
  for (const LaneCounts* c :
       {&daemon_away_, &device_overwritten, &oversized_, &spool_full_, &no_memory_,
        &device_malformed}) {
    all += *c;
  }
  drops.mutable_by_lane()->set_framework(all.framework);
  drops.mutable_by_lane()->set_runtime(all.runtime);
  drops.mutable_by_lane()->set_hardware(all.hardware);
  return drops;
}

void Flusher::OnControl(const nrtprof::CaptureControl& control) {
  // With NRTPROF_CAPTURE the process records from its start, whatever the daemon says.
  if (core_->config.capture_id[0] != '\0') return;
  core_->recording.store(control.capturing() ? 1 : 0, std::memory_order_relaxed);
}

void Flusher::AbandonStream(uint64_t now_ns, Clock::time_point deadline) {
  // Batches the daemon did not acknowledge stay in unacked_ for the next stream: the daemon
  // may have stored some of them (their acks lost with the stream) and ignores those by their
  // sequence numbers; a daemon that restarted takes them all.
  stream_->Close(deadline, /*graceful=*/false);
  NoteRefusal();
  NoteConnectFailure();
  stream_.reset();
  replay_.reset();  // the next stream starts where its daemon says
  replay_awaits_ack_ = false;
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
  next_attempt_ns_ = now_ns + backoff_ns_;
}

void Flusher::NoteConnectFailure() {
  if (stream_->heard_from_daemon()) {
    connect_starved_ = false;
    return;
  }
  // A daemon that is not there (no socket, nobody listening) is the usual state of an
  // always-on shim and goes unsaid; the process lacking what it takes to connect does not.
  if (const int error = StarvedError(stream_->failure()); error != 0) NoteStarved(error);
}

void Flusher::NoteStarved(int error) {
  connect_starved_ = true;
  SayOnce(&connect_failure_said_,
          "nrtprof: cannot connect to the daemon at " + transport_.target + ": " +
              strerror(error) + "; retrying, its events waiting meanwhile (past " +
              std::to_string(Batcher::Options().max_pending_events) +
              ", the oldest are counted as dropped: daemon_away)");
}

void Flusher::NoteRefusal() {
  if (refused_ || !stream_->refused_by_daemon()) return;
  // Credentials the daemon refused once it refuses every time: stop asking, stop recording.
  refused_ = true;
  core_->recording.store(0, std::memory_order_relaxed);
  Report("nrtprof: the daemon at " + transport_.target +
         " refused this process's credentials (UNAUTHENTICATED); not profiling it");
}

void Flusher::ServiceStream(uint64_t now_ns, bool final, Clock::time_point deadline) {
  if (stream_ != nullptr) {
    const uint64_t acked = stream_->acked();
    while (!unacked_.empty() && unacked_.front().sequence <= acked) unacked_.pop_front();
    if (stream_->heard_from_daemon()) {
      backoff_ns_ = 0;
      connect_starved_ = false;
    }
    if (stream_->broken()) AbandonStream(now_ns, final ? deadline : Clock::now());
  }
  if (stream_ != nullptr || refused_) return;
  if (final) {
    // At exit one attempt is made at once, whatever the backoff says, and only one.
    if (final_attempt_made_) return;
    final_attempt_made_ = true;
  } else if (now_ns < next_attempt_ns_) {
    return;
  }
  if (transport_.trust_check) {
    // The socket may have changed hands since the last stream: nothing is sent to a daemon
    // that is not to be trusted, and the next attempt checks again.
    const absl::Status trust = transport_.trust_check();
    if (!trust.ok()) {
      if (trust.code() == absl::StatusCode::kResourceExhausted) {
        // Not a verdict on the daemon: the process has no descriptor (or memory) to check with.
        const int error = StarvedError(trust.message());
        NoteStarved(error != 0 ? error : EMFILE);
      } else if (trust.code() != absl::StatusCode::kNotFound) {
        SayOnce(&untrusted_said_, "nrtprof: not trusting the daemon at " + transport_.target +
                                      ": " + std::string(trust.message()) +
                                      "; not sending it anything");
      }
      backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
      next_attempt_ns_ = now_ns + backoff_ns_;
      return;
    }
  }
  nrtprof::ShimMessage hello;
  *hello.mutable_hello() = Hello();
  if (spool_ == nullptr) hello.mutable_hello()->set_mode(nrtprof::MODE_BEST_EFFORT);
  // Lossless streams wait for a daemon that is away to come back, so that one back within a
  // second of the process's end still gets everything (seen: a new stream failing at once
  // in gRPC's reconnection backoff, at exit, left a restarted daemon across TCP with nothing).
  // A process that could not connect for want of descriptors may have them back: at exit its
  // one attempt reconnects at once (not at gRPC's next backoff) and waits for the connection
  // within the flush's time, so that what it kept reaches the daemon.
  const bool starved_at_exit = final && connect_starved_;
  if (starved_at_exit) grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
  stream_ = std::make_unique<CollectorStream>(
      stub_.get(), std::move(hello),
      [this](const nrtprof::CaptureControl& control) { OnControl(control); },
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
  final_sent_ = !unacked_.empty() && unacked_.back().batch.final();
  Resend();
}

void Flusher::StartReplay(uint64_t offset) {
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

uint64_t Flusher::SpoolOffsetOf(uint64_t sequence) const {
  const uint64_t i = sequence == 0 ? 0 : (sequence - 1) / kSpoolIndexStride;
  return i < spool_index_.size() ? spool_index_[i] : spool_->bytes();
}

void Flusher::PumpReplay() {
  // A daemon that does not answer the Hello with an Ack (one older than that rule) gets the
  // spool from its start after a second; it ignores what it already has.
  if (replay_awaits_ack_ && stream_ != nullptr &&
      (stream_->ack_seen() || MonotonicNs() - replay_wait_since_ns_ > kHelloAckWaitNs)) {
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
    nrtprof::ShimMessage message;
    if (!message.ParseFromString(record) || !message.has_batch()) continue;  // the Hello
    nrtprof::EventBatch* batch = message.mutable_batch();
    if (batch->sequence() <= stream_->acked()) continue;  // the daemon has it
    batcher_.Restamp(batch, &interning_);
    unacked_.push_back({batch->sequence(), LaneCounts::Of(*batch), *batch});
    stream_->Send(std::move(message));
  }
}

void Flusher::SayOnce(bool* said, const std::string& line) {
  if (*said) return;
  *said = true;
  Report(line);
}

void Flusher::Resend() {
  for (Unacked& u : unacked_) {
    batcher_.Restamp(&u.batch, &interning_);
    nrtprof::ShimMessage message;
    *message.mutable_batch() = u.batch;
    stream_->Send(std::move(message));
  }
}

void Flusher::SendReady(bool final) {
  // Best effort keeps batches until a stream takes them; lossless spools them as they are
  // ready, and sends them too when a stream is there.
  while (batcher_.has_ready() || (final && !final_sent_)) {
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
    nrtprof::EventBatch batch = batcher_.TakeNext(connected ? &interning_ : &spool_interning_,
                                                  Drops(), final, &events);
    message.mutable_batch()->Swap(&batch);
    SetNotices(message.mutable_batch());
    if (message.ByteSizeLong() > kMaxMessageBytes) {
      // Keep the sequence without a gap: send the batch's frame, count what it carried.
      oversized_ += events;
      message.mutable_batch()->clear_events();
      message.mutable_batch()->clear_models();
      *message.mutable_batch()->mutable_drops() = Drops();
      events = LaneCounts();
    }
    SetEventsSent(sent_ + events, message.mutable_batch());
    if (spool_ != nullptr && (message.batch().sequence() - 1) % kSpoolIndexStride == 0) {
      spool_index_.push_back(spool_->bytes());
    }
    if (spool_ != nullptr && !spool_->Append(message.SerializeAsString())) {
      // The spool's bound (or the disk) is reached: the daemon reads lossless processes from
      // their spools, so what this batch carried is lost. Counted, and the count goes into
      // the spool's reserve in an event-less copy of the batch (strings and stacks kept, so
      // later batches still find them). The stream gets the same copy: its events are
      // counted as lost, so they are not sent either.
      spool_full_ += events;
      events = LaneCounts();
      message.mutable_batch()->clear_events();
      *message.mutable_batch()->mutable_drops() = Drops();
      SetEventsSent(sent_, message.mutable_batch());
      nrtprof::ShimMessage counts = message;
      counts.mutable_batch()->clear_models();
      counts.mutable_batch()->clear_clock_syncs();
      spool_->Append(counts.SerializeAsString(), /*reserve=*/true);
    }
    sent_ += events;
    const uint64_t sequence = message.batch().sequence();
    if (message.batch().final()) {
      final_sent_ = true;
      final_sequence_ = sequence;
    }
    if (!connected) continue;
    unacked_.push_back({sequence, events, message.batch()});
    stream_->Send(std::move(message));
  }
}

void Flusher::SendFinalNow() {
  LaneCounts events;
  nrtprof::ShimMessage message;
  nrtprof::EventBatch batch = batcher_.TakeNext(&interning_, Drops(), /*final=*/true, &events);
  message.mutable_batch()->Swap(&batch);
  SetNotices(message.mutable_batch());
  sent_ += events;
  SetEventsSent(sent_, message.mutable_batch());
  final_sent_ = true;
  final_sequence_ = message.batch().sequence();
  unacked_.push_back({final_sequence_, events, message.batch()});
  stream_->Send(std::move(message));
}

void Flusher::OpenAlone() {
  if (alone_ != nullptr) return;
  // A connection of its own is a new connection: the socket is checked again, as for any
  // new stream (its Hello carries the command line).
  if (transport_.trust_check) {
    const absl::Status trust = transport_.trust_check();
    if (!trust.ok() && trust.code() != absl::StatusCode::kNotFound &&
        trust.code() != absl::StatusCode::kResourceExhausted) {
      return;
    }
  }
  nrtprof::ShimMessage hello;
  *hello.mutable_hello() = Hello();
  hello.mutable_hello()->set_mode(nrtprof::MODE_BEST_EFFORT);
  hello.mutable_hello()->set_final_only(true);
  // A channel with arguments of its own and a local subchannel pool never shares the
  // clogged stream's connection.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetString("nrtprof.final_only", "1");
  alone_channel_ = grpc::CreateCustomChannel(transport_.target, credentials_, args);
  alone_stub_ = nrtprof::Collector::NewStub(alone_channel_);
  alone_ = std::make_unique<CollectorStream>(alone_stub_.get(), std::move(hello),
                                             [](const nrtprof::CaptureControl&) {});
}

bool Flusher::SendFinalAlone(Clock::time_point deadline) {
  OpenAlone();
  if (alone_ == nullptr) return false;  // the socket is no longer to be trusted
  nrtprof::ShimMessage report;
  nrtprof::EventBatch* batch = report.mutable_batch();
  batch->set_sequence(final_sequence_);
  batch->set_final(true);
  *batch->mutable_drops() = Drops();
  SetNotices(batch);
  *batch->mutable_clock() = unacked_.back().batch.clock();
  *batch->mutable_events_sent() = unacked_.back().batch.events_sent();
  alone_->Send(std::move(report));
  return alone_->WaitForAck(final_sequence_, deadline);
}

void Flusher::SetNotices(nrtprof::EventBatch* batch) const {
  batch->clear_notices();
  const uint32_t n =
      std::min(core_->notices_reserved.load(std::memory_order_acquire), kMaxNotices);
  for (uint32_t i = 0; i < n; ++i) {
    if (core_->notice_ready[i].load(std::memory_order_acquire) == 0) continue;
    batch->add_notices(SanitizeUtf8(core_->notices[i]));
  }
}

void Flusher::SetEventsSent(const LaneCounts& sent, nrtprof::EventBatch* batch) {
  nrtprof::EventsByLane* lanes = batch->mutable_events_sent();
  lanes->set_framework(sent.framework);
  lanes->set_runtime(sent.runtime);
  lanes->set_hardware(sent.hardware);
}

void Flusher::Final(Clock::time_point deadline) {
  // Lossless to a daemon on this machine: everything is on disk once spooled, and that daemon
  // reads the spool, so the exit waits only briefly for acks. A daemon across TCP cannot read
  // it: the exit may then spend the whole flush time sending it what it has not had.
  if (spool_ != nullptr && !transport_.tls) {
    deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(200));
  }
  arbiter_.Poll(/*final=*/true);
  const uint64_t now = MonotonicNs();
  ParseDocuments(now);
  DrainRings(now);
  TakeModels();
  batcher_.SealAll();
  ServiceStream(now, /*final=*/true, deadline);
  if (spool_ != nullptr) {
    FinalLossless(deadline);
    return;
  }
  // Everything, then the final batch; when too many batches wait for an ack, wait for one.
  // Best effort keeps the last half of the time (up to 1 s) for a final batch that counts
  // what could not be sent, so that a daemon too busy to take it all still learns how much is
  // missing (seen: 7 of 64 processes of the full load test cut off, 7,184 calls missing and
  // uncounted; then, keeping a quarter up to 500 ms and sending the final batch alone when
  // it was left, 4 of 64 still cut off).
  const Clock::time_point give_up =
      deadline - std::min<Clock::duration>(std::chrono::seconds(1),
                                           (deadline - Clock::now()) / 2);
  // A daemon this far behind will likely need the final batch sent alone: the connection for
  // it is made now, while the rest goes out, so that only the batch is left to send then.
  if (stream_ != nullptr && !refused_ && unacked_.size() >= kMaxUnackedBatches / 4) OpenAlone();
  while (stream_ != nullptr && !final_sent_ && Clock::now() < give_up) {
    SendReady(/*final=*/true);
    if (final_sent_) break;
    if (!unacked_.empty()) stream_->WaitForAck(unacked_.front().sequence, give_up);
    ServiceStream(MonotonicNs(), /*final=*/true, deadline);
  }
  if (stream_ != nullptr && !final_sent_) {
    daemon_away_ += batcher_.DiscardAll();
    SendFinalNow();
  }
  // A final batch not acknowledged within 100 ms is stuck behind batches the daemon has not
  // read yet (seen: 51 of 64 processes of the full load test cut off, 118,329 calls
  // uncounted); its copy on a connection of its own overtakes them, with the rest of the time.
  bool acknowledged = false;
  if (stream_ != nullptr && final_sent_) {
    acknowledged = stream_->WaitForAck(
        final_sequence_, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    if (!acknowledged && !stream_->broken() && !refused_) {
      acknowledged = SendFinalAlone(deadline);
    }
  }
  if (alone_ != nullptr) {
    // Unused (the stream caught up), it goes without a batch: the daemon counts nothing of it.
    alone_->Close(deadline, /*graceful=*/acknowledged);
    alone_.reset();
  }
  if (stream_ != nullptr) {
    stream_->Close(deadline, /*graceful=*/acknowledged);
    NoteRefusal();
    stream_.reset();
  }
}

void Flusher::FinalLossless(Clock::time_point deadline) {
  // Everything and the final batch into the spool (and onto the stream, if it keeps up).
  SendReady(/*final=*/true);
  bool acknowledged = false;
  while (stream_ != nullptr && Clock::now() < deadline) {
    PumpReplay();
    if (final_sent_ && stream_->acked() >= final_sequence_) {
      acknowledged = true;
      break;
    }
    stream_->WaitForAck(unacked_.empty() ? final_sequence_ : unacked_.front().sequence,
                        deadline);
    ServiceStream(MonotonicNs(), /*final=*/true, deadline);
  }
  if (stream_ != nullptr) {
    stream_->Close(deadline, /*graceful=*/acknowledged);
    NoteRefusal();
    stream_.reset();
  }
  // A daemon across TCP has all of it and never reads (nor removes) this machine's spool
  // files; one it did not acknowledge stays, for whoever wants to know what it missed.
  if (acknowledged && transport_.tls) unlink(spool_->path().c_str());
}

}  // namespace nrtprof::shim
