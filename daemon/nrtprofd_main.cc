#include "daemon/nrtprofd_main.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/address.h"
#include "common/background_slice.h"
#include "common/clickhouse_http.h"
#include "common/credential_files.h"
#include "common/flag_help.h"
#include "trace/artifact_writer.h"
#include "trace/chrome_json_writer.h"
#include "daemon/collector_core.h"
#include "daemon/collector_service.h"
#include "daemon/control_service.h"
#include "daemon/fleet_exporter.h"
#include "trace/huge_page_allocator.h"
#include "daemon/metrics_server.h"
#include "daemon/nrtprofd_setup.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "daemon/tcp_listener.h"
#include "daemon/trigger_captures.h"
#include "daemon/triggers.h"
#include "trace/trace_lanes.h"
#include "trace/trace_sink.h"
#include "daemon/unix_acceptor.h"
#include "grpcpp/grpcpp.h"

// nrtprofd's flags, listed here once: the command line, --config and --help all find them in
// abseil's registry (common/flag_help.h). Their help strings are what `nrtprofd --help` prints.
ABSL_FLAG(std::string, socket, "",
          "the unix socket to listen on, as PATH or unix:PATH; made 0600 in a 0700 folder "
          "(default: $XDG_RUNTIME_DIR/nrtprof/nrtprofd.sock, else /tmp/nrtprof-UID/nrtprofd.sock)");
ABSL_FLAG(std::string, output_root, "nrtprof-captures",
          "the folder of the captures that name no folder of their own, each in "
          "OUTPUT_ROOT/CAPTURE_ID (relative: to the folder nrtprofd starts in)");
ABSL_FLAG(int, ready_fd, -1,
          "a file descriptor to write \"ready\\n\" to once listening (\"ready HOST:PORT\\n\" "
          "with --listen, the port bound), then closed (-1: none)");
ABSL_FLAG(std::string, spool_dir, "",
          "lossless mode's folder: the shims' spool files and the capture manifests (default: "
          "spool/ beside the socket)");
ABSL_FLAG(uint64_t, max_events_per_process, 2'000'000,
          "events kept per process and capture; beyond it they are counted as dropped "
          "(daemon_overflow): a live capture keeps its first, a capture of the past (--last) "
          "its newest; a capture of the past read in parts (--capture_part_events), each part's");
ABSL_FLAG(uint64_t, capture_part_events, uint64_t{1} << 16,
          "a capture of the past (--last) reads a process with more than twice this many "
          "events in parts of about this many, each cut where no range or call of a thread is "
          "open, correlated and written before the next is read, so that it holds about one "
          "part at once (0: every process whole)");
ABSL_FLAG(uint32_t, hello_timeout_ms, 10'000,
          "a stream that has not sent its Hello within this many ms is ended "
          "(DEADLINE_EXCEEDED); 1 to 86400000");
ABSL_FLAG(uint32_t, client_timeout_ms, 20'000,
          "a connection that has not finished its handshake, or has not answered a keepalive "
          "ping, within this many ms is closed; connections are pinged as often; 1 to 86400000");
ABSL_FLAG(std::string, listen, "",
          "also listen on TCP at HOST:PORT (port 0: any free port), with TLS only: needs "
          "--tls_cert and --tls_key, and --token_file or --tls_client_ca (or both)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file: the daemon's TLS certificate chain, for --listen (and for --metrics_listen, "
          "which it makes HTTPS)");
ABSL_FLAG(std::string, tls_key, "", "PEM file: the private key of --tls_cert");
ABSL_FLAG(std::string, token_file, "",
          "file of one line: the bearer token every call on TCP must carry (mode 0600)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM file: the CA that must have signed the client certificate of every TCP caller "
          "(mutual TLS)");
ABSL_FLAG(std::string, user, "",
          "the user to run as once the sockets are bound; started as root, nrtprofd needs one "
          "to --listen");
ABSL_FLAG(std::string, socket_group, "",
          "a shared service: the group (name or gid) whose members may connect; the socket's "
          "folder is then 0750 and the socket 0660 in that group, and the spool folder 01770. "
          "Without it, only the daemon's user can (0700, 0600)");
ABSL_FLAG(uint32_t, flight_recorder_seconds, 30,
          "the flight recorder: every connected process records all the time, and the daemon "
          "keeps its batches of the last this many seconds for `nrtprof capture --last` "
          "(0: off; processes then record only while in a capture; at most 86400)");
ABSL_FLAG(uint64_t, flight_recorder_bytes, 256ull << 20,
          "the most the flight recorder holds, in bytes (at least 1048576); over it, or over its "
          "seconds, the oldest batches go first (counted)");
ABSL_FLAG(bool, quiet, false,
          "no line at start saying where it listens (nrtprof run's private daemon, whose "
          "stderr is the user's terminal)");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port); "
          "loopback only, unless --tls_cert and --tls_key make it HTTPS; needs the flight "
          "recorder");
