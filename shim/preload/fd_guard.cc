#include "shim/preload/fd_guard.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "shim/preload/elf_image.h"

// Fortified entry points the backend's libraries may import (bits/fcntl2.h declares them only
// under _FORTIFY_SOURCE).
extern "C" int __open_2(const char* path, int flags);
extern "C" int __open64_2(const char* path, int flags);
extern "C" int __openat_2(int dirfd, const char* path, int flags);
extern "C" int __openat64_2(int dirfd, const char* path, int flags);

namespace nrtprof::shim::core {

using CloseFn = int (*)(int);
using ClosefromFn = void (*)(int);
using CloseRangeFn = int (*)(unsigned int, unsigned int, int);

// Read by the assembly of close(): the registered descriptors (0: close goes straight to libc)
// and libc's close, once resolved.
extern "C" NRTPROF_HIDDEN std::atomic<int> nrtprof_fd_guard_live;
extern "C" NRTPROF_HIDDEN void* nrtprof_libc_close;
std::atomic<int> nrtprof_fd_guard_live{0};
void* nrtprof_libc_close = nullptr;

namespace {

// The shim's descriptors: a handful (two epoll sets, their wakeup eventfds, a socket or two,
// the spool file, short-lived files). A slot is free while fd is kFree.
constexpr int kSlots = 256;
constexpr int kFree = -1;
constexpr int kClaimed = -2;
// The shim's descriptors are moved no higher than this (HighBase).
constexpr int kHighBaseMax = 1024;

struct Slot {
  std::atomic<int> fd{kFree};
  std::atomic<int> pid{0};
  std::atomic<uint64_t> dev{0};
  std::atomic<uint64_t> ino{0};
};

Slot g_slots[kSlots];
// One past the highest slot ever claimed: slots are claimed lowest first, so a close scans a
// few of them, not all 256.
std::atomic<int> g_slots_used{0};
std::atomic<int> g_full_said{0};
std::atomic<ClosefromFn> g_libc_closefrom{nullptr};
std::atomic<CloseRangeFn> g_libc_close_range{nullptr};

void WriteStderr(const char* line) {
  ssize_t ignored = write(STDERR_FILENO, line, strlen(line));
  (void)ignored;
}

// RTLD_NEXT, not libc by name: an interposer preloaded after the shim still sees the call.
CloseFn LibcClose() {
  void* p = __atomic_load_n(&nrtprof_libc_close, __ATOMIC_ACQUIRE);
  if (__builtin_expect(p == nullptr, 0)) {
    p = dlvsym(RTLD_NEXT, "close", "GLIBC_2.2.5");
    if (p == nullptr) p = dlsym(RTLD_NEXT, "close");
    __atomic_store_n(&nrtprof_libc_close, p, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<CloseFn>(p);
}

// Without it (glibc before 2.34, where the program cannot call it either) the system call.
int LibcCloseRange(unsigned int first, unsigned int last, int flags) {
  CloseRangeFn f = g_libc_close_range.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<CloseRangeFn>(dlvsym(RTLD_NEXT, "close_range", "GLIBC_2.34"));
    if (f != nullptr) g_libc_close_range.store(f, std::memory_order_release);
  }
  if (f != nullptr) return f(first, last, flags);
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

void LibcClosefrom(int lowfd) {
  ClosefromFn f = g_libc_closefrom.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<ClosefromFn>(dlvsym(RTLD_NEXT, "closefrom", "GLIBC_2.34"));
    if (f != nullptr) g_libc_closefrom.store(f, std::memory_order_release);
  }
  if (f != nullptr) {
    f(lowfd);
    return;
  }
  LibcCloseRange(static_cast<unsigned int>(lowfd < 0 ? 0 : lowfd), ~0U, 0);
}

bool SameFile(const struct stat& st, const Slot& slot) {
  return static_cast<uint64_t>(st.st_dev) == slot.dev.load(std::memory_order_relaxed) &&
         static_cast<uint64_t>(st.st_ino) == slot.ino.load(std::memory_order_relaxed);
}

void Release(Slot* slot, int fd) {
  int expected = fd;
  if (slot->fd.compare_exchange_strong(expected, kFree, std::memory_order_acq_rel)) {
    nrtprof_fd_guard_live.fetch_sub(1, std::memory_order_relaxed);
  }
}

// Forgets `fd`: the shim is about to close it.
void Unregister(int fd) {
  if (fd < 0 || nrtprof_fd_guard_live.load(std::memory_order_acquire) == 0) return;
  const int used = g_slots_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    if (g_slots[i].fd.load(std::memory_order_acquire) == fd) Release(&g_slots[i], fd);
  }
}

// Remembers `fd`, just created by the backend's libraries.
void Register(int fd) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return;
  // A registration of the same number left by a close not seen here is stale now.
  Unregister(fd);
  const int pid = static_cast<int>(getpid());
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[i];
    int expected = kFree;
    if (!slot.fd.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) continue;
    int used = g_slots_used.load(std::memory_order_relaxed);
    while (used < i + 1 && !g_slots_used.compare_exchange_weak(used, i + 1,
                                                                std::memory_order_release)) {
    }
    slot.pid.store(pid, std::memory_order_relaxed);
    slot.dev.store(static_cast<uint64_t>(st.st_dev), std::memory_order_relaxed);
    slot.ino.store(static_cast<uint64_t>(st.st_ino), std::memory_order_relaxed);
    // Counted before it is published, so close() never skips a published slot.
    nrtprof_fd_guard_live.fetch_add(1, std::memory_order_release);
    slot.fd.store(fd, std::memory_order_release);
    return;
  }
  if (g_full_said.exchange(1, std::memory_order_relaxed) == 0) {
    WriteStderr("nrtprof: the profiler holds more than 256 descriptors; the program can close "
                "the others under it\n");
  }
}

