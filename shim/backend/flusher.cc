#include "shim/backend/flusher.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "common/background_slice.h"
#include "common/clock.h"
#include "shim/backend/process_info.h"
#include "shim/backend/symbolizer.h"
#include "shim/backend/torch_loader.h"
#include "shim/backend/utf8.h"

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

// The CPU time of thread `tid` of this process (Linux's clock id for it, as
// pthread_getcpuclockid makes one); 0 if it cannot be read.
uint64_t ThreadCpuNs(pid_t tid) {
  const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  timespec ts;
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + static_cast<uint64_t>(ts.tv_nsec);
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

// The names the shim's threads have: the flusher's, its starter's (StartThreads), and those
// gRPC 1.51 gives its own (cut to 15 bytes by the kernel); a thread gRPC has just made still
// has its maker's.
bool IsShimThreadName(std::string_view name) {
  for (const char* known : {"nrtprof-flush", "nrtprof-start", "default-executo", "resolver-execut",
                            "grpc_global_tim", "event_engine", "timer_manager", "nexting_thread"}) {
    if (name == known) return true;
  }
  return name.substr(0, 4) == "grpc";
}

constexpr char kNoMemoryLine[] =
    "nrtprof: the profiler ran out of memory (is the process's address space limited, ulimit "
    "-v?); what it could not keep is counted as dropped (no_memory)\n";

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
  f.get_event_types =
      reinterpret_cast<decltype(f.get_event_types)>(find("nrt_sys_trace_get_event_types"));
  f.free_event_types =
      reinterpret_cast<decltype(f.free_event_types)>(find("nrt_sys_trace_free_event_types"));
  f.config_set_event_type = reinterpret_cast<decltype(f.config_set_event_type)>(
      find("nrt_sys_trace_config_set_capture_enabled_for_event_type"));
  // Failed look-ups leave a message for dlerror(); the program's next dlerror() is its own.
  dlerror();
  return f;
}

// Roughly how many events a document holds, for what is dropped unparsed.
uint64_t CountEvents(std::string_view json) {
  uint64_t n = 0;
  for (size_t at = json.find("\"event_type\":"); at != std::string_view::npos;
       at = json.find("\"event_type\":", at + 1)) {
    ++n;
  }
  return n;
}

Batcher::Options BatcherOptions(const Config& config) {
  Batcher::Options options;
  options.recorder_batch_age_ns = uint64_t{config.recorder_batch_ms} * 1'000'000;
  options.batch_age_ns = uint64_t{config.batch_ms} * 1'000'000;
  if (config.requested_mode == ShimMode::kLossless) {
    // Every batch goes through the spool: a batch larger than the spool would be lost whole.
    options.batch_bytes =
        std::max<size_t>(4096, std::min<uint64_t>(options.batch_bytes, config.spool_max_bytes / 4));
  }
  return options;
}

}  // namespace

Flusher::Flusher(CoreState* core, DaemonTransport transport)
    : core_(core),
      link_(std::move(transport)),
      arbiter_(
          kOwnMaxEventsPerCore, [core] { return ResolveSysTrace(core); },
          [this](uint64_t generation, std::string json) {
            OnDocument(generation, std::move(json));
          },
          &DeviceTraceParser::UsesType),
      device_profile_([core] { return ResolveDeviceProfile(core); },
                      [core](const std::string& line) { core->say_notice(line.c_str()); },
                      &strings_),
      stacks_(&strings_, &SymbolizeReturnAddress),
      builder_(&strings_, &stacks_),
      device_parser_(&strings_),
      batcher_(BatcherOptions(core->config), &strings_, &stacks_),
      shipping_(this, &link_, SystemShipClock(), &batcher_) {
  if (core_->config.addr[0] != '\0') shipping_.SayIfNeverReached();
  // The flusher's own fetches are parsed in the runtime's buffer, not copied first.
  arbiter_.LendPolledDocuments([this](uint64_t generation, std::string_view json) {
    ParseLentDocument(generation, json);
  });
}

