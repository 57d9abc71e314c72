/*
 * libnrtprof_peer.so: the LTTng-UST peer of the nrtprof shim, for the side-by-side benchmark
 * (bench/lttng/run_lttng.sh). Preloaded like the shim, it interposes the same libnrt entry points
 * the microbenchmarks call (nrt_tensor_write, nrt_tensor_read, nrt_execute, and of the explicit
 * async API nrta_execute_schedule and nrta_is_completed) and the annotation
 * entry points nrtprof_range_push/pop, and emits an LTTng-UST tracepoint for each
 * (nrtprof_peer_tp.h). It is what a careful LTTng user would write: the wrapper shape of the
 * shim (real symbol resolved once, reentrancy guard, real call, record), with LTTng's lock-free
 * per-CPU ring buffers, its clock and its consumer daemon doing the rest.
 *
 *   NRTPROF_PEER_ENTRY=1   also emit nrtprof_peer:api_entry before each call (durations)
 *
 * nrta_is_completed emits an event at every poll, as a tracepoint in the function does; nrtprof
 * records only a poll that saw its request complete (shim/preload/interpose.cc), which an LTTng
 * user could mimic with a thread-local filter: then both cost a thread-local increment a poll.
 *
 * Not a product: no dlsym() hook (programs that dlopen libnrt are not seen), no fork handling.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/lttng/nrtprof_peer_tp.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"

#define PEER_EXPORT __attribute__((visibility("default")))

typedef NRT_STATUS (*TensorWriteFn)(nrt_tensor_t*, const void*, size_t, size_t);
typedef NRT_STATUS (*TensorReadFn)(const nrt_tensor_t*, void*, size_t, size_t);
typedef NRT_STATUS (*ExecuteFn)(nrt_model_t*, const nrt_tensor_set_t*, nrt_tensor_set_t*);
typedef NRT_STATUS (*ScheduleFn)(nrt_model_t*, const nrt_tensor_set_t*, nrt_tensor_set_t*, int,
                                 NRT_STATUS*, nrta_seq_t*);
typedef NRT_STATUS (*IsCompletedFn)(nrta_seq_t, bool*);

static TensorWriteFn g_real_write;
static TensorReadFn g_real_read;
static ExecuteFn g_real_execute;
static ScheduleFn g_real_schedule;
static IsCompletedFn g_real_is_completed;
static int g_entry_events;
/* Calls libnrt makes to its own exported functions are not the program's: not traced. */
static __thread int t_in_call;

static void* Resolve(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == NULL) fprintf(stderr, "nrtprof_peer: %s not found; calls to it fail\n", name);
  return fn;
}

/* Resolved once, before main(): the wrappers then read a plain pointer. */
__attribute__((constructor)) static void PeerInit(void) {
  g_real_write = (TensorWriteFn)Resolve("nrt_tensor_write");
  g_real_read = (TensorReadFn)Resolve("nrt_tensor_read");
  g_real_execute = (ExecuteFn)Resolve("nrt_execute");
  g_real_schedule = (ScheduleFn)Resolve("nrta_execute_schedule");
  g_real_is_completed = (IsCompletedFn)Resolve("nrta_is_completed");
  const char* entry = getenv("NRTPROF_PEER_ENTRY");
  g_entry_events = entry != NULL && strcmp(entry, "1") == 0;
}

PEER_EXPORT NRT_STATUS nrt_tensor_write(nrt_tensor_t* tensor, const void* buf, size_t offset,
                                        size_t size) {
  if (g_real_write == NULL) return NRT_FAILURE;
  if (t_in_call) return g_real_write(tensor, buf, offset, size);
  t_in_call = 1;
  if (g_entry_events) lttng_ust_tracepoint(nrtprof_peer, api_entry, NRTPROF_PEER_NRT_TENSOR_WRITE);
  const NRT_STATUS status = g_real_write(tensor, buf, offset, size);
  lttng_ust_tracepoint(nrtprof_peer, api_call, NRTPROF_PEER_NRT_TENSOR_WRITE, status, size,
                       (uint64_t)(uintptr_t)tensor);
  t_in_call = 0;
  return status;
}