ABSL_FLAG(std::string, clickhouse_url, "",
          "the fleet store: export per-op rows every --clickhouse_export_ms, and a row per "
          "capture, to the ClickHouse server at this HTTP URL (http://HOST:8123); needs the "
          "flight recorder");
ABSL_FLAG(std::string, clickhouse_database, "nrtprof",
          "the fleet store's database (made if missing, with its tables)");
ABSL_FLAG(std::string, clickhouse_user, "",
          "the ClickHouse user that inserts the rows, with --clickhouse_password_file (default: "
          "the server's default user)");
ABSL_FLAG(std::string, clickhouse_password_file, "",
          "file of one line: --clickhouse_user's password (mode 0600)");
ABSL_FLAG(uint64_t, clickhouse_buffer_bytes, 64ull << 20,
          "rows kept for ClickHouse while it is away, in bytes (at least 1048576); beyond it "
          "they are dropped (counted in nrtprof status and /metrics)");
ABSL_FLAG(uint32_t, clickhouse_export_ms, 10'000,
          "how often rows are exported to ClickHouse, in ms (1000 to 3600000)");
ABSL_FLAG(std::string, fleet_host, "",
          "this host's name in the fleet store (default: the machine's hostname)");
ABSL_FLAG(std::string, trigger, "",
          "a trigger rule, NAME: CONDITION [SETTINGS] (repeatable; in a --config file a line "
          "each): an anomaly it sees is captured from the flight recorder with the seconds "
          "before and after it, as in 'slow-step: step > 3 x median before 10s after 2s "
          "every 5m' (docs/triggers.md)");
ABSL_FLAG(uint64_t, trigger_budget_bytes, uint64_t{1} << 30,
          "the most the triggered captures take on disk (at least 1048576); over it the oldest "
          "triggered capture is removed (counted), never a capture someone asked for");
ABSL_FLAG(uint32_t, trigger_check_ms, 5'000,
          "how often the trigger rules look at what the flight recorder received, in ms "
          "(100 to 60000)");
ABSL_FLAG(std::string, trigger_peers, "",
          "the job's other hosts' daemons, HOST:PORT,... (their --listen): a rule 'on job' asks "
          "each for the same window too; needs --trigger_peer_ca and --trigger_peer_token_file");
ABSL_FLAG(std::string, trigger_peer_ca, "",
          "PEM file: the CA that signed the --trigger_peers daemons' certificates");
ABSL_FLAG(std::string, trigger_peer_token_file, "",
          "file of one line: the --trigger_peers daemons' bearer token (mode 0600)");
ABSL_FLAG(std::string, config, "",
          "a settings file, read before the command line (whose flags win): a line each, "
          "NAME = VALUE, NAME being any other flag here without its dashes; '#' starts a "
          "comment (the installed service reads /etc/nrtprof/nrtprofd.conf)");

namespace nrtprof::daemon {
namespace {

constexpr char kVersion[] = "0.1.0";
// How long a capture still in progress at SIGTERM waits for its processes' last events.
constexpr uint32_t kShutdownWaitMs = 1000;
constexpr uint32_t kMaxTimeoutMs = 24 * 3600 * 1000;

struct StartError {
  std::string message;
  int exit_code;
};

// The texts of the --trigger rules, from the settings file and then the command line, each
// parsed once as it was set (a bad one is an error there).
std::vector<std::string>& TriggerTexts() {
  static std::vector<std::string>* const texts = new std::vector<std::string>();
  return *texts;
}

// One of the flags above, by name; null for any other (abseil's own and other libraries' flags
// are in the same registry, and are not nrtprofd's).
absl::CommandLineFlag* OwnFlag(absl::string_view name) { return FlagDefinedIn(__FILE__, name); }

// Sets one flag through absl's registry. `where` names the settings file's line in an error
// ("FILE line 3"); empty for the command line.
bool SetFlag(const std::string& name, const std::string& value, const std::string& where,
             std::string* error) {
  absl::CommandLineFlag* flag = OwnFlag(name);
  if (flag == nullptr) {
    *error = absl::StrCat(where, ": unknown setting '", name, "' (see nrtprofd --help)");
    return false;
  }
  std::string why;
  if (name == "trigger") {  // repeatable: each adds a rule (triggers.h)
    if (absl::StatusOr<TriggerRule> rule = ParseTriggerRule(value); !rule.ok()) {
      why = std::string(rule.status().message());
    } else {
      TriggerTexts().push_back(value);
      return true;
    }
  }
  if (!why.empty() || !flag->ParseFrom(value, &why)) {
    *error = where.empty() ? absl::StrCat("bad value '", value, "' for --", name, ": ", why)
                           : absl::StrCat(where, ": bad value '", value, "' for ", name, ": ", why);
    return false;
  }
  return true;
}

// --config FILE: a line each, NAME = VALUE (NAME a flag without its dashes), '#' comments.
bool ReadConfig(const std::string& path, std::string* error) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) {
    *error = absl::StrCat("--config ", path, ": ", strerror(errno));
    return false;
  }
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0 && text.size() <= (1 << 20);) {
    text.append(buf, n);
  }
  fclose(f);
  if (text.size() > (1 << 20)) {
    *error = absl::StrCat("--config ", path, ": larger than 1 MiB; not a settings file");
    return false;
  }
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const std::string where = absl::StrCat(path, " line ", number);
    if (eq == absl::string_view::npos) {
      *error = absl::StrCat(where, ": '", line, "' is not NAME = VALUE");
      return false;
    }
    const std::string name(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (name == "config") {
      *error = absl::StrCat(where, ": a settings file cannot name another");
      return false;
    }
    if (!SetFlag(name, value, where, error)) return false;
  }
  return true;
}

