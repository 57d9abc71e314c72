// `nrtprof run [--out DIR] [--stacks N] [--device-profile] -- CMD ARGS...`: runs CMD with the shim preloaded,
// against a running daemon or a private one started for this run, then closes the capture and
// prints the summary table and where the trace is. Exits with CMD's exit code, or
// kEmptyCaptureExit (3) when CMD exited 0 and the capture is empty. nrtprof's own lines go to
// stderr, so CMD's stdout stays exactly its own.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/progress.h"
#include "client/daemon_connection.h"
#include "client/daemon_credentials.h"
#include "client/capture_report.h"
#include "client/fetch.h"
#include "client/flags.h"
#include "client/locate.h"
#include "common/address.h"
#include "grpcpp/grpcpp.h"

// Shared with capture, whose --help says its own default (cli_main.cc).
ABSL_FLAG(std::string, out, "", "the capture's folder (default: ./nrtprof-captures/CAPTURE_ID)");
ABSL_FLAG(int, stacks, -1,
          "call-stack depth recorded for each runtime call, 0 (off) to 64 (default: "
          "$NRTPROF_STACKS, else 0)");
ABSL_FLAG(std::string, files, "",
          "write only these of the capture's files, as pftrace,summary: pftrace (trace.pftrace), "
          "json (trace.json), summary (summary.txt, .csv and .json), artifacts (model files and "
          "device traces); the table is printed either way. Default: all of them");
ABSL_FLAG(bool, device_profile, false,
          "also the runtime's device profile of each model: the engines' ops and the I/O DMA "
          "inside every execution (NRTPROF_DEVICE_PROFILE=1)");
ABSL_FLAG(std::string, mode, "",
          "best_effort (the default, or NRTPROF_MODE) or lossless: every batch also spooled to "
          "disk, so a daemon that is away or restarts loses nothing");

