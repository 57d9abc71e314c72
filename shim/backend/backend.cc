// libnrtprof_shim_backend.so's entry point: what the core calls once the program has made its
// first libnrt call (core_state.h). It exports nrtprof_backend_start and nothing else.
//
// Nothing here is ever destroyed: exit() and fork() may come at any moment, from any thread,
// and the flusher thread and gRPC's threads keep running until the process ends. A forked
// child never touches the parent's objects; it forgets them (a small leak, once per fork).
//
// fork and gRPC: gRPC 1.51 supports fork only with GRPC_ENABLE_FORK_SUPPORT set before it
// initializes, which a profiler must not impose on the program. Without it a child inherits
// gRPC's global state without its threads, and its poller's epoll set is shared with the
// parent: tried here, a child that opened a new channel died at once on
// "ev_epoll1_linux.cc:1132 assertion failed: next_worker->state == KICKED". The backend creates
// its channel when it starts (the program's first libnrt call), so the rule is simple: a child
// forked after its parent's first libnrt call records nothing and says so once, at its own
// first libnrt call; a child forked before it, and every program started by exec, is profiled
// normally.
#define UNW_LOCAL_ONLY
#include <grpc/support/log.h>
#include <libunwind.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include "common/address.h"
#include "common/credential_files.h"
#include "common/socket_trust.h"
#include "shim/preload/address_space.h"
#include "shim/preload/core_state.h"
#include "shim/backend/flusher.h"
#include "shim/backend/torch_loader.h"