bool Flusher::Start() {
  // Signals sent to the process must reach the program's threads, not this one nor gRPC's
  // (created now, they inherit this mask).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kThreadStackBytes);
  // gRPC's threads and the flusher are made by a thread of their own that asks the scheduler
  // for a long slice first (common/background_slice.h), so that all of them inherit it and a
  // program thread waking on their CPU takes it at once; the calling (program) thread's own
  // scheduling is not touched. It is joined before this returns: the channel (and with it
  // gRPC's threads) still exists once the program's first libnrt call returns, so that whether
  // a forked child may use gRPC never depends on timing.
  pthread_t starter;
  int error = pthread_create(&starter, &attr, &Flusher::StartThreads, this);
  if (error == 0) {
    void* made = nullptr;
    pthread_join(starter, &made);
    error = static_cast<int>(reinterpret_cast<intptr_t>(made));
  } else {
    error = MakeThreads();  // no thread to spare for it: here, without the slice
  }
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

void* Flusher::StartThreads(void* flusher) {
  // Named, so that the threads it makes (they bear their maker's name until they name
  // themselves) are never taken for the program's: in `top`, in /proc, or by a test that
  // reads each thread's slice (seen: a gRPC thread named "program_shapes" with the long slice).
  pthread_setname_np(pthread_self(), "nrtprof-start");
  UseBackgroundSlice();
  const int error = static_cast<Flusher*>(flusher)->MakeThreads();
  return reinterpret_cast<void*>(static_cast<intptr_t>(error));
}

int Flusher::MakeThreads() {
  link_.Start();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, kThreadStackBytes);
  pthread_t thread;
  contact_deadline_ns_ = MonotonicNs() + kFirstContactNs;
  const int error = pthread_create(&thread, &attr, &Flusher::RunThread, this);
  pthread_attr_destroy(&attr);
  return error;
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
  WakeSelf();
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
    CountNoMemory(LaneCounts());
  }
  while (true) {
    bool final = false;
    Clock::time_point deadline;
    uint64_t flush = 0;
    {
      std::lock_guard<std::mutex> lock(final_mu_);
      final = final_requested_;
      deadline = final_deadline_;
      if (flush_wanted_ != flush_taken_) flush = flush_taken_ = flush_wanted_;  // a new one
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
      Tick(flush);
    } catch (const std::bad_alloc&) {
      // What waited to be sent goes (it frees memory), counted.
      CountNoMemory(batcher_.DiscardAll());
    }
    // glibc ends a process whose last thread exits with exit(0); the shim's threads must not
    // keep one alive whose program has no thread left (main() called pthread_exit).
    if (ProgramThreadsGone()) exit(0);
    uint64_t wait_ns = wait_ns_;
    if (contact_deadline_ns_ != 0) {
      // Until the first contact settles, look every millisecond instead of every tick.
      if (shipping_.FirstContactSettled() || MonotonicNs() >= contact_deadline_ns_) {
        contact_deadline_ns_ = 0;
        std::lock_guard<std::mutex> contact(contact_mu_);
        contact_settled_ = true;
        contact_cv_.notify_all();
      } else {
        wait_ns = 1'000'000;
      }
    }
    // Until the next tick, unless woken first: by a request (WakeSelf, under final_mu_), which
    // ticks at once, or by a program thread whose ring is three quarters full (the core's
    // WakeFlusher), whose records are copied out and the wait goes on. The word is read before
    // the requests are looked at, so a wake between the two ends the wait at once.
    const uint64_t tick_at = MonotonicNs() + wait_ns;
    while (true) {
      const uint32_t seen = core_->flusher_wake.load(std::memory_order_acquire);
      {
        std::lock_guard<std::mutex> lock(final_mu_);
        if (final_requested_ || flush_wanted_ != flush_taken_ || record_wanted_) break;
      }
      const uint64_t now = MonotonicNs();
      if (now >= tick_at) break;
      const uint64_t left = tick_at - now;
      timespec timeout{static_cast<time_t>(left / 1'000'000'000),
                       static_cast<long>(left % 1'000'000'000)};
      if (syscall(SYS_futex, reinterpret_cast<uint32_t*>(&core_->flusher_wake),
                  FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0) != 0 &&
          errno == ETIMEDOUT) {
        break;
      }
      // Woken, or the word moved before the wait began (or a signal): a request ticks (above),
      // a filling ring is copied out here, or, when there is no room for it, ticks.
      bool staged = false;
      try {
        staged = StageFillingRings();
      } catch (const std::bad_alloc&) {
      }
      if (!staged) break;
    }
    std::lock_guard<std::mutex> lock(final_mu_);
    record_wanted_ = false;
  }
}

bool Flusher::StageFillingRings() {
  if (staged_ == nullptr) {
    staged_.reset(new (std::nothrow) Record[kStagedSlots]);
    if (staged_ == nullptr) return false;
  }
  std::vector<ThreadState*>& threads = threads_snapshot_;
  threads.clear();
  pthread_mutex_lock(&core_->registry_mu);
  try {
    for (ThreadState* ts = core_->threads; ts != nullptr; ts = ts->next) threads.push_back(ts);
  } catch (const std::bad_alloc&) {
    pthread_mutex_unlock(&core_->registry_mu);
    throw;
  }
  pthread_mutex_unlock(&core_->registry_mu);
  // Room for a run of each before any ring is copied: none copied out is then lost to memory.
  staged_runs_.reserve(staged_runs_.size() + threads.size());
  // Only the flusher frees a state (DrainRings): those seen stay until the next tick.
  for (ThreadState* ts : threads) {
    if (ts->ring->unread_slots() < ts->ring->capacity() / 2) continue;
    const size_t slots = ts->ring->CopyOut(staged_.get() + staged_slots_,
                                           kStagedSlots - staged_slots_);
    if (slots == 0) return false;  // no room left: the tick drains it
    staged_runs_.push_back({ts, staged_slots_, slots});
    staged_slots_ += slots;
  }
  return true;
}

void Flusher::WakeSelf() {
  core_->flusher_wake.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&core_->flusher_wake), FUTEX_WAKE_PRIVATE, 1,
          nullptr, nullptr, 0);
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
                   core_->config.spool_max_bytes, link_.trust(), &error) ||
      !spool->Append(hello.SerializeAsString())) {
    if (error.empty()) error = "cannot write the spool file";
    Report("nrtprof: NRTPROF_MODE=lossless: " + error + "; running best_effort");
    return;
  }
  shipping_.UseSpool(std::move(spool));
}