namespace nrtprof::cli {
namespace {

constexpr char kRunUsage[] =
    "nrtprof run [--out DIR] [--files KINDS] [--stacks N] [--device-profile] "
    "[--mode best_effort|lossless] "
    "[--addr ADDRESS "
    "[--tls_ca PEM --token_file PATH]] -- CMD ARGS...";

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof run: %s\n", line.c_str());
  return code;
}

// A daemon to talk to: the one named by --addr or NRTPROF_ADDR (which must answer and, on a
// unix socket, be trusted; over TLS for a TCP address), else the per-user default if one
// answers and is trusted, else a private one for this run.
absl::StatusOr<std::unique_ptr<DaemonConnection>> FindDaemon(const TlsPaths& tls) {
  const std::string flag = absl::GetFlag(FLAGS_addr);
  const char* env = getenv("NRTPROF_ADDR");
  if (!flag.empty() || (env != nullptr && env[0] != '\0')) {
    const std::string address = flag.empty() ? DaemonAddress() : ToGrpcTarget(flag);
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        CredentialsFor(address, tls);
    if (!credentials.ok()) return credentials.status();
    return DaemonConnection::Connect(address, 2000, *credentials);
  }
  absl::StatusOr<std::unique_ptr<DaemonConnection>> running =
      DaemonConnection::Connect(DaemonAddress(), 300);
  if (running.ok()) return running;
  if (running.status().code() == absl::StatusCode::kInvalidArgument) return running.status();
  if (running.status().code() == absl::StatusCode::kPermissionDenied) {
    // Someone else's socket where ours should be: this run's capture goes to a daemon of its
    // own instead, and the user learns why the standing one was passed over.
    fprintf(stderr, "nrtprof run: %s; starting a private daemon for this run\n",
            std::string(running.status().message()).c_str());
  }
  absl::StatusOr<std::string> daemon = Locate("daemon/nrtprofd", "NRTPROF_DAEMON");
  if (!daemon.ok()) return daemon.status();
  // Its output root is made when it starts: ./nrtprof-captures only if the capture goes there.
  const std::string out = Absolute(absl::GetFlag(FLAGS_out));
  std::string root = Absolute("nrtprof-captures");
  if (const size_t slash = out.rfind('/'); !out.empty() && slash != std::string::npos) {
    root = slash == 0 ? "/" : out.substr(0, slash);
  }
  return DaemonConnection::StartPrivate(*daemon, root);
}

volatile sig_atomic_t g_interrupted = 0;
void NoteInterrupt(int sig) { g_interrupted = sig; }

std::string ReadSmallFile(const std::string& path) {
  std::string text;
  if (FILE* f = fopen(path.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < (1 << 20);) {
      text.append(buf, n);
    }
    fclose(f);
  }
  return text;
}

// Runs argv with the profiler's environment; returns its exit code (128 + signal if killed).
int RunChild(const std::vector<char*>& argv, const std::string& shim, const std::string& address,
             const TlsPaths& tls, const StartCaptureReply& capture, int stacks,
             const std::string& mode, const std::string& mark) {
  // Like time(1): a Ctrl-C reaches the program (it is in the terminal's foreground group, and
  // the private daemon is not); nrtprof notes it, waits for the program to finish -- its
  // handler may still work -- and writes the capture. Caught, not ignored: exec gives the
  // program the default disposition back.
  struct sigaction note {}, old_int{}, old_quit{};
  note.sa_handler = NoteInterrupt;
  sigemptyset(&note.sa_mask);
  sigaction(SIGINT, &note, &old_int);
  sigaction(SIGQUIT, &note, &old_quit);
  const pid_t pid = fork();
  if (pid < 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    return Fail("fork failed", 127);
  }
  if (pid == 0) {
    const char* preload = getenv("LD_PRELOAD");
    const std::string preloads =
        preload != nullptr && preload[0] != '\0' ? absl::StrCat(shim, ":", preload) : shim;
    setenv("LD_PRELOAD", preloads.c_str(), 1);
    setenv("NRTPROF_ADDR", address.c_str(), 1);
    if (KindOf(address) == AddressKind::kTcp) {
      // What this run checked the daemon with, as absolute paths: the shim reads the same files.
      const std::pair<const char*, std::string> tls_env[] = {
          {"NRTPROF_TLS_CA", tls.ca},
          {"NRTPROF_TOKEN_FILE", tls.token_file},
          {"NRTPROF_TLS_CERT", tls.cert},
          {"NRTPROF_TLS_KEY", tls.key}};
      for (const auto& [name, path] : tls_env) {
        if (path.empty()) {
          unsetenv(name);
        } else {
          setenv(name, path.c_str(), 1);
        }
      }
    }
    setenv("NRTPROF_CAPTURE", capture.capture_id().c_str(), 1);
    if (!mark.empty()) setenv("NRTPROF_RUN_MARK", mark.c_str(), 1);
    // The caller's NRTPROF_* settings reach the program as they are (the shim reports an
    // invalid one itself), unless a flag says otherwise.
    if (stacks >= 0) setenv("NRTPROF_STACKS", std::to_string(stacks).c_str(), 1);
    if (absl::GetFlag(FLAGS_device_profile)) setenv("NRTPROF_DEVICE_PROFILE", "1", 1);
    setenv("NRTPROF_MODE", mode.c_str(), 1);
    // The daemon's spool folder is on its machine: a local daemon reads the shims' spools there;
    // across TCP the shim keeps its spool on this machine (NRTPROF_SPOOL_DIR or the default)
    // and sends the daemon what it missed from it.
    if (KindOf(address) != AddressKind::kTcp && !capture.spool_dir().empty()) {
      setenv("NRTPROF_SPOOL_DIR", capture.spool_dir().c_str(), 1);
    }
    execvp(argv[0], argv.data());
    fprintf(stderr, "nrtprof run: cannot run '%s': %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : 1;
  if (g_interrupted != 0) {
    fprintf(stderr,
            "nrtprof run: interrupted (%s): the program %s; writing everything it did, its "
            "handler's work included\n",
            g_interrupted == SIGINT ? "Ctrl-C" : "SIGQUIT",
            WIFSIGNALED(status) ? absl::StrCat("was ended by signal ", WTERMSIG(status)).c_str()
                                : absl::StrCat("exited with ", code).c_str());
  }
  return code;
}

// Whether execvp() could start `command`, as a shell answers it: 0 if it could, 126 for a file
// that is there but cannot be run, 127 for none (with *why). Checked before any capture
// exists, so a typo costs one line and leaves nothing behind.
int Runnable(const std::string& command, std::string* why) {
  auto check = [&](const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return 127;
    if (S_ISDIR(st.st_mode)) {
      *why = "is a folder";
      return 126;
    }
    if (access(path.c_str(), X_OK) != 0) {
      *why = "permission denied (not executable)";
      return 126;
    }
    return 0;
  };
  *why = "no such file";
  if (command.find('/') != std::string::npos) return check(command);
  *why = "not found in PATH";
  const char* path = getenv("PATH");
  int best = 127;
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const int found = check(absl::StrCat(dir.empty() ? "." : dir, "/", command));
    if (found == 0) return 0;
    best = std::min(best, found);
  }
  return best;
}

// What the capture asks of its processes, from the flags (or their NRTPROF_* variables).
struct RunSettings {
  int stacks = -1;  // --stacks; -1: not given
  uint32_t stack_depth = 0;
  std::string mode;
  std::vector<CaptureFileKind> kinds;
};

absl::StatusOr<RunSettings> RunSettingsFromFlags() {
  RunSettings settings;
  settings.stacks = absl::GetFlag(FLAGS_stacks);
  if (settings.stacks < -1 || settings.stacks > 64) {
    return absl::InvalidArgumentError("--stacks must be from 0 to 64");
  }
  // The flag, else a valid NRTPROF_STACKS, else none.
  settings.stack_depth = settings.stacks >= 0 ? static_cast<uint32_t>(settings.stacks) : 0;
  if (const char* env = getenv("NRTPROF_STACKS"); settings.stacks < 0 && env != nullptr) {
    if (uint32_t depth = 0; absl::SimpleAtoi(env, &depth) && depth <= 64) {
      settings.stack_depth = depth;
    }
  }
  settings.mode = absl::GetFlag(FLAGS_mode);
  if (settings.mode.empty()) {
    const char* env = getenv("NRTPROF_MODE");
    settings.mode = env != nullptr && env[0] != '\0' ? env : "best_effort";
  }
  if (settings.mode != "best_effort" && settings.mode != "lossless") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode '", settings.mode, "' is not best_effort or lossless"));
  }
  absl::StatusOr<std::vector<CaptureFileKind>> kinds = FileKindsFromFlag();
  if (!kinds.ok()) return kinds.status();
  settings.kinds = *std::move(kinds);
  return settings;
}

// Which processes the profiler reached: each appends a line "PID EXE" to a file of this
// command's own (the shim's MarkLoaded).
class ReachedProcesses {
 public:
  ReachedProcesses() {
    if (mkdtemp(dir_) == nullptr) return;
    path_ = std::string(dir_) + "/reached";
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      close(fd);
    } else {
      path_.clear();
    }
  }
  ReachedProcesses(const ReachedProcesses&) = delete;
  ReachedProcesses& operator=(const ReachedProcesses&) = delete;
  ~ReachedProcesses() { Collect(); }