namespace nrtprof::shim {
namespace {

CoreState* g_core = nullptr;
Flusher* g_flusher = nullptr;  // never destroyed

// Nothing throws across the C ABI: an allocation that fails on the program's thread (the
// arbiter's copies of device documents, under ulimit -v) loses what it was copying, and the
// program's call goes on.
void OnRuntimeInit() {
  try {
    if (g_flusher != nullptr) g_flusher->device_profile()->OnRuntimeInit();
    if (g_flusher != nullptr) g_flusher->arbiter()->OnRuntimeInit();
  } catch (const std::exception&) {
  }
}
void BeforeRuntimeClose() {
  try {
    if (g_flusher != nullptr && g_core->device_profile.load(std::memory_order_relaxed) != 0) {
      g_flusher->device_profile()->BeforeRuntimeClose();
    }
    if (g_flusher != nullptr) g_flusher->arbiter()->BeforeRuntimeClose();
  } catch (const std::exception&) {
  }
}
void AfterRuntimeClose() {
  if (g_flusher != nullptr) g_flusher->arbiter()->AfterRuntimeClose();
}
void OnModelLoaded(uint64_t model_handle, const void* bytes, size_t size) {
  if (g_flusher != nullptr) g_flusher->OnModelLoaded(model_handle, bytes, size);
}
NRT_STATUS SysTraceStart(nrt_sys_trace_config_t* options) {
  try {
    return g_flusher->arbiter()->AppStart(options);
  } catch (const std::exception&) {
    return NRT_RESOURCE;
  }
}
NRT_STATUS SysTraceStop() {
  try {
    return g_flusher->arbiter()->AppStop();
  } catch (const std::exception&) {
    return NRT_RESOURCE;
  }
}
NRT_STATUS SysTraceFetchEvents(char** buffer, size_t* written_size,
                               const nrt_sys_trace_fetch_options_t* options) {
  try {
    return g_flusher->arbiter()->AppFetch(buffer, written_size, options);
  } catch (const std::exception&) {
    return NRT_RESOURCE;
  }
}
bool SysTraceBufferFree(char* buffer) {
  return g_flusher != nullptr && g_flusher->arbiter()->AppBufferFree(buffer);
}
void OnModelProfiled(nrt_model_t* model) {
  try {
    if (g_flusher != nullptr) g_flusher->device_profile()->OnModelLoaded(model);
  } catch (const std::exception&) {
  }
}
void BeforeModelUnload(nrt_model_t* model) {
  try {
    if (g_flusher != nullptr) g_flusher->device_profile()->BeforeModelUnload(model);
  } catch (const std::exception&) {
  }
}
NRT_STATUS ProfileStart(nrt_model_t* model, const char* filename) {
  try {
    return g_flusher->device_profile()->AppStart(model, filename);
  } catch (const std::exception&) {
    return NRT_RESOURCE;
  }
}
NRT_STATUS ProfileStop(const char* filename) {
  try {
    return g_flusher->device_profile()->AppStop(filename);
  } catch (const std::exception&) {
    return NRT_RESOURCE;
  }
}
void ExitFlush() {
  if (g_flusher == nullptr) return;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(g_core->config.flush_timeout_ms);
  try {
    g_flusher->FinalFlush(deadline);
  } catch (const std::exception&) {
  }
}
void AtForkPrepare() {
  if (g_flusher == nullptr) return;
  g_flusher->device_profile()->LockForFork();
  g_flusher->arbiter()->LockForFork();
}
void AtForkParent() {
  if (g_flusher == nullptr) return;
  g_flusher->arbiter()->UnlockAfterFork();
  g_flusher->device_profile()->UnlockAfterFork();
}
bool AtForkChild() {
  if (g_flusher == nullptr) return true;
  g_flusher->arbiter()->UnlockAfterFork();
  g_flusher->device_profile()->UnlockAfterFork();
  const bool may_profile = g_flusher->AtForkChild();
  g_flusher = nullptr;  // the parent's: leaked, never touched again
  return may_profile;
}

const BackendApi kBackendApi = {
    kShimAbiVersion,     &OnRuntimeInit,     &BeforeRuntimeClose, &AfterRuntimeClose,
    &OnModelLoaded,      &SysTraceStart,     &SysTraceStop,       &SysTraceFetchEvents,
    &SysTraceBufferFree, &OnModelProfiled,   &BeforeModelUnload,  &ProfileStart,
    &ProfileStop,        &ExitFlush,         &AtForkPrepare,      &AtForkParent,
    &AtForkChild,
};

void Report(const std::string& line) {
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

// gRPC's log: it would write to the program's stderr in its own format, and repeat itself at
// every reconnection. Everything it logs comes here (gpr_set_log_function, process-wide: gRPC
// has one log) and only errors pass (gpr_set_log_verbosity, so gRPC does not even format the
// rest); each kind of error, by where gRPC raised it, is said once, as one "nrtprof: " line.
// A failed TLS handshake (a daemon certificate the CA did not sign, say) is said in the
// profiler's words.
std::string* g_tls_target = nullptr;  // set before the log function, never freed

// The kinds of error said so far (a hash of file and line); past kMaxLogKinds, nothing more.
constexpr int kMaxLogKinds = 64;
std::atomic<uint64_t> g_log_kinds_said[kMaxLogKinds];

// True the first time `kind` is seen.
bool FirstOfKind(uint64_t kind) {
  if (kind == 0) kind = 1;
  for (std::atomic<uint64_t>& slot : g_log_kinds_said) {
    uint64_t seen = slot.load(std::memory_order_acquire);
    if (seen == kind) return false;
    if (seen == 0) {
      if (slot.compare_exchange_strong(seen, kind, std::memory_order_acq_rel)) return true;
      if (seen == kind) return false;
    }
  }
  return false;
}

void LogThroughNrtprof(gpr_log_func_args* args) {
  if (args->severity != GPR_LOG_SEVERITY_ERROR) return;
  const char* file = args->file != nullptr ? args->file : "";
  const char* message = args->message != nullptr ? args->message : "";
  const bool tls = strstr(file, "ssl_transport_security") != nullptr ||
                   strstr(file, "security_handshaker") != nullptr ||
                   strstr(file, "ssl_utils") != nullptr;
  if (tls && g_tls_target != nullptr) {
    if (FirstOfKind(std::hash<std::string_view>()("tls"))) {
      NoteTransportTroubleSaid();
      Report("nrtprof: TLS with the daemon at " + *g_tls_target + " failed: " + message +
             " (is NRTPROF_TLS_CA the CA that signed its certificate?); retrying quietly\n");
    }
    return;
  }
  const char* slash = strrchr(file, '/');
  const std::string where = std::string(slash != nullptr ? slash + 1 : file) + ":" +
                            std::to_string(args->line);
  if (!FirstOfKind(std::hash<std::string>()(where))) return;
  std::string line = std::string("nrtprof: gRPC error (") + where + "): " + message;
  // One line: gRPC's messages may span several.
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  NoteTransportTroubleSaid();
  Report(line + "\n");
}

// TLS for a TCP daemon, from NRTPROF_TLS_CA and NRTPROF_TOKEN_FILE (or NRTPROF_TLS_CERT and
// NRTPROF_TLS_KEY). False after one line on stderr if they are missing or unreadable. The
// files are read here, once, at the first libnrt call, like the backend library itself.
bool LoadTls(const Config& config, const std::string& address, DaemonTransport* transport) {
  const bool has_cert = config.tls_cert[0] != '\0', has_key = config.tls_key[0] != '\0';
  if (config.tls_ca[0] == '\0' || (config.token_file[0] == '\0' && !(has_cert && has_key))) {
    Report("nrtprof: NRTPROF_ADDR=" + address +
           " is a TCP address, which needs TLS: set NRTPROF_TLS_CA (the CA that signed the "
           "daemon's certificate) and NRTPROF_TOKEN_FILE (or NRTPROF_TLS_CERT and "
           "NRTPROF_TLS_KEY); not profiling this process\n");
    return false;
  }
  if (has_cert != has_key) {
    Report("nrtprof: NRTPROF_TLS_CERT and NRTPROF_TLS_KEY go together; not profiling this "
           "process\n");
    return false;
  }
  auto fail = [](const absl::Status& status) {
    Report("nrtprof: " + std::string(status.message()) + "; not profiling this process\n");
    return false;
  };
  transport->tls = true;
  absl::StatusOr<std::string> ca = nrtprof::ReadPemFile(config.tls_ca, "NRTPROF_TLS_CA");
  if (!ca.ok()) return fail(ca.status());
  transport->ca_pem = *std::move(ca);
  if (config.token_file[0] != '\0') {
    absl::StatusOr<std::string> token =
        nrtprof::ReadTokenFile(config.token_file, "NRTPROF_TOKEN_FILE");
    if (!token.ok()) return fail(token.status());
    transport->token = *std::move(token);
  }
  if (has_cert) {
    absl::StatusOr<std::string> cert = nrtprof::ReadPemFile(config.tls_cert, "NRTPROF_TLS_CERT");
    if (!cert.ok()) return fail(cert.status());
    absl::StatusOr<std::string> key = nrtprof::ReadPemFile(config.tls_key, "NRTPROF_TLS_KEY");
    if (!key.ok()) return fail(key.status());
    transport->cert_pem = *std::move(cert);
    transport->key_pem = *std::move(key);
  }
  return true;
}

// Whom to trust on this machine: this process's user, root, and NRTPROF_SERVICE_USER. False
// after one line if that names no user.
bool LoadTrust(const Config& config, DaemonTransport* transport) {
  transport->trust.self = getuid();
  if (config.service_user[0] == '\0') return true;
  absl::StatusOr<uid_t> service = nrtprof::ParseUser(config.service_user);
  if (!service.ok()) {
    Report(std::string("nrtprof: NRTPROF_SERVICE_USER='") + config.service_user +
           "': " + std::string(service.status().message()) + "; not profiling this process\n");
    return false;
  }
  transport->trust.service = *service;
  return true;
}

// A daemon on a unix socket is checked now, before anything of the process is sent: one that
// is there and not to be trusted (someone else's folder or listener) means no profiling at all,
// after one line. No daemon yet is for the flusher to wait for; it checks again before each new
// stream, since the socket may change hands while the program runs.
bool CheckUnixDaemon(DaemonTransport* transport) {
  const std::string socket = nrtprof::SocketPathOf(transport->target);
  const absl::Status status = nrtprof::CheckDaemonSocket(socket, transport->trust);
  if (status.code() == absl::StatusCode::kPermissionDenied ||
      status.code() == absl::StatusCode::kInvalidArgument) {
    Report("nrtprof: not trusting the daemon at " + transport->target + ": " +
           std::string(status.message()) + "; not profiling this process\n");
    return false;
  }
  transport->trust_check = [socket, trust = transport->trust]() -> absl::Status {
    // A socket folder that does not exist yet is no one's: whoever made it first would get the
    // stream gRPC opens later. So no stream until it exists (and passes).
    const std::string folder = socket.substr(0, std::max<size_t>(socket.rfind('/'), 1));
    if (absl::Status s = nrtprof::CheckFolder(folder, "socket folder", trust); !s.ok()) return s;
    const absl::Status s = nrtprof::CheckDaemonSocket(socket, trust);
    // Nobody listening in a trusted folder: only a trusted user can start listening there.
    return s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kUnavailable
               ? absl::OkStatus()
               : s;
  };
  return true;
}

// gRPC cannot run out of memory gracefully (it aborts, or throws from its own threads), so
// under a limit on the address space (ulimit -v) the shim starts only with room to spare.
// What it takes is mostly reserved, not used: glibc reserves a 64 MiB malloc arena for each
// thread that allocates (gRPC's and the flusher), and 8 MiB stacks. Measured (strace of the
// mappings, tests/program_shapes steady under a 500 MB limit): 384 MiB of arenas (6), 65 MiB
// of stacks and 40 MiB of libraries when a capture was lost to "out of memory"; with 320 MiB
// of room required it was lost in 3 runs of 4: hence kAddressSpaceKept (640 MiB). Beside that,
// two rings of NRTPROF_RING_EVENTS (the first thread's, and the spare the flusher keeps for the
// next): at the largest size, 256 MiB each, which the 640 did not count (seen: a 700 MB limit
// passed this check, and then no thread had a ring, every call dropped).

// False, after one line on stderr, if the process's address space is limited to too little.
bool RoomForTheProfiler(const CoreState& core) {
  const uint64_t needed = kAddressSpaceKept + 2 * EventRing::BytesFor(core.config.ring_events);
  uint64_t limit = 0, free = 0;
  if (!AddressSpaceLimited(&limit, &free) || free >= needed) return true;
  char line[256];
  snprintf(line, sizeof(line),
           "nrtprof: the process's address space is limited to %" PRIu64
           " MiB (ulimit -v), %" PRIu64 " MiB free; the profiler needs about %" PRIu64
           " MiB; not profiling this process\n",
           limit >> 20, free >> 20, needed >> 20);
  Report(line);
  return false;
}

const BackendApi* Start(CoreState* core) {
  if (core == nullptr || core->abi_version != kShimAbiVersion) {
    Report(std::string("nrtprof: ") + kBackendLibraryName +
           " is not from the build of this libnrtprof_shim.so; not profiling this process\n");
    return nullptr;
  }
  const std::string address = core->config.addr[0] != '\0' ? std::string(core->config.addr)
                                                           : nrtprof::DefaultSocketPath();
  DaemonTransport transport;
  transport.target = nrtprof::ToGrpcTarget(address);
  if (!LoadTrust(core->config, &transport)) return nullptr;
  switch (nrtprof::KindOf(address)) {
    case nrtprof::AddressKind::kUnix:
      if (!CheckUnixDaemon(&transport)) return nullptr;
      break;
    case nrtprof::AddressKind::kTcp:
      if (!LoadTls(core->config, address, &transport)) return nullptr;
      break;
    case nrtprof::AddressKind::kInvalid:
      Report("nrtprof: NRTPROF_ADDR=" + address +
             " is not an address (unix:/path, /path, HOST:PORT or dns:///HOST:PORT); not "
             "profiling this process\n");
      return nullptr;
  }
  if (!RoomForTheProfiler(*core)) return nullptr;
  g_core = core;
  // Before gRPC starts (the flusher's channel): from then on gRPC prints nothing itself.
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  gpr_set_log_function(&LogThroughNrtprof);
  if (core->config.stack_depth > 0) {
    core->backtrace.store(&unw_backtrace, std::memory_order_release);
  }
  if (transport.tls) {
    // OpenSSL frees its global state in an atexit handler it registers when first initialized:
    // here, after the core's exit handler, so it would run first and the exit flush would find
    // TLS gone (tried: SIGSEGV and "g_ssl_ctx_ex_factory_index != -1" aborts in gRPC at exit).
    // Initialized first without it, OpenSSL is cleaned up when the process ends.
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
    g_tls_target = new std::string(transport.target);
  }
  auto* flusher = new Flusher(core, std::move(transport));
  flusher->device_profile()->set_period_ns(core->config.device_profile_period_ms * 1'000'000ull);
  if (!flusher->Start()) return nullptr;  // its channel is leaked, idle
  g_flusher = flusher;
  if (core->config.device_profile) core->device_profile.store(1, std::memory_order_relaxed);
  // A PyTorch program's ops from its first libnrt call on (the flusher's ticks look again).
  PollTorchLane(core);
  return &kBackendApi;
}

}  // namespace
}  // namespace nrtprof::shim

// Null, after one line on stderr saying why, if the shim cannot run in this process; the core
// then passes every call through.
extern "C" __attribute__((visibility("default"))) const nrtprof::shim::BackendApi*
nrtprof_backend_start(nrtprof::shim::CoreState* core) {
  try {
    return nrtprof::shim::Start(core);
  } catch (const std::exception& e) {
    // Out of memory (ulimit -v) or threads while gRPC starts.
    char line[512];
    snprintf(line, sizeof(line),
             "nrtprof: the profiler cannot start in this process (%s); not profiling it\n",
             e.what());
    ssize_t ignored = write(STDERR_FILENO, line, strlen(line));
    (void)ignored;
    return nullptr;
  }
}
