/* Instantiates the nrtprof_peer tracepoint provider (probes and definitions) in the peer. */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "bench/lttng/nrtprof_peer_tp.h"