  // The file the shims append to; empty if it could not be made.
  const std::string& path() const { return path_; }

  // Reads the lines and removes the file and its folder. Once.
  const std::vector<std::string>& Collect() {
    if (collected_) return lines_;
    collected_ = true;
    if (!path_.empty()) {
      for (absl::string_view line :
           absl::StrSplit(ReadSmallFile(path_), '\n', absl::SkipEmpty())) {
        lines_.emplace_back(line);
      }
      unlink(path_.c_str());
    }
    rmdir(dir_);
    return lines_;
  }

 private:
  char dir_[32] = "/tmp/nrtprof-mark-XXXXXX";
  std::string path_;
  std::vector<std::string> lines_;
  bool collected_ = false;
};

// Starts the capture the program runs under, into `out` (if given: checked free first).
absl::StatusOr<StartCaptureReply> StartRunCapture(DaemonConnection& connection,
                                                  const std::string& out,
                                                  const RunSettings& settings) {
  if (!out.empty()) {
    if (absl::Status s = CheckCaptureFolderFree(out); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot start a capture: ", s.message()));
    }
  }
  StartCaptureRequest start;
  start.set_output_dir(out);
  start.set_stack_depth(settings.stack_depth);
  for (CaptureFileKind kind : settings.kinds) start.add_files(kind);
  StartCaptureReply capture;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const absl::Status s = FromGrpc(connection.stub()->StartCapture(&context, start, &capture),
                                  connection.address());
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot start a capture: ", s.message()));
  }
  return capture;
}

// Stops the capture and has it written; a standing daemon that restarted meanwhile (it
// carries the capture on, from its manifest) is waited for, up to 30 s.
absl::Status StopRunCapture(DaemonConnection& connection, const std::string& capture_id,
                            CaptureFiles* files) {
  StopCaptureRequest stop;
  stop.set_capture_id(capture_id);
  stop.set_wait_ms(10000);
  absl::Status s;
  Progress progress("writing the capture");
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    s = FromGrpc(connection.stub()->StopCapture(&context, stop, files), connection.address());
  }
  if (s.code() == absl::StatusCode::kUnavailable && !connection.private_daemon()) {
    progress.Done();  // the line below must not land on the progress line
    fprintf(stderr, "nrtprof run: the daemon at %s is away; waiting up to 30 s for it\n",
            connection.address().c_str());
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    s = FromGrpc(connection.stub()->StopCapture(&context, stop, files), connection.address());
  }
  return s;
}