// The fleet store's flags (--clickhouse_*): only with --clickhouse_url, and each sound.
bool CheckFleetFlags(std::string* error) {
  const std::string url = absl::GetFlag(FLAGS_clickhouse_url);
  if (url.empty()) {
    if (!absl::GetFlag(FLAGS_clickhouse_user).empty() ||
        !absl::GetFlag(FLAGS_clickhouse_password_file).empty()) {
      *error = "--clickhouse_user and --clickhouse_password_file need --clickhouse_url";
      return false;
    }
    return true;
  }
  absl::Status s = CheckClickHouseUrl(url, "--clickhouse_url");
  if (s.ok()) s = FleetExporter::CheckDatabaseName(absl::GetFlag(FLAGS_clickhouse_database));
  if (!s.ok()) {
    *error = std::string(s.message());
    return false;
  }
  if (absl::GetFlag(FLAGS_flight_recorder_seconds) == 0) {
    *error = "--clickhouse_url needs the flight recorder (--flight_recorder_seconds above 0)";
    return false;
  }
  if (absl::GetFlag(FLAGS_clickhouse_password_file).empty() !=
      absl::GetFlag(FLAGS_clickhouse_user).empty()) {
    *error = "--clickhouse_user and --clickhouse_password_file go together";
    return false;
  }
  const uint32_t period = absl::GetFlag(FLAGS_clickhouse_export_ms);
  if (period < 1000 || period > 3'600'000) {
    *error = "--clickhouse_export_ms must be 1000 to 3600000 (an hour)";
    return false;
  }
  if (absl::GetFlag(FLAGS_clickhouse_buffer_bytes) < (1u << 20)) {
    *error = "--clickhouse_buffer_bytes must be at least 1048576 (1 MiB)";
    return false;
  }
  return true;
}

// The fleet exporter's settings from the flags (already checked): the password file is read
// here, before the daemon drops root.
absl::StatusOr<FleetExporterOptions> FleetOptions() {
  FleetExporterOptions fleet;
  fleet.clickhouse.url = absl::GetFlag(FLAGS_clickhouse_url);
  fleet.clickhouse.database = absl::GetFlag(FLAGS_clickhouse_database);
  fleet.clickhouse.user = absl::GetFlag(FLAGS_clickhouse_user);
  if (const std::string file = absl::GetFlag(FLAGS_clickhouse_password_file); !file.empty()) {
    absl::StatusOr<std::string> password = ReadClickHousePassword(Absolute(file));
    if (!password.ok()) return password.status();
    fleet.clickhouse.password = *std::move(password);
  }
  fleet.host = absl::GetFlag(FLAGS_fleet_host);
  {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    fleet.machine = name;
  }
  if (fleet.host.empty()) {
    fleet.host = fleet.machine;
  }
  fleet.buffer_bytes = absl::GetFlag(FLAGS_clickhouse_buffer_bytes);
  fleet.period = std::chrono::milliseconds(absl::GetFlag(FLAGS_clickhouse_export_ms));
  fleet.log = [](const std::string& line) { fprintf(stderr, "nrtprofd: %s\n", line.c_str()); };
  return fleet;
}

// The trigger rules (each already parsed): names of their own, a flight recorder that reaches
// back as far as they look. Their other flags are checked with or without rules.
bool CheckTriggerFlags(std::string* error) {
  const uint32_t check_ms = absl::GetFlag(FLAGS_trigger_check_ms);
  if (check_ms < 100 || check_ms > 60'000) {
    *error = "--trigger_check_ms must be 100 to 60000";
    return false;
  }
  if (absl::GetFlag(FLAGS_trigger_budget_bytes) < (1u << 20)) {
    *error = "--trigger_budget_bytes must be at least 1048576 (1 MiB)";
    return false;
  }
  if (absl::GetFlag(FLAGS_trigger_peers).empty() !=
          absl::GetFlag(FLAGS_trigger_peer_ca).empty() ||
      absl::GetFlag(FLAGS_trigger_peers).empty() !=
          absl::GetFlag(FLAGS_trigger_peer_token_file).empty()) {
    *error = "--trigger_peers, --trigger_peer_ca and --trigger_peer_token_file go together";
    return false;
  }
  absl::StatusOr<std::vector<TriggerRule>> rules = ParseTriggerRules(TriggerTexts());
  if (!rules.ok()) {
    *error = absl::StrCat("--trigger ", rules.status().message());
    return false;
  }
  const uint64_t recorder_s = absl::GetFlag(FLAGS_flight_recorder_seconds);
  for (const TriggerRule& rule : *rules) {
    if (recorder_s == 0) {
      *error = absl::StrCat("--trigger '", rule.text,
                            "' needs the flight recorder (--flight_recorder_seconds above 0)");
      return false;
    }
    if (rule.before_ns > recorder_s * 1'000'000'000) {
      *error = absl::StrCat("--trigger '", rule.text, "' looks back ",
                            FormatTriggerDuration(rule.before_ns),
                            ", further than the flight recorder keeps (--flight_recorder_seconds ",
                            recorder_s, ")");
      return false;
    }
  }
  return true;
}

