/*
 * The LTTng-UST tracepoint provider of the nrtprof peer (bench/lttng/nrtprof_peer.c): the events
 * a conventional LTTng instrumentation of libnrt would emit, with the fields nrtprof records
 * for the same calls. Timestamps are LTTng's own (its trace clock, CLOCK_MONOTONIC); the thread
 * id comes from the channel's vtid context (`lttng add-context -u -t vtid`).
 *
 * This header is read several times by lttng-ust's macros (LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ),
 * which is why its guard has that shape and why it includes itself by its path from the
 * workspace root (Bazel passes `-iquote .`).
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER nrtprof_peer

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "bench/lttng/nrtprof_peer_tp.h"

#if !defined(NRTPROF_BENCH_LTTNG_NRTPROF_PEER_TP_H_) || \
    defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define NRTPROF_BENCH_LTTNG_NRTPROF_PEER_TP_H_

#include <lttng/tracepoint.h>
#include <stdint.h>

/* Function ids, as nrtprof's name_iid: an enum, so babeltrace2 prints the name. */
#define NRTPROF_PEER_NRT_TENSOR_WRITE 0
#define NRTPROF_PEER_NRT_TENSOR_READ 1
#define NRTPROF_PEER_NRT_EXECUTE 2
#define NRTPROF_PEER_NRTA_EXECUTE_SCHEDULE 3
#define NRTPROF_PEER_NRTA_IS_COMPLETED 4

LTTNG_UST_TRACEPOINT_ENUM(
    nrtprof_peer, api_function,
    LTTNG_UST_TP_ENUM_VALUES(
        lttng_ust_field_enum_value("nrt_tensor_write", NRTPROF_PEER_NRT_TENSOR_WRITE)
        lttng_ust_field_enum_value("nrt_tensor_read", NRTPROF_PEER_NRT_TENSOR_READ)
        lttng_ust_field_enum_value("nrt_execute", NRTPROF_PEER_NRT_EXECUTE)
        lttng_ust_field_enum_value("nrta_execute_schedule", NRTPROF_PEER_NRTA_EXECUTE_SCHEDULE)
        lttng_ust_field_enum_value("nrta_is_completed", NRTPROF_PEER_NRTA_IS_COMPLETED)))

/* One event per call, at its return: what nrtprof's EVENT_API_CALL carries but the start time.
 * The async calls put their request's sequence id in `bytes` (nrtprof: the record's aux);
 * nrta_is_completed its answer (0 or 1) in `handle`. */
LTTNG_UST_TRACEPOINT_EVENT(
    nrtprof_peer, api_call,
    LTTNG_UST_TP_ARGS(uint8_t, function, int32_t, status, uint64_t, bytes, uint64_t, handle),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_enum(nrtprof_peer, api_function, uint8_t, function, function)
        lttng_ust_field_integer(int32_t, status, status)
        lttng_ust_field_integer(uint64_t, bytes, bytes)
        lttng_ust_field_integer_hex(uint64_t, handle, handle)))

/* With NRTPROF_PEER_ENTRY=1: an event at the call's entry as well, so durations can be had. */
LTTNG_UST_TRACEPOINT_EVENT(
    nrtprof_peer, api_entry,
    LTTNG_UST_TP_ARGS(uint8_t, function),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_enum(nrtprof_peer, api_function, uint8_t, function, function)))

/* Annotation ranges: the name at the push (copied into the event), nothing but time at the pop. */
LTTNG_UST_TRACEPOINT_EVENT(
    nrtprof_peer, range_push,
    LTTNG_UST_TP_ARGS(const char*, name),
    LTTNG_UST_TP_FIELDS(lttng_ust_field_string(name, name)))

LTTNG_UST_TRACEPOINT_EVENT(
    nrtprof_peer, range_pop,
    LTTNG_UST_TP_ARGS(void),
    LTTNG_UST_TP_FIELDS())

#endif /* NRTPROF_BENCH_LTTNG_NRTPROF_PEER_TP_H_ */

#include <lttng/tracepoint-event.h>
