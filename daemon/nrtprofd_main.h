// nrtprofd, the collector daemon, as a library: daemon/nrtprofd.cc's main() is one call to
// NrtprofdMain, and tests run the same code.
//
//   nrtprofd [--socket PATH] [--output_root DIR] [--ready_fd N] [--max_events_per_process N]
//
// Listens on a unix socket (default /tmp/nrtprof-UID/nrtprofd.sock; the folder is made 0770,
// the socket 0660) for shim streams and the CLI's control RPCs. Refuses to start when another
// daemon answers on the socket; removes a stale socket file. Writes "ready\n" to --ready_fd
// once listening. On SIGINT or SIGTERM: refuses new captures, writes the captures in progress,
// closes the streams and exits 0. A bad flag: one line on stderr, exit 2; any other failure to
// start (folder not writable, socket in use): one line on stderr, exit 1.
//
// Call once per process, from the main thread before any other thread starts (it blocks
// SIGINT and SIGTERM in every thread to wait for them).
#ifndef NRTPROF_DAEMON_NRTPROFD_MAIN_H_
#define NRTPROF_DAEMON_NRTPROFD_MAIN_H_

namespace nrtprof::daemon {

int NrtprofdMain(int argc, char** argv);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_NRTPROFD_MAIN_H_