// The flags' values, and how they go together, once all are set.
bool CheckFlagValues(std::string* error) {
  if (absl::GetFlag(FLAGS_ready_fd) < -1) {
    *error = "--ready_fd must be a file descriptor";
    return false;
  }
  if (absl::GetFlag(FLAGS_flight_recorder_seconds) > 24 * 3600) {
    *error = "--flight_recorder_seconds must be at most 86400 (a day)";
    return false;
  }
  if (absl::GetFlag(FLAGS_flight_recorder_seconds) != 0 &&
      absl::GetFlag(FLAGS_flight_recorder_bytes) < (1u << 20)) {
    *error = "--flight_recorder_bytes must be at least 1048576 (1 MiB)";
    return false;
  }
  if (!absl::GetFlag(FLAGS_metrics_listen).empty() &&
      absl::GetFlag(FLAGS_flight_recorder_seconds) == 0) {
    *error = "--metrics_listen needs the flight recorder (--flight_recorder_seconds above 0)";
    return false;
  }
  if (!CheckFleetFlags(error)) return false;
  if (!CheckTriggerFlags(error)) return false;
  if (absl::GetFlag(FLAGS_max_events_per_process) == 0) {
    *error = "--max_events_per_process must be at least 1";
    return false;
  }
  if (const uint64_t part = absl::GetFlag(FLAGS_capture_part_events); part != 0 && part < 1000) {
    *error = "--capture_part_events must be 0 (every process whole) or at least 1000";
    return false;
  }
  for (auto [name, value] : {std::pair<const char*, uint32_t>{"hello_timeout_ms",
                                                              absl::GetFlag(FLAGS_hello_timeout_ms)},
                             {"client_timeout_ms", absl::GetFlag(FLAGS_client_timeout_ms)}}) {
    if (value == 0 || value > kMaxTimeoutMs) {
      *error = absl::StrCat("--", name, " must be 1 to ", kMaxTimeoutMs, " ms");
      return false;
    }
  }
  return true;
}

// What the command line asks for.
enum class Parsed { kRun, kHelp, kError };

// Walks argv: --config is set at once, the other flags are returned in `given` to be set after
// the settings file. A flag that is not nrtprofd's, or lacks its value, is an error.
Parsed ReadCommandLine(int argc, char** argv,
                       std::vector<std::pair<std::string, std::string>>* given,
                       std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--helpfull") return Parsed::kHelp;
    if (arg.size() < 2 || arg[0] != '-') {
      *error = absl::StrCat("unexpected argument '", arg, "' (see nrtprofd --help)");
      return Parsed::kError;
    }
    arg = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const absl::CommandLineFlag* flag = OwnFlag(name);
    if (flag == nullptr) {
      *error = absl::StrCat("unknown flag --", name, " (see nrtprofd --help)");
      return Parsed::kError;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      value = "true";  // --quiet
    } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      value = argv[++i];
    } else {
      *error = absl::StrCat("--", name, " needs a value");
      return Parsed::kError;
    }
    if (name == "config") {
      if (!SetFlag(name, value, "", error)) return Parsed::kError;
    } else {
      given->emplace_back(name, value);
    }
  }
  return Parsed::kRun;
}

// Sets the flags from --config FILE, then the command line's, which win. absl::ParseCommandLine
// would exit 1 on a bad flag, and Debian 12's abseil (20220623) has no ParseAbseilFlagsOnly to
// parse without exiting; so argv is walked here, every flag found in and set through abseil's
// registry, and a bad one is one line and exit code 2.
Parsed ParseFlags(int argc, char** argv, std::string* error) {
  std::vector<std::pair<std::string, std::string>> given;
  if (Parsed p = ReadCommandLine(argc, argv, &given, error); p != Parsed::kRun) return p;
  if (const std::string config = absl::GetFlag(FLAGS_config);
      !config.empty() && !ReadConfig(config, error)) {
    return Parsed::kError;
  }
  for (const auto& [name, value] : given) {
    if (!SetFlag(name, value, "", error)) return Parsed::kError;
  }
  return CheckFlagValues(error) ? Parsed::kRun : Parsed::kError;
}

