#include "shim/preload/core.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/preload/address_space.h"
#include "shim/preload/fd_guard.h"
#include "shim/preload/loaded_objects.h"

namespace nrtprof::shim::core {

CoreState g_core;
std::atomic<int> g_phase{kUninit};
std::atomic<const BackendApi*> g_backend{nullptr};
std::atomic<void*> g_real[kNumApiFunctions];
std::atomic<void*> g_nrt_handle{nullptr};
NRTPROF_TLS ThreadState* t_state = nullptr;
NRTPROF_TLS HotThreadState t_hot;
NRTPROF_TLS int t_in_call = 0;
NRTPROF_TLS PollState t_polls;
// Set at a thread's first pass through OnThreadExit. Hidden and outside the anonymous
// namespace, as the other thread-locals: the linker gave the initial-exec access of the
// anonymous namespace's thread-local the offset of t_state (its dynamic TPOFF64 relocation
// named a null symbol), so that setting it wrote 1 over t_state's low byte and the second pass
// found the state changed: the ring was retired with the thread still able to write to it.
NRTPROF_TLS bool t_exit_deferred NRTPROF_HIDDEN = false;

namespace {

// Taken only by the lazy start (first use in a process) and re-initialized in a fork child.
pthread_mutex_t g_start_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
pthread_key_t g_thread_key;
bool g_process_hooks_registered = false;  // guarded by g_start_mu
std::atomic<uint32_t> g_missing_reported{0};
std::atomic<int> g_fork_note_printed{0};
std::atomic<int> g_disabled_by_env{-1};

void WriteStderr(const char* line) {
  ssize_t ignored = write(STDERR_FILENO, line, strlen(line));
  (void)ignored;
}

const char* Getenv(const char* name) { return getenv(name); }

// The core's loaded code, from its program headers.
int FindCoreText(struct dl_phdr_info* info, size_t, void* data) {
  const uintptr_t self = reinterpret_cast<uintptr_t>(&g_core);
  uintptr_t begin = UINTPTR_MAX, end = 0;
  bool contains_self = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t b = info->dlpi_addr + ph.p_vaddr, e = b + ph.p_memsz;
    if (self >= b && self < e) contains_self = true;
    if (b < begin) begin = b;
    if (e > end) end = e;
  }
  if (!contains_self) return 0;
  auto* range = static_cast<uintptr_t*>(data);
  range[0] = begin;
  range[1] = end;
  return 1;
}

void OnThreadExit(void* state) {
  auto* ts = static_cast<ThreadState*>(state);
  // glibc runs the threads' key destructors in passes, each key's in the order the keys were
  // made, and runs another pass if a destructor set a value again (up to
  // PTHREAD_DESTRUCTOR_ITERATIONS). The program's keys made after the profiler's (it makes its
  // own at the process's first call) have theirs run after this one, and what they call in
  // libnrt would be lost. So the first pass only sets the value again; the thread's ring is
  // retired in the second, once every destructor of the first has run.
  if (t_state == ts && !t_exit_deferred && pthread_setspecific(g_thread_key, ts) == 0) {
    t_exit_deferred = true;
    return;
  }
  if (t_state == ts) {
    // The thread's polls after its last recorded one, which no later poll will carry.
    RecordPollTally();
    t_state = kDeadThread;
    t_hot.producer = RingProducer();
  }
  // Its thread-local storage goes with the thread: the exit's final drain must not read it.
  pthread_mutex_lock(&g_core.registry_mu);
  ts->polls = nullptr;
  pthread_mutex_unlock(&g_core.registry_mu);
  ts->retired.store(1, std::memory_order_release);
}

void CreateThreadKey() { pthread_key_create(&g_thread_key, &OnThreadExit); }

void AtExit() {
  if (g_phase.load(std::memory_order_acquire) != kStarted) return;
  const BackendApi* backend = g_backend.load(std::memory_order_acquire);
  // The exiting thread's polls after its last recorded one go with the final flush. (Those of
  // threads still running are counted by the final drain: ThreadState::polls.)
  RecordPollTally();
  // Calls the exiting thread might still make (other atexit handlers) pass straight through.
  t_in_call = 1;
  backend->exit_flush();
  g_phase.store(kExited, std::memory_order_release);
}

// Whether AtForkPrepare asked the backend to hold off (the phase may not change meanwhile:
// the forking thread is in fork()).
bool g_fork_prepared = false;

void AtForkPrepare() {
  g_fork_prepared = g_phase.load(std::memory_order_acquire) == kStarted;
  if (g_fork_prepared) g_backend.load(std::memory_order_acquire)->atfork_prepare();
}

void AtForkParent() {
  if (g_fork_prepared) g_backend.load(std::memory_order_acquire)->atfork_parent();
  g_fork_prepared = false;
}

// In the child of fork(): only the forking thread exists. The parent's rings, backend
// threads and gRPC objects are forgotten (leaked), never touched.
void MakeRingsFile();

void AtForkChild() {
  t_state = nullptr;
  t_hot = HotThreadState();
  t_in_call = 0;
  // The parent's to count.
  t_polls.is_completed.store(0, std::memory_order_relaxed);
  t_polls.get_sequence.store(0, std::memory_order_relaxed);
  t_polls.last_sequence = 0;
  pthread_mutex_init(&g_start_mu, nullptr);
  pthread_mutex_init(&g_core.registry_mu, nullptr);
  pthread_mutex_init(&g_core.rings_mu, nullptr);
  // The parent's rings file is the parent's: a child that records again gets one of its own.
  if (RingsFileHeader* h = g_core.rings_header.exchange(nullptr)) {
    munmap(h, kRingsFileHeaderBytes);
    close(g_core.rings_fd);
    g_core.rings_fd = -1;
  }
  LoadedObjectsAtForkChild();
  g_core.threads = nullptr;
  // Spare rings are in the parent's rings file: the child makes its own.
  g_core.spare_threads = nullptr;
  g_core.spare_count = 0;
  g_core.lost_calls.store(0, std::memory_order_relaxed);
  g_core.lost_ranges.store(0, std::memory_order_relaxed);
  g_core.no_ring_calls.store(0, std::memory_order_relaxed);
  g_core.no_ring_ranges.store(0, std::memory_order_relaxed);
  g_core.next_correlation_id.store(1, std::memory_order_relaxed);
  if (g_fork_prepared && g_phase.load(std::memory_order_relaxed) == kStarted) {
    g_fork_prepared = false;
    const BackendApi* backend = g_backend.load(std::memory_order_relaxed);
    if (backend->atfork_child()) {
      MakeRingsFile();
      g_core.recording.store(1, std::memory_order_relaxed);
      g_phase.store(kConfigured, std::memory_order_release);
    } else {
      g_core.recording.store(0, std::memory_order_relaxed);
      g_phase.store(kForkedChild, std::memory_order_release);
    }
  }
}

// Whether the rings file may grow to `bytes`: past the process's file size limit (ulimit -f)
// the kernel would refuse, and kill the process with SIGXFSZ.
bool RingsFileMayGrowTo(uint64_t bytes) {
  rlimit limit;
  return getrlimit(RLIMIT_FSIZE, &limit) == 0 &&
         (limit.rlim_cur == RLIM_INFINITY || bytes <= limit.rlim_cur);
}

// The rings file (common/rings_file.h): made once, before any ring, so that the first Hello
// can name it. Without one (no descriptor, no memory file support) rings are private memory
// and a process that dies abruptly is only flagged, not counted.
void MakeRingsFile() {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t stride =
      (EventRing::BytesFor(g_core.config.ring_events) + page - 1) / page * page;
  if (!RingsFileMayGrowTo(kRingsFileHeaderBytes + stride)) return;
  const int fd = memfd_create(kRingsFileName, MFD_CLOEXEC);
  if (fd < 0) return;
  void* header = MAP_FAILED;
  if (ftruncate(fd, kRingsFileHeaderBytes) == 0) {
    header = mmap(nullptr, kRingsFileHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (header == MAP_FAILED) {
    close(fd);
    return;
  }
  auto* h = static_cast<RingsFileHeader*>(header);
  memcpy(h->magic, kRingsFileMagic, sizeof(h->magic));
  h->version = kRingsFileVersion;
  h->header_bytes = kRingsFileHeaderBytes;
  h->ring_stride = stride;
  // Moved above the program's numbers, as the backend's descriptors are (fd_guard.h).
  g_core.rings_fd = FdGuardKeep(fd);
  g_core.rings_header.store(h, std::memory_order_release);
}

// Whether a ring of `bytes` leaves kAddressSpaceKept free under the process's limit on its
// address space (ulimit -v), if it has one: the rings never take the room gRPC and the program
// were left (seen without this: 8 threads with 256 MiB rings under a 1.4 GB limit, and the
// program's own pthread_create failed). Reads /proc/self/status only under a limit.
bool RoomForARing(size_t bytes) {
  uint64_t limit = 0, free = 0;
  return !AddressSpaceLimited(&limit, &free) || free >= bytes + kAddressSpaceKept;
}

// A ring of `bytes`: the next slot of the rings file, or private memory if there is none or it
// cannot grow; MAP_FAILED if the address space has no room for it. `*offset`: where it is in
// the file, -1 if private.
void* MapRing(size_t bytes, int64_t* offset) {
  *offset = -1;
  if (!RoomForARing(bytes)) return MAP_FAILED;
  RingsFileHeader* h = g_core.rings_header.load(std::memory_order_acquire);
  if (h != nullptr) {
    pthread_mutex_lock(&g_core.rings_mu);
    const uint32_t slot = h->rings_made.load(std::memory_order_relaxed);
    const int64_t at = h->header_bytes + static_cast<int64_t>(slot) * h->ring_stride;
    void* ring = MAP_FAILED;
    if (RingsFileMayGrowTo(at + h->ring_stride) &&
        ftruncate(g_core.rings_fd, at + h->ring_stride) == 0) {
      ring = mmap(nullptr, h->ring_stride, PROT_READ | PROT_WRITE, MAP_SHARED, g_core.rings_fd,
                  at);
    }
    if (ring != MAP_FAILED) {
      h->rings_made.store(slot + 1, std::memory_order_release);
      *offset = at;
    }
    pthread_mutex_unlock(&g_core.rings_mu);
    if (ring != MAP_FAILED) return ring;
  }
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

// A state with a new, empty ring, on no list; null if there is no memory for it. Its pages
// are not faulted in.
ThreadState* NewRingState() {
  const size_t ring_bytes = EventRing::BytesFor(g_core.config.ring_events);
  int64_t ring_offset = -1;
  void* ring_memory = MapRing(ring_bytes, &ring_offset);
  auto* ts = static_cast<ThreadState*>(calloc(1, sizeof(ThreadState)));
  if (ring_memory == MAP_FAILED || ts == nullptr) {
    // (A slot of the rings file stays handed out, reading as an empty ring.)
    if (ring_memory != MAP_FAILED) munmap(ring_memory, ring_bytes);
    free(ts);
    return nullptr;
  }
  ts->ring_offset = ring_offset;
  ts->ring_bytes = ring_offset >= 0 ? g_core.rings_header.load()->ring_stride : ring_bytes;
  ts->ring = EventRing::Create(ring_memory, g_core.config.ring_events);
  new (&ts->retired) std::atomic<int>(0);
  return ts;
}

void ConfigureLocked() {
  ParseConfig(&Getenv, &WriteStderr, &g_core.config);
  g_core.tick_source = g_core.config.clock == ClockChoice::kMonotonic ? TickSource::kMonotonic
                       : HasInvariantTsc()                            ? TickSource::kTsc
                       : TickSource::kMonotonic;
  if (g_core.config.clock == ClockChoice::kTsc && g_core.tick_source != TickSource::kTsc) {
    WriteStderr("nrtprof: NRTPROF_CLOCK=tsc: this CPU has no invariant time-stamp counter; "
                "using CLOCK_MONOTONIC\n");
  }
  g_core.real_dlsym = RealDlsym();
  g_core.real_functions = g_real;
  g_core.new_spare_thread = &NewRingState;
  g_core.say_notice = &SayNotice;
  uintptr_t range[2] = {0, 0};
  dl_iterate_phdr(&FindCoreText, range);
  g_core.core_text_begin = range[0];
  g_core.core_text_end = range[1];
  if (!g_core.config.disabled) MakeRingsFile();
  // Record from the start; the daemon's CaptureControl may turn it off.
  g_core.recording.store(1, std::memory_order_relaxed);
  g_phase.store(g_core.config.disabled ? kDisabled : kConfigured, std::memory_order_release);
}

// Loads the backend from the core's own folder and starts it.
void StartBackendLocked() {
  char path[4096];
  Dl_info info;
  path[0] = '\0';
  if (dladdr(reinterpret_cast<void*>(&g_core), &info) != 0 && info.dli_fname != nullptr) {
    const char* slash = strrchr(info.dli_fname, '/');
    const int dir_len = slash == nullptr ? 0 : static_cast<int>(slash - info.dli_fname + 1);
    snprintf(path, sizeof(path), "%.*s%s", dir_len, info.dli_fname, kBackendLibraryName);
  } else {
    snprintf(path, sizeof(path), "%s", kBackendLibraryName);
  }
  char line[4600];
  // The objects this dlopen() adds create the shim's descriptors (fd_guard.h).
  FdGuardBeforeBackendLoad();
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  FdGuardAfterBackendLoad();
  if (handle == nullptr) {
    const char* error = dlerror();
    snprintf(line, sizeof(line), "nrtprof: cannot load %s (%s); not profiling this process\n",
             path, error != nullptr ? error : "unknown error");
    WriteStderr(line);
    g_phase.store(kDisabled, std::memory_order_release);
    return;
  }
  auto start = reinterpret_cast<BackendStartFn>(g_core.real_dlsym(handle, kBackendStartSymbol));
  const BackendApi* backend = start != nullptr ? start(&g_core) : nullptr;
  if (start != nullptr && backend == nullptr) {
    // The backend declined this process (its settings, a build mismatch) and said why.
    g_phase.store(kDisabled, std::memory_order_release);
    return;
  }
  if (backend == nullptr || backend->abi_version != kShimAbiVersion) {
    snprintf(line, sizeof(line),
             "nrtprof: %s is not the backend of this libnrtprof_shim.so; not profiling this "
             "process\n",
             path);
    WriteStderr(line);
    g_phase.store(kDisabled, std::memory_order_release);
    return;
  }
  g_backend.store(backend, std::memory_order_release);
  if (!g_process_hooks_registered) {
    g_process_hooks_registered = true;
    pthread_atfork(&AtForkPrepare, &AtForkParent, &AtForkChild);
    atexit(&AtExit);
  }
  g_phase.store(kStarted, std::memory_order_release);
}

}  // namespace

DlsymFn RealDlsym();  // dlsym_hook.cc

bool DisabledByEnvironment() {
  int disabled = g_disabled_by_env.load(std::memory_order_relaxed);
  if (disabled < 0) {
    const char* v = getenv("NRTPROF_DISABLE");
    disabled = v != nullptr && v[0] == '1' && v[1] == '\0' ? 1 : 0;
    g_disabled_by_env.store(disabled, std::memory_order_relaxed);
  }
  return disabled == 1;
}

void SayNotice(const char* line) {
  WriteStderr(line);
  const uint32_t index = g_core.notices_reserved.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxNotices) return;
  constexpr char kPrefix[] = "nrtprof: ";
  if (strncmp(line, kPrefix, sizeof(kPrefix) - 1) == 0) line += sizeof(kPrefix) - 1;
  char* text = g_core.notices[index];
  size_t n = strnlen(line, kNoticeBytes - 1);
  if (n > 0 && line[n - 1] == '\n') --n;
  memcpy(text, line, n);
  text[n] = '\0';
  g_core.notice_ready[index].store(1, std::memory_order_release);
}

void* ResolveReal(ApiFunction f) {
  const uint32_t bit = 1u << f;
  if ((g_missing_reported.load(std::memory_order_relaxed) & bit) != 0) return nullptr;
  DlsymFn real_dlsym = RealDlsym();
  void* p = real_dlsym != nullptr ? real_dlsym(RTLD_NEXT, ApiFunctionName(f)) : nullptr;
  if (p == nullptr && real_dlsym != nullptr) {
    if (void* handle = g_nrt_handle.load(std::memory_order_acquire); handle != nullptr) {
      p = real_dlsym(handle, ApiFunctionName(f));
    }
  }
  // A failed look-up leaves a message for dlerror(): the program's next dlerror() is its own.
  if (p == nullptr) dlerror();
  // Not in the global scope: libnrt came in under a module the program dlopen()ed
  // RTLD_LOCAL (a Python extension, a plugin). Its own definition is the real one.
  if (p == nullptr) p = FindRuntime(f);
  if (p != nullptr) {
    void* expected = nullptr;
    g_real[f].compare_exchange_strong(expected, p, std::memory_order_acq_rel);
    return g_real[f].load(std::memory_order_acquire);
  }
  if ((g_missing_reported.fetch_or(bit, std::memory_order_relaxed) & bit) == 0) {
    char line[256];
    snprintf(line, sizeof(line),
             "nrtprof: the loaded libnrt has no %s; calls to it fail with NRT_FAILURE\n",
             ApiFunctionName(f));
    SayNotice(line);
  }
  return nullptr;
}

bool ConfigureSlow() {
  pthread_mutex_lock(&g_start_mu);
  if (g_phase.load(std::memory_order_acquire) == kUninit) ConfigureLocked();
  const int phase = g_phase.load(std::memory_order_acquire);
  pthread_mutex_unlock(&g_start_mu);
  return phase == kConfigured || phase == kStarted;
}

bool StartSlow() {
  int phase = g_phase.load(std::memory_order_acquire);
  if (phase == kForkedChild) {
    if (g_fork_note_printed.load(std::memory_order_relaxed) == 0 &&
        g_fork_note_printed.exchange(1, std::memory_order_relaxed) == 0) {
      char line[256];
      snprintf(line, sizeof(line),
               "nrtprof: process %d was forked from a profiled process; its libnrt calls are "
               "not recorded (gRPC cannot be used after fork)\n",
               static_cast<int>(getpid()));
      WriteStderr(line);
    }
    return false;
  }
  if (phase != kUninit && phase != kConfigured) return false;
  // Modules loaded before this first call may reach libnrt without the shim (RTLD_DEEPBIND).
  if (phase == kUninit) ScanLoadedObjects();
  pthread_mutex_lock(&g_start_mu);
  if (g_phase.load(std::memory_order_acquire) == kUninit) ConfigureLocked();
  if (g_phase.load(std::memory_order_acquire) == kConfigured) StartBackendLocked();
  phase = g_phase.load(std::memory_order_acquire);
  pthread_mutex_unlock(&g_start_mu);
  return phase == kStarted;
}

ThreadState* CreateThreadState(RecordKind kind) {
  if (!EnsureConfigured()) return nullptr;
  // A spare ring if there is one: its first pages are present and mapped already.
  pthread_mutex_lock(&g_core.registry_mu);
  ThreadState* ts = g_core.spare_threads;
  if (ts != nullptr) {
    g_core.spare_threads = ts->next;
    --g_core.spare_count;
  }
  pthread_mutex_unlock(&g_core.registry_mu);
  if (ts == nullptr) {
    ts = NewRingState();
    if (ts == nullptr) {
      t_state = kNoRingThread;
      CountLostRecord(kind, /*no_ring=*/true);
      return nullptr;
    }
    // Only the ring's first pages are faulted in now; the flusher faults in more ahead of the
    // producer as the thread records (FaultInSlots), so a thread that records little costs
    // little memory and the hot path rarely touches a page for the first time.
    FaultInSlots(ts->ring, kInitialFaultInSlots);
  }
  ts->tid = static_cast<uint32_t>(gettid());
  pthread_once(&g_key_once, &CreateThreadKey);
  pthread_setspecific(g_thread_key, ts);
  pthread_mutex_lock(&g_core.registry_mu);
  ts->polls = &t_polls;
  ts->next = g_core.threads;
  g_core.threads = ts;
  pthread_mutex_unlock(&g_core.registry_mu);
  t_hot.producer = RingProducer(ts->ring);
  t_state = ts;
  return ts;
}

void CaptureStack(Record* record, uint32_t depth) {
  int (*backtrace)(void**, int) = g_core.backtrace.load(std::memory_order_relaxed);
  if (depth > kMaxStackDepth) depth = kMaxStackDepth;
  if (backtrace == nullptr || depth == 0) return;
  constexpr int kSlack = 8;  // the core's own frames, skipped below
  void* frames[kMaxStackDepth + kSlack];
  const int n = backtrace(frames, static_cast<int>(depth) + kSlack);
  auto in_core = [](void* frame) {
    const uintptr_t pc = reinterpret_cast<uintptr_t>(frame);
    return pc >= g_core.core_text_begin && pc < g_core.core_text_end;
  };
  // The unwinder's own frame may come first, then the core's: the program's start after.
  int i = 0;
  while (i < n && !in_core(frames[i])) ++i;
  while (i < n && in_core(frames[i])) ++i;
  if (i >= n) i = 0;
  uint32_t kept = 0;
  for (; i < n && kept < depth; ++i) record->frames()[kept++] = reinterpret_cast<uintptr_t>(frames[i]);
  record->stack_depth = static_cast<uint8_t>(kept);
}

void RecordPollTally() {
  if (t_polls.is_completed.load(std::memory_order_relaxed) == 0 &&
      t_polls.get_sequence.load(std::memory_order_relaxed) == 0) {
    return;
  }
  if (RunningBackend() == nullptr || g_core.recording.load(std::memory_order_relaxed) == 0) return;
  RingProducer* producer = GetProducer(RecordKind::kApiCall);
  if (producer == nullptr) return;  // counted as lost by GetProducer
  const struct {
    ApiFunction function;
    std::atomic<uint64_t>* polls;
  } tallies[] = {{kNrtaIsCompleted, &t_polls.is_completed},
                 {kNrtaGetSequence, &t_polls.get_sequence}};
  for (const auto& tally : tallies) {
    const uint64_t polls = TakePolls(tally.polls);
    if (polls == 0) continue;
    Record* r = producer->TryReserve(1);
    if (r == nullptr) {
      producer->CountDrop(RecordKind::kApiCall);
      continue;
    }
    r->Clear(RecordKind::kApiCall, 1);
    r->api = tally.function;
    r->flags = kRecordPollsOnly;
    r->correlation_id = NextCorrelationId(&t_hot);
    r->bytes = polls;
    r->start_ticks = r->end_ticks = Ticks();
    if (producer->Commit(r)) WakeFlusher();
  }
}

void NotePolling() {
  if (t_state != nullptr || t_in_call != 0) return;  // has its ring, or cannot record
  if (RunningBackend() == nullptr || g_core.recording.load(std::memory_order_relaxed) == 0) return;
  // The ring and the exit destructor, as a first record would make them; nothing is recorded.
  t_in_call = 1;
  GetThreadState(RecordKind::kApiCall);
  t_in_call = 0;
}

void WakeFlusher() {
  const int saved_errno = errno;
  g_core.flusher_wake.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_core.flusher_wake), FUTEX_WAKE_PRIVATE, 1,
          nullptr, nullptr, 0);
  errno = saved_errno;
}

}  // namespace nrtprof::shim::core