// True if `fd` is the shim's, in this process, and still the file the shim opened.
bool IsShimFd(int fd) {
  if (fd < 0) return false;
  const int used = g_slots_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    Slot& slot = g_slots[i];
    if (slot.fd.load(std::memory_order_acquire) != fd) continue;
    // A forked (or vforked) child's copies are its own to close; its memory may be the
    // parent's (vfork), so the registration is left as it is.
    if (slot.pid.load(std::memory_order_relaxed) != static_cast<int>(getpid())) return false;
    const int saved_errno = errno;
    struct stat st;
    const bool same = fstat(fd, &st) == 0 && SameFile(st, slot);
    errno = saved_errno;
    if (same) return true;
    // The shim's descriptor went by a path not seen here and the number is the program's now.
    Release(&slot, fd);
    return false;
  }
  return false;
}

// The shim's descriptors in [first, last], ascending; how many.
int ShimFdsIn(unsigned int first, unsigned int last, int* out) {
  int n = 0;
  const int used = g_slots_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    const int fd = g_slots[i].fd.load(std::memory_order_acquire);
    if (fd < 0 || static_cast<unsigned int>(fd) < first || static_cast<unsigned int>(fd) > last) {
      continue;
    }
    if (!IsShimFd(fd)) continue;
    int at = n++;
    for (; at > 0 && out[at - 1] > fd; --at) out[at] = out[at - 1];
    out[at] = fd;
  }
  return n;
}

// One gap between the shim's descriptors. `emulate`: on a kernel without close_range, close
// them one by one as libc's closefrom would (close_range itself fails there as it would
// without the shim).
int CloseGap(unsigned int lo, unsigned int hi, int flags, bool emulate) {
  if (LibcCloseRange(lo, hi, flags) == 0) return 0;
  if (!emulate || errno != ENOSYS) return -1;
  for (unsigned int fd = lo; fd <= hi; ++fd) LibcClose()(static_cast<int>(fd));
  return 0;
}

// close_range(first, last, flags) on everything in the range but keep[0..n) (ascending, all
// in the range); 0, or -1 with the first failure's errno.
int CloseRangeAround(unsigned int first, unsigned int last, int flags, const int* keep, int n,
                     bool emulate) {
  int result = 0, first_errno = 0;
  auto gap = [&](unsigned int lo, unsigned int hi) {
    if (CloseGap(lo, hi, flags, emulate) != 0 && result == 0) {
      result = -1;
      first_errno = errno;
    }
  };
  unsigned int lo = first;
  for (int i = 0; i < n; ++i) {
    const unsigned int k = static_cast<unsigned int>(keep[i]);  // < INT_MAX: k + 1 is fine
    if (k > lo) gap(lo, k - 1);
    lo = k + 1;
  }
  if (lo <= last) gap(lo, last);
  if (result != 0) errno = first_errno;
  return result;
}

// ---- What the backend's libraries call instead (their GOT entries point here) ----

int TrackedClose(int fd) {
  Unregister(fd);
  return LibcClose()(fd);
}

int TrackedFclose(FILE* f) {
  if (f != nullptr) Unregister(fileno(f));
  return fclose(f);
}