// The writers of the files of `kinds` (a bit, 1 << k, per nrtprof::CaptureFileKind k).
std::unique_ptr<TraceSink> ProductionSink(uint32_t kinds) {
  auto wanted = [&](nrtprof::CaptureFileKind kind) { return (kinds & (1u << kind)) != 0; };
  std::vector<std::unique_ptr<TraceSink>> sinks;
  // The two traces draw the same lanes: laid out once for both (not at all for neither).
  std::vector<std::unique_ptr<LaneSink>> traces;
  if (wanted(nrtprof::CAPTURE_FILE_KIND_PFTRACE)) {
    traces.push_back(std::make_unique<PerfettoWriter>());
  }
  if (wanted(nrtprof::CAPTURE_FILE_KIND_JSON)) {
    traces.push_back(std::make_unique<ChromeJsonWriter>());
  }
  if (!traces.empty()) sinks.push_back(std::make_unique<LaneSinkGroup>(std::move(traces)));
  if (wanted(nrtprof::CAPTURE_FILE_KIND_SUMMARY)) sinks.push_back(std::make_unique<SummarySink>());
  if (wanted(nrtprof::CAPTURE_FILE_KIND_ARTIFACTS)) {
    sinks.push_back(std::make_unique<ArtifactWriter>());
  }
  return std::make_unique<CompositeSink>(std::move(sinks));
}

// `nrtprofd --help`: every flag once, from its ABSL_FLAG above.
void PrintHelp() {
  printf("usage: nrtprofd [--FLAG=VALUE | --FLAG VALUE]...\n"
         "nrtprofd %s, nrtprof's collector daemon: takes the profiled programs' event streams\n"
         "and the nrtprof CLI's calls, and writes the captures.\n\n"
         "flags (also NAME = VALUE lines of a --config file):\n%s\n"
         "This user's default socket: %s\n",
         kVersion, FlagHelpLines(FlagsDefinedIn(__FILE__)).c_str(), DefaultSocketPath().c_str());
}

int Fail(const std::string& message, int code) {
  fprintf(stderr, "nrtprofd: %s\n", message.c_str());
  return code;
}

// Blocks SIGINT and SIGTERM (main awaits them with sigtimedwait) and ignores SIGPIPE and
// SIGXFSZ. Before any thread exists, so every thread inherits the mask. A shim that goes away
// mid-write must not kill the daemon; a file size limit reached while writing a trace is a
// failed write (EFBIG), reported like a full disk, not the daemon's death.
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
  return stop_signals;
}

// --listen and its TLS flags, checked. --tls_cert and --tls_key serve --metrics_listen too:
// with it alone they are checked there.
absl::StatusOr<TcpListenerFlags> TcpFlags() {
  TcpListenerFlags tcp_flags;
  tcp_flags.listen = absl::GetFlag(FLAGS_listen);
  tcp_flags.cert_file = Absolute(absl::GetFlag(FLAGS_tls_cert));
  tcp_flags.key_file = Absolute(absl::GetFlag(FLAGS_tls_key));
  tcp_flags.token_file = Absolute(absl::GetFlag(FLAGS_token_file));
  tcp_flags.client_ca_file = Absolute(absl::GetFlag(FLAGS_tls_client_ca));
  if (tcp_flags.listen.empty() && !absl::GetFlag(FLAGS_metrics_listen).empty() &&
      tcp_flags.token_file.empty() && tcp_flags.client_ca_file.empty()) {
    if (tcp_flags.cert_file.empty() != tcp_flags.key_file.empty()) {
      return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
    }
  } else if (absl::Status s = CheckTcpListenerFlags(tcp_flags); !s.ok()) {
    return s;
  }
  return tcp_flags;
}

// The spool folder (--spool_dir, else beside the socket), made with the mode `reach` gives it.
absl::StatusOr<std::string> PrepareSpoolFolder(const std::string& socket_path,
                                               const Access& reach) {
  std::string spool_dir = absl::GetFlag(FLAGS_spool_dir);
  const bool default_spool = spool_dir.empty();
  spool_dir = default_spool ? Parent(socket_path) + "/spool" : Absolute(spool_dir);
  struct stat spool_st;
  if (mkdir(spool_dir.c_str(), 0700) == 0) {
    if (absl::Status s = Restrict(spool_dir, reach.spool_mode(), reach); !s.ok()) return s;
  } else if (errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create the spool folder ", spool_dir, ": ", strerror(errno)));
  } else if (default_spool && lstat(spool_dir.c_str(), &spool_st) == 0 &&
             S_ISDIR(spool_st.st_mode) && spool_st.st_uid == getuid() &&
             (spool_st.st_mode & 07777) != reach.spool_mode()) {
    // An older daemon's 0770: the shims would refuse to spool there.
    if (absl::Status s = Restrict(spool_dir, reach.spool_mode(), reach); !s.ok()) return s;
  }
  return spool_dir;
}

