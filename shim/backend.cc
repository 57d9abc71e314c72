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
#include <libunwind.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/address.h"
#include "shim/core_state.h"
#include "shim/flusher.h"

namespace nrtprof::shim {
namespace {

CoreState* g_core = nullptr;
Flusher* g_flusher = nullptr;  // never destroyed

void OnRuntimeInit() {
  if (g_flusher != nullptr) g_flusher->arbiter()->OnRuntimeInit();
}
void BeforeRuntimeClose() {
  if (g_flusher != nullptr) g_flusher->arbiter()->BeforeRuntimeClose();
}
void AfterRuntimeClose() {
  if (g_flusher != nullptr) g_flusher->arbiter()->AfterRuntimeClose();
}
void OnModelLoaded(uint64_t model_handle, const void* bytes, size_t size) {
  if (g_flusher != nullptr) g_flusher->OnModelLoaded(model_handle, bytes, size);
}
NRT_STATUS SysTraceStart(nrt_sys_trace_config_t* options) {
  return g_flusher->arbiter()->AppStart(options);
}
NRT_STATUS SysTraceStop() { return g_flusher->arbiter()->AppStop(); }
NRT_STATUS SysTraceFetchEvents(char** buffer, size_t* written_size,
                               const nrt_sys_trace_fetch_options_t* options) {
  return g_flusher->arbiter()->AppFetch(buffer, written_size, options);
}
bool SysTraceBufferFree(char* buffer) {
  return g_flusher != nullptr && g_flusher->arbiter()->AppBufferFree(buffer);
}
void ExitFlush() {
  if (g_flusher == nullptr) return;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(g_core->config.flush_timeout_ms);
  g_flusher->FinalFlush(deadline);
}
void AtForkPrepare() {
  if (g_flusher != nullptr) g_flusher->arbiter()->LockForFork();
}
void AtForkParent() {
  if (g_flusher != nullptr) g_flusher->arbiter()->UnlockAfterFork();
}
bool AtForkChild() {
  if (g_flusher == nullptr) return true;
  g_flusher->arbiter()->UnlockAfterFork();
  const bool grpc_started = g_flusher->grpc_started();
  g_flusher = nullptr;  // the parent's: leaked, never touched again
  return !grpc_started;
}

const BackendApi kBackendApi = {
    kShimAbiVersion, &OnRuntimeInit,      &BeforeRuntimeClose, &AfterRuntimeClose,
    &OnModelLoaded,  &SysTraceStart,      &SysTraceStop,       &SysTraceFetchEvents,
    &SysTraceBufferFree, &ExitFlush,      &AtForkPrepare,      &AtForkParent,
    &AtForkChild,
};

void Report(const std::string& line) {
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace
}  // namespace nrtprof::shim

// Null if the shim cannot run in this process; the core then passes every call through.
extern "C" __attribute__((visibility("default"))) const nrtprof::shim::BackendApi*
nrtprof_backend_start(nrtprof::shim::CoreState* core) {
  using namespace nrtprof::shim;
  if (core == nullptr || core->abi_version != kShimAbiVersion) return nullptr;
  const std::string address = core->config.addr[0] != '\0' ? std::string(core->config.addr)
                                                           : nrtprof::DefaultSocketPath();
  const std::string target = nrtprof::ToGrpcTarget(address);
  if (target.rfind("unix:", 0) != 0) {
    Report("nrtprof: NRTPROF_ADDR=" + address +
           ": only unix sockets are supported (remote daemons need TLS, not implemented yet); "
           "not profiling this process\n");
    return nullptr;
  }
  g_core = core;
  if (core->config.stack_depth > 0) {
    core->backtrace.store(&unw_backtrace, std::memory_order_release);
  }
  g_flusher = new Flusher(core, target);
  g_flusher->Start();
  return &kBackendApi;
}