int TrackedClosedir(DIR* d) {
  if (d != nullptr) Unregister(dirfd(d));
  return closedir(d);
}

// Where the shim's descriptors go: above the numbers the program uses, so that its own open,
// socket, pipe... get the lowest free numbers, as they would without the profiler (POSIX
// promises them, and shells and daemons count on it). Under the usual soft limit of 1024, its
// top quarter (768 and up); under a larger one, from 1024, outside select()'s FD_SETSIZE, and
// no higher: the kernel's table of descriptors grows to the highest number in use. Read at
// each move, since a program may raise its limit. -1: nowhere (no limit to read).
int HighBase() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  const rlim_t soft = limit.rlim_cur;
  const rlim_t base = soft - soft / 4;
  return base < kHighBaseMax ? static_cast<int>(base) : kHighBaseMax;
}

// `fd`, just made, moved to the lowest free number from HighBase() (close-on-exec: the shim's
// descriptors never go to a program the process executes) and the low one closed; `fd` itself
// if it is there already or there is no room there (a tiny limit): then it stays where it is,
// which costs the program a number and nothing else.
int MoveHigh(int fd) {
  const int base = HighBase();
  if (fd < 0 || base < 0 || fd >= base) return fd;
  const int saved_errno = errno;
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, base);
  if (high >= 0) LibcClose()(fd);
  errno = saved_errno;
  return high >= 0 ? high : fd;
}

// A descriptor made at the number its maker asked for (dup2, dup3): kept there.
int RegisteredInPlace(int fd) {
  if (fd >= 0) Register(fd);
  return fd;
}

int Registered(int fd) {
  if (fd < 0) return fd;
  fd = MoveHigh(fd);
  Register(fd);
  return fd;
}

FILE* RegisteredFile(FILE* f) {
  if (f == nullptr) return f;
#if defined(__GLIBC__)
  // Nothing was read or written through the stream yet, and glibc keeps its descriptor in this
  // one (public) field only, so the stream can be given the moved one.
  const int fd = fileno(f);
  const int high = MoveHigh(fd);
  if (high != fd) f->_fileno = high;
#endif
  Register(fileno(f));
  return f;
}

int RegisteredPair(int result, int fds[2]) {
  if (result == 0) {
    fds[0] = Registered(fds[0]);
    fds[1] = Registered(fds[1]);
  }
  return result;
}

// open(2)'s mode is there only with O_CREAT or O_TMPFILE.
mode_t ModeArg(int flags, va_list ap) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

int TrackedSocket(int domain, int type, int protocol) {
  return Registered(socket(domain, type, protocol));
}
int TrackedSocketpair(int domain, int type, int protocol, int fds[2]) {
  return RegisteredPair(socketpair(domain, type, protocol, fds), fds);
}
int TrackedAccept(int fd, sockaddr* addr, socklen_t* len) {
  return Registered(accept(fd, addr, len));
}
int TrackedAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return Registered(accept4(fd, addr, len, flags));
}
int TrackedEpollCreate(int size) { return Registered(epoll_create(size)); }
int TrackedEpollCreate1(int flags) { return Registered(epoll_create1(flags)); }
int TrackedEventfd(unsigned int initval, int flags) { return Registered(eventfd(initval, flags)); }
int TrackedPipe(int fds[2]) { return RegisteredPair(pipe(fds), fds); }
int TrackedPipe2(int fds[2], int flags) { return RegisteredPair(pipe2(fds, flags), fds); }
int TrackedOpen(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  return Registered(open(path, flags, mode));
}
int TrackedOpenat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  return Registered(openat(dirfd, path, flags, mode));
}
int TrackedOpen2(const char* path, int flags) { return Registered(__open_2(path, flags)); }
int TrackedOpen64_2(const char* path, int flags) { return Registered(__open64_2(path, flags)); }
int TrackedOpenat2(int dirfd, const char* path, int flags) {
  return Registered(__openat_2(dirfd, path, flags));
}
int TrackedOpenat64_2(int dirfd, const char* path, int flags) {
  return Registered(__openat64_2(dirfd, path, flags));
}
FILE* TrackedFopen(const char* path, const char* mode) { return RegisteredFile(fopen(path, mode)); }
// As glibc's opendir opens it, but the descriptor moved before the stream is made around it
// (a DIR's descriptor cannot be changed afterwards).
DIR* TrackedOpendir(const char* path) {
  const int fd = Registered(open(path, O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC));
  if (fd < 0) return nullptr;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    const int saved_errno = errno;
    TrackedClose(fd);
    errno = saved_errno;
  }
  return d;
}
int TrackedMkstemp(char* templ) { return Registered(mkstemp(templ)); }
int TrackedMkostemp(char* templ, int flags) { return Registered(mkostemp(templ, flags)); }
int TrackedDup(int fd) { return Registered(dup(fd)); }
int TrackedDup2(int fd, int newfd) { return RegisteredInPlace(dup2(fd, newfd)); }
int TrackedDup3(int fd, int newfd, int flags) {
  return RegisteredInPlace(dup3(fd, newfd, flags));
}
int TrackedFcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);  // as glibc reads it: an int or a pointer, one register
  va_end(ap);
  const int result = fcntl(fd, cmd, arg);
  return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC ? Registered(result) : result;
}

