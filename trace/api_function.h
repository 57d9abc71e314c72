// Which libnrt function a recorded call is: the wire's number (nrtprof.ApiFunction), or, from a
// shim older than that field, the function its name names (common/api_functions.h). Read where
// calls are taken in (daemon/ingest.h) and where a trace is read back (trace_from_pftrace.h).
#ifndef NRTPROF_TRACE_API_FUNCTION_H_
#define NRTPROF_TRACE_API_FUNCTION_H_

#include <cstdint>
#include <string>

#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

// The function an API call event records: its `function` (the wire's number), or the one its
// name names; unspecified for a name on no list.
nrtprof::ApiFunction CallFunction(nrtprof::ApiFunction wire, const std::string& name);

// Whether the function loads a model: nrt_load, or nrt_load_collectives (a rank's model).
inline bool IsModelLoad(nrtprof::ApiFunction f) {
  return f == nrtprof::API_NRT_LOAD || f == nrtprof::API_NRT_LOAD_COLLECTIVES;
}

// Whether the function schedules an async request (nrt/nrt_async.h): its work on the device
// carries the request's nrta_seq_t, and the call does too.
inline bool IsAsyncSchedule(int32_t f) {
  return f == nrtprof::API_NRTA_EXECUTE_SCHEDULE || f == nrtprof::API_NRTA_TENSOR_WRITE ||
         f == nrtprof::API_NRTA_TENSOR_READ || f == nrtprof::API_NRTA_TENSOR_COPY ||
         f == nrtprof::API_NRTA_CC_SCHEDULE;
}

// Whether the function is one of the async API's completion queries, which programs poll: the
// shim records only a poll that saw something new (ApiCall::polls counts the others).
inline bool IsCompletionPoll(int32_t f) {
  return f == nrtprof::API_NRTA_IS_COMPLETED || f == nrtprof::API_NRTA_GET_SEQUENCE;
}

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_API_FUNCTION_H_
