/*
 * nrtprof's simulated Neuron runtime: status codes.
 *
 * The values are those of the public AWS Neuron runtime (libnrt) so that programs written
 * against the real headers compile and behave the same against the simulator.
 */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  NRT_SUCCESS = 0,
  NRT_FAILURE = 1,        /* generic failure; also "not supported by the simulator" */
  NRT_INVALID = 2,        /* bad argument, malformed model file, size mismatch */
  NRT_INVALID_HANDLE = 3, /* a handle that is not (or no longer) valid */
  NRT_RESOURCE = 4,       /* out of memory or other resource */
  NRT_TIMEOUT = 5,
  NRT_HW_ERROR = 6,
  NRT_QUEUE_FULL = 7,
  NRT_LOAD_NOT_ENOUGH_NC = 9,
  NRT_UNSUPPORTED_NEFF_VERSION = 10,
  NRT_UNINITIALIZED = 13, /* called before nrt_init() */
  NRT_CLOSED = 14,        /* called after nrt_close() */
  NRT_EXEC_BAD_INPUT = 1002,
  NRT_EXEC_COMPLETED_WITH_NUM_ERR = 1003,
  NRT_EXEC_COMPLETED_WITH_ERR = 1004,
  NRT_EXEC_NC_BUSY = 1005,
  NRT_COLL_PENDING = 1100,
} NRT_STATUS;

/* The status's name as a static string ("NRT_INVALID" for NRT_INVALID), as the real runtime
 * returns it; "UNKNOWN" for a value that is no status. Never NULL; the caller does not free it.
 * The real runtime's codes this header does not list (11, 15, 101, 1006, 1200-1206) are named
 * too. */
const char *nrt_get_status_as_str(NRT_STATUS status);

#ifdef __cplusplus
}
#endif