struct Hook {
  const char* name;
  void* wrapper;
};

#define NRTPROF_HOOK(name, fn) {name, reinterpret_cast<void*>(&fn)}
const Hook kHooks[] = {
    NRTPROF_HOOK("close", TrackedClose),
    NRTPROF_HOOK("fclose", TrackedFclose),
    NRTPROF_HOOK("closedir", TrackedClosedir),
    NRTPROF_HOOK("socket", TrackedSocket),
    NRTPROF_HOOK("socketpair", TrackedSocketpair),
    NRTPROF_HOOK("accept", TrackedAccept),
    NRTPROF_HOOK("accept4", TrackedAccept4),
    NRTPROF_HOOK("epoll_create", TrackedEpollCreate),
    NRTPROF_HOOK("epoll_create1", TrackedEpollCreate1),
    NRTPROF_HOOK("eventfd", TrackedEventfd),
    NRTPROF_HOOK("pipe", TrackedPipe),
    NRTPROF_HOOK("pipe2", TrackedPipe2),
    NRTPROF_HOOK("open", TrackedOpen),
    NRTPROF_HOOK("open64", TrackedOpen),
    NRTPROF_HOOK("openat", TrackedOpenat),
    NRTPROF_HOOK("openat64", TrackedOpenat),
    NRTPROF_HOOK("__open_2", TrackedOpen2),
    NRTPROF_HOOK("__open64_2", TrackedOpen64_2),
    NRTPROF_HOOK("__openat_2", TrackedOpenat2),
    NRTPROF_HOOK("__openat64_2", TrackedOpenat64_2),
    NRTPROF_HOOK("fopen", TrackedFopen),
    NRTPROF_HOOK("fopen64", TrackedFopen),
    NRTPROF_HOOK("opendir", TrackedOpendir),
    NRTPROF_HOOK("mkstemp", TrackedMkstemp),
    NRTPROF_HOOK("mkstemp64", TrackedMkstemp),
    NRTPROF_HOOK("mkostemp", TrackedMkostemp),
    NRTPROF_HOOK("mkostemp64", TrackedMkostemp),
    NRTPROF_HOOK("dup", TrackedDup),
    NRTPROF_HOOK("dup2", TrackedDup2),
    NRTPROF_HOOK("dup3", TrackedDup3),
    NRTPROF_HOOK("fcntl", TrackedFcntl),
    NRTPROF_HOOK("fcntl64", TrackedFcntl),
};
#undef NRTPROF_HOOK

void* HookFor(const char* name) {
  for (const Hook& h : kHooks) {
    if (strcmp(h.name, name) == 0) return h.wrapper;
  }
  return nullptr;
}

// ---- Which objects the backend's dlopen() added, and their GOT entries ----

// The objects loaded before the backend's dlopen(), by their program headers' address
// (unique while an object is loaded). Written and read under core.cc's start mutex.
const void** g_before = nullptr;
size_t g_before_count = 0;

int CountObjects(struct dl_phdr_info*, size_t, void* data) {
  ++*static_cast<size_t*>(data);
  return 0;
}

struct Snapshot {
  const void** phdrs;
  size_t capacity, count;
};

int NoteObject(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Snapshot*>(data);
  if (s->count < s->capacity) s->phdrs[s->count++] = info->dlpi_phdr;
  return 0;
}

bool WasLoadedBefore(const void* phdr) {
  for (size_t i = 0; i < g_before_count; ++i) {
    if (g_before[i] == phdr) return true;
  }
  return false;
}

// Points the object's references to the hooked functions at the wrappers.
void PatchObject(struct dl_phdr_info* info) {
  ElfImage image;
  if (!ReadElfImage(info, &image)) return;
  ForEachImportSlot(image, [&](const ImportSlot& import) {
    if (void* wrapper = HookFor(import.name); wrapper != nullptr) {
      WriteGotSlot(image, import.slot, wrapper);  // refused: that descriptor goes unguarded
    }
  });
}

