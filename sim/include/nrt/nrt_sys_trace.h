/*
 * nrtprof's simulated Neuron runtime: system trace capture and fetch, with the names and
 * signatures of the public header of the same name.
 *
 * While a capture is started the runtime records per-NeuronCore events (executions, engine
 * work, DMA transfers, clock sync points) in bounded ring buffers; nrt_sys_trace_fetch_events()
 * hands each event out once, as JSON (see sim/README.md, "System trace").
 */
#pragma once

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nrt_sys_trace_config nrt_sys_trace_config_t;

NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t **options);
void nrt_sys_trace_config_set_defaults(nrt_sys_trace_config_t *options);
void nrt_sys_trace_config_free(nrt_sys_trace_config_t *options);
void nrt_sys_trace_config_set_max_events_per_nc(nrt_sys_trace_config_t *options,
                                                uint64_t max_events_per_nc);
void nrt_sys_trace_config_set_capture_enabled_for_nc(nrt_sys_trace_config_t *options,
                                                     uint32_t nc_idx, bool enabled);
NRT_STATUS nrt_sys_trace_config_set_capture_enabled_for_event_type(
    nrt_sys_trace_config_t *options, const char *event_type, bool enabled);

/* The array and each string are malloc'ed; nrt_sys_trace_free_event_types() frees both. */
NRT_STATUS nrt_sys_trace_get_event_types(const char ***event_types, size_t *count);
void nrt_sys_trace_free_event_types(const char **event_types, size_t count);
NRT_STATUS nrt_sys_trace_config_get_enabled_event_types(nrt_sys_trace_config_t *options,
                                                        const char ***event_types,
                                                        size_t *count);

NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t *options);
NRT_STATUS nrt_sys_trace_stop();

typedef struct nrt_sys_trace_fetch_options nrt_sys_trace_fetch_options_t;
NRT_STATUS nrt_sys_trace_fetch_options_allocate(nrt_sys_trace_fetch_options_t **options);
void nrt_sys_trace_fetch_options_set_defaults(nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_fetch_options_free(nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_fetch_options_set_max_events_per_nc(nrt_sys_trace_fetch_options_t *options,
                                                       uint64_t max_events_per_nc);
void nrt_sys_trace_fetch_options_set_nc_idx(nrt_sys_trace_fetch_options_t *options,
                                            uint64_t nc_idx);

/* *buffer receives a NUL-terminated JSON document owned by the caller, to be released with
 * nrt_sys_trace_buffer_free(). options may be NULL (all cores, all events). */
NRT_STATUS nrt_sys_trace_fetch_events(char **buffer, size_t *written_size,
                                      const nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_buffer_free(char *buffer);

#ifdef __cplusplus
}
#endif