void Flusher::Tick(uint64_t flush) {
  const uint64_t now = MonotonicNs();
  batcher_.SetRecorderOnly(recorder_only_.load(std::memory_order_relaxed));
  // The runtime's system trace runs only while the process records; when recording begins it
  // starts first, so that the calls recorded have their device events. A stop that came
  // meanwhile stands (the next tick stops the trace); a start, the next tick (at once) makes.
  auto record = [this] {
    return !refused_.load(std::memory_order_relaxed) &&
           (core_->config.capture_id[0] != '\0' || daemon_records_.load(std::memory_order_relaxed));
  };
  const bool wanted = record();
  arbiter_.SetWanted(wanted);
  core_->recording.store(wanted && record() ? 1 : 0, std::memory_order_relaxed);
  poll_now_ns_ = now;
  arbiter_.Poll(/*final=*/false);
  ParseDocuments(now);
  device_profile_.Collect(now, /*final=*/false, core_->recording.load(std::memory_order_relaxed),
                          [&](nrtprof::Event& e) { batcher_.AddEvent(e, now); });
  DrainRings(now);
  KeepASpareRing();
  TakeModels();
  // PyTorch's lane: loaded once libtorch is in the process, on only while recording.
  PollTorchLane(core_);
  wait_ns_ = tick_wait_.Next(now);
  // Everything recorded before the daemon asked is drained now.
  if (flush != 0) {
    batcher_.SealAll();
    shipping_.Flush(flush);
  } else {
    // Sealed now if it would be older than its age by the next tick (which may be a long wait
    // away): no event waits longer than before the waits grew (tests/programs/abrupt_end.c
    // counts on it).
    batcher_.SealIfDue(now + wait_ns_);
  }
  shipping_.Tick();
}

void Flusher::ParseDocuments(uint64_t now_ns) {
  std::deque<QueuedDocument> documents;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    documents.swap(documents_);
    document_bytes_ = 0;
  }
  for (QueuedDocument& doc : documents) {
    ParseDocument(doc.generation, doc.json, now_ns);
    arbiter_.Recycle(std::move(doc.json));  // the next copy goes there
  }
}

void Flusher::ParseLentDocument(uint64_t generation, std::string_view json) {
  // Under the arbiter's lock (no Recycle): what program threads queued before it goes first.
  // The tick's time (a later one would make the batch it opens look opened after the tick's
  // SealIfDue, whose unsigned age would then seal it at once).
  const uint64_t now_ns = poll_now_ns_;
  std::deque<QueuedDocument> documents;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    documents.swap(documents_);
    document_bytes_ = 0;
  }
  for (QueuedDocument& doc : documents) ParseDocument(doc.generation, doc.json, now_ns);
  // Poll fetches the profiler's own capture (and at exit the program's: its last wait no
  // longer matters).
  ParseDocument(generation, json, now_ns, /*own_fetch=*/true);
}