int PatchIfNew(struct dl_phdr_info* info, size_t, void*) {
  if (!WasLoadedBefore(info->dlpi_phdr)) PatchObject(info);
  return 0;
}

// Resolved at load, so that a signal handler's close() never meets the first resolution.
__attribute__((constructor)) void ResolveLibcClose() { LibcClose(); }

}  // namespace

int FdGuardKeep(int fd) { return Registered(fd); }

void FdGuardBeforeBackendLoad() {
  free(g_before);
  g_before = nullptr;
  g_before_count = 0;
  size_t count = 0;
  dl_iterate_phdr(&CountObjects, &count);
  // Room for objects another thread loads meanwhile (those are then taken for the backend's:
  // at worst the program's descriptors from them are kept open).
  const size_t capacity = count + 64;
  Snapshot s{static_cast<const void**>(calloc(capacity, sizeof(void*))), capacity, 0};
  if (s.phdrs == nullptr) return;
  dl_iterate_phdr(&NoteObject, &s);
  g_before = s.phdrs;
  g_before_count = s.count;
}

void FdGuardAfterBackendLoad() {
  // Without the list of what was there before, nothing is known to be the backend's.
  if (g_before == nullptr) return;
  dl_iterate_phdr(&PatchIfNew, nullptr);
  free(g_before);
  g_before = nullptr;
  g_before_count = 0;
}

// ---- The program's close, closefrom and close_range ----

extern "C" NRTPROF_HIDDEN int nrtprof_guarded_close(int fd) {
  CloseFn real = LibcClose();
  if (IsShimFd(fd)) {
    errno = EBADF;
    return -1;
  }
  return real(fd);
}

#if defined(__x86_64__)
// close(fd): with no descriptor of the shim's registered (every process that never called
// libnrt), a jump to libc's close and nothing else, whatever the build's optimization.
__asm__(R"(
    .text
    .globl close
    .type close, @function
    .p2align 4
close:
    .cfi_startproc
    movl nrtprof_fd_guard_live(%rip), %eax
    testl %eax, %eax
    jnz nrtprof_guarded_close
    movq nrtprof_libc_close(%rip), %rax
    testq %rax, %rax
    jz nrtprof_guarded_close
    jmp *%rax
    .cfi_endproc
    .size close, .-close
)");
#else
extern "C" __attribute__((visibility("default"))) int close(int fd) noexcept {
  return nrtprof_guarded_close(fd);
}
#endif

extern "C" __attribute__((visibility("default"))) void closefrom(int lowfd) noexcept {
  if (__builtin_expect(nrtprof_fd_guard_live.load(std::memory_order_acquire) == 0, 1)) {
    LibcClosefrom(lowfd);
    return;
  }
  const unsigned int first = static_cast<unsigned int>(lowfd < 0 ? 0 : lowfd);
  int keep[kSlots];
  const int n = ShimFdsIn(first, ~0U, keep);
  if (n == 0) {
    LibcClosefrom(lowfd);
    return;
  }
  // Below the last of the shim's: the gaps between them; above it, libc's closefrom (with its
  // fallback where close_range is missing).
  const int saved_errno = errno;
  if (static_cast<unsigned int>(keep[n - 1]) > first) {
    CloseRangeAround(first, static_cast<unsigned int>(keep[n - 1]) - 1, 0, keep, n - 1,
                     /*emulate=*/true);
  }
  errno = saved_errno;
  if (keep[n - 1] < INT_MAX) LibcClosefrom(keep[n - 1] + 1);
}

extern "C" __attribute__((visibility("default"))) int close_range(unsigned int first,
                                                                   unsigned int last, int flags) noexcept {
  // Marking descriptors close-on-exec closes nothing; bad arguments fail as libc says.
  if (__builtin_expect(nrtprof_fd_guard_live.load(std::memory_order_acquire) == 0, 1) ||
      first > last || (flags & CLOSE_RANGE_CLOEXEC) != 0 ||
      (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) != 0) {
    return LibcCloseRange(first, last, flags);
  }
  int keep[kSlots];
  const int n = ShimFdsIn(first, last, keep);
  if (n == 0) return LibcCloseRange(first, last, flags);
  return CloseRangeAround(first, last, flags, keep, n, /*emulate=*/false);
}

}  // namespace nrtprof::shim::core