// Why a capture came out empty, where it can be known: the program never called libnrt, the
// shim never reached it, or its processes connected and recorded nothing.
void SayWhyEmpty(const char* command, const std::string& mark,
                 const std::vector<std::string>& reached, const CaptureFiles& files) {
  if (files.processes() == 0) {
    if (mark.empty()) {
      fprintf(stderr, "nrtprof: no process of '%s' called libnrt: the capture is empty\n",
              command);
    } else if (reached.empty()) {
      fprintf(stderr,
              "nrtprof: the profiler never reached '%s': its shim was not loaded (a statically "
              "linked or setuid program ignores LD_PRELOAD, and so does one started with its "
              "environment cleared); nothing recorded\n",
              command);
    } else {
      std::vector<std::string> who;
      for (const std::string& r : reached) {
        const size_t space = r.find(' ');
        const std::string exe = space == std::string::npos ? "" : r.substr(space + 1);
        who.push_back(absl::StrCat(exe.substr(exe.rfind('/') + 1), " (pid ", r.substr(0, space),
                                   ")"));
      }
      fprintf(stderr,
              "nrtprof: no process of '%s' called libnrt: the capture is empty (the profiler "
              "reached %s, and none called libnrt; a program they started without LD_PRELOAD, "
              "as env -i does, is not reached)\n",
              command, absl::StrJoin(who, ", ").c_str());
    }
  } else if (files.events() == 0) {
    // Rare (its processes connected, and recorded nothing), but the exit code says it.
    fprintf(stderr, "nrtprof: the capture is empty: %u process%s of '%s' connected, and none "
            "recorded a libnrt call\n",
            files.processes(), files.processes() == 1 ? "" : "es", command);
  }
}

}  // namespace

int RunCommand(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) return Fail(absl::StrCat("no command to run; usage: ", kRunUsage), 2);
  const absl::StatusOr<RunSettings> settings = RunSettingsFromFlags();
  if (!settings.ok()) return Fail(std::string(settings.status().message()), 2);
  std::vector<char*> command(args.begin() + 1, args.end());
  command.push_back(nullptr);
  std::string why;
  if (const int runnable = Runnable(command[0], &why); runnable != 0) {
    return Fail(absl::StrCat("cannot run '", command[0], "': ", why), runnable);
  }

  absl::StatusOr<std::string> shim = Locate("shim/libnrtprof_shim.so", "NRTPROF_SHIM");
  if (!shim.ok()) return Fail(std::string(shim.status().message()));
  const TlsPaths tls = TlsPathsFromFlags();
  absl::StatusOr<std::unique_ptr<DaemonConnection>> daemon = FindDaemon(tls);
  if (!daemon.ok()) {
    return Fail(std::string(daemon.status().message()),
                daemon.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
  DaemonConnection& connection = **daemon;

  const std::string out = Absolute(absl::GetFlag(FLAGS_out));
  absl::StatusOr<StartCaptureReply> started = StartRunCapture(connection, out, *settings);
  if (!started.ok()) return Fail(std::string(started.status().message()));
  const StartCaptureReply& capture = *started;
  // A shared service of another user writes the capture into a folder of its own; this
  // command fetches it and writes it here, as the user who ran it.
  if (!Quiet()) {
    fprintf(stderr, "nrtprof: capture %s -> %s (daemon %s%s)\n", capture.capture_id().c_str(),
            CaptureDestination(capture, out).c_str(), connection.address().c_str(),
            connection.private_daemon() ? ", private to this run"
            : capture.fetch()           ? ", a shared service: fetched when written"
                                        : "");
  }

  ReachedProcesses reached;
  const int code = RunChild(command, *shim, connection.address(), tls, capture, settings->stacks,
                            settings->mode, reached.path());
  reached.Collect();

  CaptureFiles files;
  if (absl::Status s = StopRunCapture(connection, capture.capture_id(), &files); !s.ok()) {
    fprintf(stderr, "nrtprof run: the capture was not written: %s\n",
            std::string(s.message()).c_str());
    return code;
  }
  SayWhyEmpty(command[0], reached.path(), reached.Collect(), files);
  const bool empty = files.events() == 0;
  ReportCapture(connection, capture, out, std::move(files), "nrtprof run");
  // CMD's own code first: its failure matters more than the profile's. A CMD that did well but
  // left nothing to profile is told from a capture with something in it.
  return code == 0 && empty ? kEmptyCaptureExit : code;
}

}  // namespace nrtprof::cli