PEER_EXPORT NRT_STATUS nrt_tensor_read(const nrt_tensor_t* tensor, void* buf, size_t offset,
                                       size_t size) {
  if (g_real_read == NULL) return NRT_FAILURE;
  if (t_in_call) return g_real_read(tensor, buf, offset, size);
  t_in_call = 1;
  if (g_entry_events) lttng_ust_tracepoint(nrtprof_peer, api_entry, NRTPROF_PEER_NRT_TENSOR_READ);
  const NRT_STATUS status = g_real_read(tensor, buf, offset, size);
  lttng_ust_tracepoint(nrtprof_peer, api_call, NRTPROF_PEER_NRT_TENSOR_READ, status, size,
                       (uint64_t)(uintptr_t)tensor);
  t_in_call = 0;
  return status;
}

PEER_EXPORT NRT_STATUS nrt_execute(nrt_model_t* model, const nrt_tensor_set_t* input_set,
                                   nrt_tensor_set_t* output_set) {
  if (g_real_execute == NULL) return NRT_FAILURE;
  if (t_in_call) return g_real_execute(model, input_set, output_set);
  t_in_call = 1;
  if (g_entry_events) lttng_ust_tracepoint(nrtprof_peer, api_entry, NRTPROF_PEER_NRT_EXECUTE);
  const NRT_STATUS status = g_real_execute(model, input_set, output_set);
  lttng_ust_tracepoint(nrtprof_peer, api_call, NRTPROF_PEER_NRT_EXECUTE, status, 0,
                       (uint64_t)(uintptr_t)model);
  t_in_call = 0;
  return status;
}

PEER_EXPORT NRT_STATUS nrta_execute_schedule(nrt_model_t* model, const nrt_tensor_set_t* input,
                                             nrt_tensor_set_t* output, int queue, NRT_STATUS* ret,
                                             nrta_seq_t* req_sequence) {
  if (g_real_schedule == NULL) return NRT_FAILURE;
  if (t_in_call) return g_real_schedule(model, input, output, queue, ret, req_sequence);
  t_in_call = 1;
  if (g_entry_events) {
    lttng_ust_tracepoint(nrtprof_peer, api_entry, NRTPROF_PEER_NRTA_EXECUTE_SCHEDULE);
  }
  const NRT_STATUS status = g_real_schedule(model, input, output, queue, ret, req_sequence);
  lttng_ust_tracepoint(nrtprof_peer, api_call, NRTPROF_PEER_NRTA_EXECUTE_SCHEDULE, status,
                       status == NRT_SUCCESS && req_sequence != NULL ? *req_sequence : 0,
                       (uint64_t)(uintptr_t)model);
  t_in_call = 0;
  return status;
}

PEER_EXPORT NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool* is_completed) {
  if (g_real_is_completed == NULL) return NRT_FAILURE;
  if (t_in_call) return g_real_is_completed(seq, is_completed);
  t_in_call = 1;
  if (g_entry_events) lttng_ust_tracepoint(nrtprof_peer, api_entry, NRTPROF_PEER_NRTA_IS_COMPLETED);
  const NRT_STATUS status = g_real_is_completed(seq, is_completed);
  lttng_ust_tracepoint(nrtprof_peer, api_call, NRTPROF_PEER_NRTA_IS_COMPLETED, status, seq,
                       is_completed != NULL && *is_completed);
  t_in_call = 0;
  return status;
}

/* The annotation entry points of client/include/nrtprof/annotate.h, which the shim defines. */
PEER_EXPORT void nrtprof_range_push(const char* name) {
  lttng_ust_tracepoint(nrtprof_peer, range_push, name != NULL ? name : "");
}

PEER_EXPORT void nrtprof_range_pop(void) { lttng_ust_tracepoint(nrtprof_peer, range_pop); }