void Flusher::ParseDocument(uint64_t generation, std::string_view json, uint64_t now_ns,
                            bool own_fetch) {
  const bool capturing = core_->recording.load(std::memory_order_relaxed) != 0;
  uint64_t added = 0;
  try {
    DeviceTraceOutput& out = device_out_;
    out.Clear();
    out.encode = true;  // the events' bytes, no Event objects
    std::string error;
    if (device_parser_.Parse(generation, json, &out, &error)) {
      for (const nrtprof::DeviceClockSync& sync : out.clock_syncs) {
        batcher_.AddClockSync(sync, now_ns);
      }
      if (capturing) {
        size_t begin = 0;
        for (const EncodedDeviceEvent& event : out.encoded_events) {
          batcher_.AddEncodedEvent(std::string_view(out.encoded).substr(begin, event.end - begin),
                                   event.kind, event.name_iid, event.model_name_iid, now_ns);
          begin = event.end;
          ++added;
        }
      }
    }
  } catch (const std::bad_alloc&) {
    LaneCounts lost;
    const uint64_t in_document = CountEvents(json);
    lost.hardware = in_document > added ? in_document - added : 0;
    CountNoMemory(lost);
  }
  tick_wait_.NoteSystemTraceDocument(device_parser_.TakeMostNumberedOnACore(), own_fetch);
  // The room of a burst's documents is not kept.
  if (device_out_.encoded_events.capacity() > kKeptParsedEvents) {
    device_out_ = DeviceTraceOutput();
  }
}

void Flusher::DrainRings(uint64_t now_ns) {
  // A thread that found no memory for a ring (core.cc) cannot say so itself: said here, once
  // (here, so that the exit's last drain says it too).
  if (!no_memory_said_ && NoRingRecords().total() != 0) CountNoMemory(LaneCounts());
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
    auto add = [&](const Record& record) {
      try {
        scratch_event_.Clear();
        builder_.Build(record, tid, *clock_, &scratch_event_);
        batcher_.AddEvent(scratch_event_, now_ns);
      } catch (const std::bad_alloc&) {
        LaneCounts lost;
        if (record.kind == RecordKind::kRange) {
          lost.framework = 1;
        } else {
          lost.runtime = 1;
        }
        CountNoMemory(lost);
      }
    };
    // What was copied out of the ring since the last tick (StageFillingRings) comes first.
    for (const StagedRun& run : staged_runs_) {
      if (run.ts == ts) ForEachRecord(staged_.get() + run.first, run.slots, add);
    }
    ts->ring->Drain(add);
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
    ts->retired.store(0, std::memory_order_relaxed);
    if (!AddSpare(ts)) FreeRing(ts);
  }
  staged_runs_.clear();
  staged_slots_ = 0;
}