// As the daemon's user: the socket's folder, the socket claimed (no live daemon on it), the
// captures' root and the spool folder. Returns the spool folder.
absl::StatusOr<std::string> PrepareFolders(const std::string& socket_path,
                                           const std::string& output_root, const Access& reach) {
  if (absl::Status s =
          PrepareSocketFolder(socket_path, absl::GetFlag(FLAGS_socket).empty(), reach);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ClaimSocket(socket_path); !s.ok()) return s;
  if (absl::Status s = PrepareOutputRoot(output_root); !s.ok()) return s;
  return PrepareSpoolFolder(socket_path, reach);
}

// The collector core's settings from the flags; captures are also handed to `fleet`, if any.
CollectorOptions CollectorOptionsFromFlags(const std::string& socket_path,
                                           const std::string& output_root,
                                           const std::string& spool_dir, FleetExporter* fleet) {
  CollectorOptions options;
  options.address = "unix:" + socket_path;
  options.output_root = output_root;
  options.spool_dir = spool_dir;
  options.log = [](const std::string& line) { fprintf(stderr, "nrtprofd: %s\n", line.c_str()); };
  options.limits.max_events_per_process = absl::GetFlag(FLAGS_max_events_per_process);
  options.past_part_events = absl::GetFlag(FLAGS_capture_part_events);
  options.daemon_version = kVersion;
  options.flight_recorder = absl::GetFlag(FLAGS_flight_recorder_seconds) != 0;
  options.flight_recorder_limits.max_age_ns =
      uint64_t{absl::GetFlag(FLAGS_flight_recorder_seconds)} * 1'000'000'000;
  options.flight_recorder_limits.max_bytes = absl::GetFlag(FLAGS_flight_recorder_bytes);
  if (fleet != nullptr) {
    options.capture_written = [fleet](const Trace& trace, const Summary& summary,
                                      const nrtprof::CaptureFiles& files) {
      fleet->CaptureWritten(trace, summary, files);
    };
    options.add_status = [fleet](nrtprof::StatusReply* reply) {
      fleet->FillStatus(reply->mutable_fleet_export());
    };
  }
  options.sink_for_files = ProductionSink;
  return options;
}

