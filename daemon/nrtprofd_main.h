// nrtprofd, the collector daemon, as a library: daemon/nrtprofd.cc's main() is one call to
// NrtprofdMain, and tests run the same code.
//
//   nrtprofd [--FLAG=VALUE | --FLAG VALUE]...   (nrtprofd --help: every flag, from its ABSL_FLAG)
//
// Listens on a unix socket (default $XDG_RUNTIME_DIR/nrtprof/nrtprofd.sock, else
// /tmp/nrtprof-UID/nrtprofd.sock; the folder is made 0700, the socket 0600) for shim streams
// and the CLI's control RPCs and, with --listen, on TCP with TLS, every call checked by a
// bearer token or a client certificate (tcp_listener.h). Refuses to start when another daemon
// answers on the socket; removes a stale socket file. Started as root with --listen, it needs
// --user and becomes that user once TCP is bound, before it makes the socket. Writes "ready\n"
// ("ready HOST:PORT\n" with --listen, the port bound) to --ready_fd once listening. On SIGINT
// or SIGTERM: refuses new captures, writes the captures in progress, closes the streams and
// exits 0. --help prints the flags and exits 0. A bad flag or flag combination (an unknown
// flag, --listen without TLS, root without --user): one line on stderr, exit 2, before
// anything listens; any other failure to start (folder not writable, socket or port in use, a
// token file others can read): one line on stderr, exit 1.
//
// Call once per process, from the main thread before any other thread starts (it blocks
// SIGINT and SIGTERM in every thread to wait for them).
#ifndef NRTPROF_DAEMON_NRTPROFD_MAIN_H_
#define NRTPROF_DAEMON_NRTPROFD_MAIN_H_

namespace nrtprof::daemon {

int NrtprofdMain(int argc, char** argv);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_NRTPROFD_MAIN_H_