void Flusher::CountRunningThreadsPolls(uint64_t now_ns) {
  if (core_->recording.load(std::memory_order_relaxed) == 0) return;
  struct Tally {
    uint32_t tid;
    ApiFunction function;
    uint64_t polls;
  };
  std::vector<Tally> tallies;
  tallies.reserve(2 * threads_snapshot_.size());
  // Read after the drain, whose acquire of each ring's head makes a shipped recorded poll's
  // zeroing of its count visible: a count read here is only of polls no shipped record
  // carries. Under registry_mu, which keeps each thread's storage there (ThreadState::polls).
  // A thread may poll on meanwhile: what it polls after this read is not counted, and what it
  // records now is never shipped (this is the last drain).
  pthread_mutex_lock(&core_->registry_mu);
  try {
    for (ThreadState* ts = core_->threads; ts != nullptr; ts = ts->next) {
      if (ts->polls == nullptr) continue;
      const uint64_t is_completed = ts->polls->is_completed.load(std::memory_order_relaxed);
      const uint64_t get_sequence = ts->polls->get_sequence.load(std::memory_order_relaxed);
      if (is_completed != 0) tallies.push_back({ts->tid, kNrtaIsCompleted, is_completed});
      if (get_sequence != 0) tallies.push_back({ts->tid, kNrtaGetSequence, get_sequence});
    }
  } catch (const std::bad_alloc&) {
    pthread_mutex_unlock(&core_->registry_mu);
    throw;
  }
  pthread_mutex_unlock(&core_->registry_mu);
  const uint64_t ticks = ReadTicks(core_->tick_source);
  for (const Tally& tally : tallies) {
    // The record the thread's own RecordPollTally (core.h) would have written.
    Record record;
    record.Clear(RecordKind::kApiCall, 1);
    record.api = tally.function;
    record.flags = kRecordPollsOnly;
    record.correlation_id = core_->next_correlation_id.fetch_add(1, std::memory_order_relaxed);
    record.bytes = tally.polls;
    record.start_ticks = record.end_ticks = ticks;
    try {
      scratch_event_.Clear();
      builder_.Build(record, tally.tid, *clock_, &scratch_event_);
      batcher_.AddEvent(scratch_event_, now_ns);
    } catch (const std::bad_alloc&) {
      LaneCounts lost;
      lost.runtime = 1;
      CountNoMemory(lost);
    }
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

LaneCounts Flusher::NoRingRecords() const {
  LaneCounts lost;
  lost.runtime = core_->no_ring_calls.load(std::memory_order_relaxed);
  lost.framework = core_->no_ring_ranges.load(std::memory_order_relaxed);
  return lost;
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
  // One that has run since the last look is alive: its CPU clock (a system call, where the
  // status file below costs ~9 us a read) spares the file on a busy program's every tick. One
  // that ended within the tick is seen at the next.
  const uint64_t main_cpu_ns = ThreadCpuNs(pid);
  if (main_cpu_ns != 0 && main_cpu_ns != main_thread_cpu_ns_) {
    main_thread_cpu_ns_ = main_cpu_ns;
    return false;
  }
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
  tick_wait_.NoteRingFill(static_cast<double>(recent) / ring->capacity());
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

HostDrops Flusher::Drops() {
  HostDrops drops;
  drops.ring_full = freed_rings_dropped_;
  drops.ring_full.runtime += core_->lost_calls.load(std::memory_order_relaxed);
  drops.ring_full.framework += core_->lost_ranges.load(std::memory_order_relaxed);
  pthread_mutex_lock(&core_->registry_mu);
  for (ThreadState* ts = core_->threads; ts != nullptr; ts = ts->next) {
    drops.ring_full.runtime += ts->ring->dropped(RecordKind::kApiCall);
    drops.ring_full.framework += ts->ring->dropped(RecordKind::kRange);
  }
  pthread_mutex_unlock(&core_->registry_mu);
  drops.device_overwritten.hardware =
      device_parser_.overwritten_total() + device_profile_.overflow_total();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    drops.device_overwritten.hardware += documents_dropped_;  // fetched but never parsed
  }
  drops.device_malformed.hardware =
      device_parser_.malformed_total() + device_profile_.malformed_total();
  drops.no_memory = no_memory_ + NoRingRecords();
  return drops;
}

void Flusher::OnControl(const nrtprof::CaptureControl& control) {
  if (control.flush() != 0) {
    std::lock_guard<std::mutex> lock(final_mu_);
    flush_wanted_ = std::max(flush_wanted_, control.flush());
    WakeSelf();
  }
  // With NRTPROF_CAPTURE the process records from its start, whatever the daemon says.
  if (core_->config.capture_id[0] != '\0') return;
  recorder_only_.store(control.capturing() && control.capture_id().empty(),
                       std::memory_order_relaxed);
  daemon_records_.store(control.capturing(), std::memory_order_relaxed);
  if (!control.capturing()) {
    // At once; the thread stops the runtime's system trace at its next tick.
    core_->recording.store(0, std::memory_order_relaxed);
  } else if (core_->recording.load(std::memory_order_relaxed) == 0) {
    // The thread starts the system trace, then the recording (Tick).
    std::lock_guard<std::mutex> lock(final_mu_);
    record_wanted_ = true;
    WakeSelf();
  }
}

void Flusher::StopRecording() {
  refused_.store(true, std::memory_order_relaxed);
  core_->recording.store(0, std::memory_order_relaxed);
}

void Flusher::Say(const std::string& line) { Report(line); }

void Flusher::SetProcessState(nrtprof::EventBatch* batch) {
  batch->clear_notices();
  const uint32_t n =
      std::min(core_->notices_reserved.load(std::memory_order_acquire), kMaxNotices);
  for (uint32_t i = 0; i < n; ++i) {
    if (core_->notice_ready[i].load(std::memory_order_acquire) == 0) continue;
    batch->add_notices(SanitizeUtf8(core_->notices[i]));
  }
  batch->set_device_events_wait_for_program(arbiter_.app_capture_running());
}

void Flusher::Final(Clock::time_point deadline) {
  deadline = shipping_.ExitDeadline(deadline);
  const uint64_t now = MonotonicNs();
  poll_now_ns_ = now;
  arbiter_.Poll(/*final=*/true);
  ParseDocuments(now);
  device_profile_.Collect(now, /*final=*/true, core_->recording.load(std::memory_order_relaxed),
                          [&](nrtprof::Event& e) { batcher_.AddEvent(e, now); });
  DrainRings(now);
  CountRunningThreadsPolls(now);
  TakeModels();
  batcher_.SealAll();
  shipping_.Final(deadline);
}

}  // namespace nrtprof::shim