// The gRPC server of both services; the daemon's own acceptor hands it its connections.
std::unique_ptr<grpc::Server> BuildServer(CollectorService* collector, ControlService* control) {
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(collector);
  builder.RegisterService(control);
  builder.SetMaxReceiveMessageSize(kMaxShimMessageBytes);
  // A peer that stops answering (a stalled or half-open connection, garbage on the socket) is
  // closed instead of holding its stream and its half-received message forever. A live shim
  // answers pings from gRPC's own threads, however idle the program.
  const int client_timeout_ms = static_cast<int>(absl::GetFlag(FLAGS_client_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, client_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, client_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, client_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return builder.BuildAndStart();
}

// "ready" on --ready_fd (with the TCP address, if any), then where the daemon listens, on
// stderr: the first thing its log should say.
void AnnounceReady(const TcpListener* tcp, const CollectorOptions& options,
                   const std::optional<RunAs>& run_as) {
  if (const int fd = absl::GetFlag(FLAGS_ready_fd); fd >= 0) {
    const std::string ready =
        tcp != nullptr ? absl::StrCat("ready ", tcp->address(), "\n") : std::string("ready\n");
    if (write(fd, ready.data(), ready.size()) != static_cast<ssize_t>(ready.size())) {
      fprintf(stderr, "nrtprofd: cannot write to --ready_fd %d: %s\n", fd, strerror(errno));
    }
    close(fd);
  }
  const char* as_user = run_as ? ", as user " : "";
  const char* user = run_as ? run_as->name.c_str() : "";
  if (tcp != nullptr) {
    // Always, not only on a terminal: where a remote daemon listens, and how it lets callers
    // in, belongs in its log.
    fprintf(stderr, "nrtprofd %s: listening on %s (%s) and %s%s%s\n", kVersion,
            tcp->address().c_str(), tcp->security().c_str(), options.address.c_str(), as_user,
            user);
  } else if (!absl::GetFlag(FLAGS_quiet)) {
    fprintf(stderr, "nrtprofd %s: listening on %s%s%s; captures go to %s; flight recorder %s\n",
            kVersion, options.address.c_str(), as_user, user, options.output_root.c_str(),
            options.flight_recorder
                ? absl::StrCat("the last ", absl::GetFlag(FLAGS_flight_recorder_seconds), " s")
                      .c_str()
                : "off");
  }
}

}  // namespace

int NrtprofdMain(int argc, char** argv) {
  sigset_t stop_signals = BlockStopSignals();

  std::string error;
  switch (ParseFlags(argc, argv, &error)) {
    case Parsed::kHelp:
      PrintHelp();
      return 0;
    case Parsed::kError:
      return Fail(error, 2);
    case Parsed::kRun:
      break;
  }
  UseSteadyMallocThresholds();
  // Before any thread is made, so that all of the daemon's inherit it: a program's thread that
  // wakes on a CPU where the daemon runs takes it at once (common/background_slice.h).
  UseBackgroundSlice();
  absl::StatusOr<TcpListenerFlags> checked_tcp_flags = TcpFlags();
  if (!checked_tcp_flags.ok()) return Fail(std::string(checked_tcp_flags.status().message()), 2);
  const TcpListenerFlags tcp_flags = *std::move(checked_tcp_flags);
  std::optional<RunAs> run_as;
  if (!ResolveUser(absl::GetFlag(FLAGS_user), !tcp_flags.listen.empty(), &run_as, &error)) {
    return Fail(error, 2);
  }
  std::unique_ptr<FleetExporter> fleet;
  if (!absl::GetFlag(FLAGS_clickhouse_url).empty()) {
    absl::StatusOr<FleetExporterOptions> fleet_options = FleetOptions();
    if (!fleet_options.ok()) return Fail(std::string(fleet_options.status().message()), 2);
    fleet = std::make_unique<FleetExporter>(*std::move(fleet_options));
  }
  Access reach;
  if (!ResolveGroup(absl::GetFlag(FLAGS_socket_group), &reach, &error)) return Fail(error, 2);
  std::string socket_path;
  if (!SocketPath(run_as ? run_as->uid : getuid(), absl::GetFlag(FLAGS_socket), &socket_path,
                  &error)) {
    return Fail(error, 2);
  }
  const std::string output_root = Absolute(absl::GetFlag(FLAGS_output_root));
  if (output_root.empty()) return Fail("--output_root must not be empty", 2);

  // TCP first, while the daemon may still be root (a port below 1024, files only root reads),
  // behind a closed gate. Then the daemon becomes --user, and everything it makes from here on
  // (socket folder, socket, captures) belongs to that user. The gate opens last.
  std::unique_ptr<TcpListener> tcp;
  if (!tcp_flags.listen.empty()) {
    absl::StatusOr<std::unique_ptr<TcpListener>> started = TcpListener::Start(tcp_flags);
    if (!started.ok()) return Fail(std::string(started.status().message()), 1);
    tcp = *std::move(started);
  }
  if (run_as) {
    if (absl::Status s = DropPrivileges(*run_as); !s.ok()) {
      return Fail(std::string(s.message()), 1);
    }
  }

  absl::StatusOr<std::string> spool_dir = PrepareFolders(socket_path, output_root, reach);
  if (!spool_dir.ok()) return Fail(std::string(spool_dir.status().message()), 1);

  CollectorOptions options =
      CollectorOptionsFromFlags(socket_path, output_root, *spool_dir, fleet.get());
  // The trigger rules (trigger_captures.h): on each fold of the flight recorder, and in Status.
  // A daemon on TCP without rules of its own keeps the captures its peers' rules ask for
  // (--trigger_peers on theirs) as triggered captures too: in its budget and listing.
  std::unique_ptr<TriggerCaptures> triggers;
  if (!TriggerTexts().empty() || !tcp_flags.listen.empty()) {
    TriggerCaptureOptions trigger_options;
    trigger_options.rules = *ParseTriggerRules(TriggerTexts());  // checked in ParseFlags
    trigger_options.output_root = output_root;
    trigger_options.budget_bytes = absl::GetFlag(FLAGS_trigger_budget_bytes);
    trigger_options.check_period = std::chrono::milliseconds(absl::GetFlag(FLAGS_trigger_check_ms));
    trigger_options.log = options.log;
    if (const std::string peers = absl::GetFlag(FLAGS_trigger_peers); !peers.empty()) {
      // The peers' TLS and token, read now (before the daemon drops root, if it does).
      absl::StatusOr<std::string> ca =
          ReadPemFile(Absolute(absl::GetFlag(FLAGS_trigger_peer_ca)), "--trigger_peer_ca");
      absl::StatusOr<std::string> token = ReadTokenFile(
          Absolute(absl::GetFlag(FLAGS_trigger_peer_token_file)), "--trigger_peer_token_file");
      if (!ca.ok()) return Fail(std::string(ca.status().message()), 2);
      if (!token.ok()) return Fail(std::string(token.status().message()), 2);
      grpc::SslCredentialsOptions tls;
      tls.pem_root_certs = *std::move(ca);
      trigger_options.peer_credentials = grpc::CompositeChannelCredentials(
          grpc::SslCredentials(tls), grpc::AccessTokenCredentials(*token));
      for (absl::string_view peer : absl::StrSplit(peers, ',', absl::SkipEmpty())) {
        trigger_options.peers.emplace_back(absl::StripAsciiWhitespace(peer));
      }
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      trigger_options.host = absl::GetFlag(FLAGS_fleet_host).empty()
                                 ? std::string(name)
                                 : absl::GetFlag(FLAGS_fleet_host);
    }
    triggers = std::make_unique<TriggerCaptures>(std::move(trigger_options), SystemClock());
    TriggerCaptures* t = triggers.get();
    if (!TriggerTexts().empty()) {
      options.folded = [t](const Trace& window) { t->OnFold(window); };
      options.ended_without_final = [t](const nrtprof::Hello& hello, bool local) {
        t->OnEndedWithoutFinal(hello, local);
      };
    }
    options.add_status = [t, fleet_status = options.add_status](nrtprof::StatusReply* reply) {
      if (fleet_status) fleet_status(reply);
      t->FillStatus(reply);
    };
  }
  std::unique_ptr<TraceSink> sink = ProductionSink(~0u);
  CollectorCore core(options, sink.get(), SystemClock());
  // The counters folded from the flight recorder, for /metrics and the fleet store alike.
  Metrics folded;
  for (const std::string& line : core.RecoverCaptures()) options.log(line);
  CollectorServiceOptions collector_options;
  collector_options.hello_timeout_ms = absl::GetFlag(FLAGS_hello_timeout_ms);
  CollectorService collector(&core, collector_options);
  ControlService control(&core);
  if (triggers != nullptr) {
    TriggerCaptures* t = triggers.get();
    control.set_peer_triggered(
        [t](const nrtprof::StartCaptureRequest& asked, const nrtprof::CaptureFiles& files) {
          t->AdoptPeerCapture(asked, files);
        });
  }

  // The socket is the daemon's own, accepted on a thread of its own: every connection's
  // credentials are checked and known to the services (unix_acceptor.h, peer.h).
  absl::StatusOr<std::unique_ptr<UnixAcceptor>> acceptor = UnixAcceptor::Listen(
      socket_path, reach.socket_mode(), PeerRule{getuid(), reach.group});
  if (!acceptor.ok()) return Fail(std::string(acceptor.status().message()), 1);
  if (absl::Status s = Restrict(socket_path, reach.socket_mode(), reach); !s.ok()) {
    unlink(socket_path.c_str());
    return Fail(std::string(s.message()), 1);
  }
  std::unique_ptr<grpc::Server> server = BuildServer(&collector, &control);
  if (server == nullptr) {
    unlink(socket_path.c_str());
    return Fail(absl::StrCat("cannot serve on ", socket_path), 1);
  }
  (*acceptor)->Start(server.get());
  if (tcp != nullptr) tcp->Open(&collector, &control);
  std::unique_ptr<MetricsServer> metrics;
  if (const std::string listen = absl::GetFlag(FLAGS_metrics_listen); !listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> started =
        MetricsServer::Start(listen, tcp_flags.cert_file, tcp_flags.key_file, &core, &folded);
    if (!started.ok()) {
      server->Shutdown(std::chrono::system_clock::now());
      unlink(socket_path.c_str());
      return Fail(std::string(started.status().message()),
                  started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
    }
    metrics = *std::move(started);
    // Always: where the metrics are is the first thing an operator looks for in the log.
    fprintf(stderr, "nrtprofd: metrics at %s\n", metrics->url().c_str());
  }
  if (fleet != nullptr) {
    fleet->Start(&core, &folded);
    fprintf(stderr, "nrtprofd: fleet store: exporting every %u ms to %s, database %s\n",
            absl::GetFlag(FLAGS_clickhouse_export_ms),
            absl::GetFlag(FLAGS_clickhouse_url).c_str(),
            absl::GetFlag(FLAGS_clickhouse_database).c_str());
  }

  if (triggers != nullptr) {
    triggers->Start(&core, &folded);
    for (const std::string& rule : TriggerTexts()) {
      fprintf(stderr, "nrtprofd: trigger rule %s\n", rule.c_str());
    }
  }

  AnnounceReady(tcp.get(), options, run_as);

  // Until a stop signal; meanwhile the memory of captures written a while ago goes back to the
  // system (CollectorCore::ReleaseIdleMemory).
  const timespec poll = {static_cast<time_t>(CollectorCore::kIdleMemoryPollNs / 1'000'000'000),
                         static_cast<long>(CollectorCore::kIdleMemoryPollNs % 1'000'000'000)};
  while (sigtimedwait(&stop_signals, nullptr, &poll) < 0) core.ReleaseIdleMemory();
  // Captures first, while the shims can still deliver their last events; then the streams.
  if (triggers != nullptr) triggers->Stop();
  const absl::Status written = core.Shutdown(kShutdownWaitMs);
  if (metrics != nullptr) metrics->Stop();
  if (fleet != nullptr) fleet->Stop();
  if (tcp != nullptr) tcp->Shutdown(std::chrono::system_clock::now());
  (*acceptor)->Stop();
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  unlink(socket_path.c_str());
  if (!written.ok()) {
    return Fail(absl::StrCat("a capture in progress could not be written: ", written.message()), 1);
  }
  return 0;
}

}  // namespace nrtprof::daemon
