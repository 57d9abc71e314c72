// The profiler's own descriptors belong to the profiler: a program that closes descriptors it
// does not own (a server that daemonizes, closefrom(3), close_range(3, ~0U, 0), a loop closing
// 3..1023) must not close gRPC's epoll set, wakeup eventfds and daemon socket under the shim,
// nor get their numbers for its own files while gRPC still reads and writes them.
//
// How (as LTTng-UST's liblttng-ust-fd does): the core exports close, closefrom and close_range.
// A close of one of the shim's descriptors by the program behaves as if it were not open (-1,
// EBADF: what the program would get without the profiler) and leaves it open;
// closefrom/close_range close everything else in their range.
//
// Which descriptors are the shim's: those created by the objects that the backend's dlopen()
// brought into the process (the backend itself, gRPC, OpenSSL, c-ares, abseil...: everything
// that was not loaded before). Their GOT entries for the functions that create descriptors
// (socket, epoll_create1, eventfd, pipe, open, fopen...) are pointed at wrappers that register
// the result, and those for close, fclose and closedir at wrappers that forget it first.
// Libraries the program had already loaded (libc, libstdc++, a libgrpc of its own) are left
// alone, so the program's own descriptors are never taken for the shim's.
//
// Each descriptor the wrappers see made (but those dup2 and dup3 put at a number of their
// maker's choice) is moved above the numbers the program uses (the top quarter of its soft
// RLIMIT_NOFILE, from 1024 at most) with F_DUPFD_CLOEXEC, and the low number closed: the
// program's own open, socket, pipe... get the lowest free numbers, as POSIX promises and as they
// would without the profiler. A FILE's descriptor is changed in the stream (glibc), a DIR is
// made around the moved one. Where there is no room up there the number stays.
//
// A registration remembers the descriptor's (st_dev, st_ino) and process id: a number the
// program now holds for a file of its own (the shim's descriptor closed by a path not seen
// here), and every descriptor in a forked child, is closed as asked.
//
// Thread-safety: every function may be called from any thread at any time, before the shim is
// configured, in a fork or vfork child and (close) from a signal handler: no lock, no
// allocation, and no system call on close's path unless the descriptor is registered.
#ifndef NRTPROF_SHIM_PRELOAD_FD_GUARD_H_
#define NRTPROF_SHIM_PRELOAD_FD_GUARD_H_

#include "shim/preload/core.h"

namespace nrtprof::shim::core {

// Around the core's dlopen() of the backend (core.cc, under its start mutex): the first notes
// the objects loaded now, the second patches those the dlopen() added.
void FdGuardBeforeBackendLoad() NRTPROF_HIDDEN;
void FdGuardAfterBackendLoad() NRTPROF_HIDDEN;

// `fd`, made by the core itself (the rings file), is the shim's from now on: moved high as
// those of the backend's libraries are; the number to use instead of `fd`.
int FdGuardKeep(int fd) NRTPROF_HIDDEN;

}  // namespace nrtprof::shim::core

#endif  // NRTPROF_SHIM_PRELOAD_FD_GUARD_H_
