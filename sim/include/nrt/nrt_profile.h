/*
 * nrtprof's simulated Neuron runtime: the runtime's own profiling, with the names and
 * signatures of the public header of the same name. What each call does here, and what the
 * simulator cannot model, is in sim/README.md ("Device profile" and "The runtime's own
 * profiling").
 *
 * - nrt_profile_start/stop: what happens inside each execution of one model (the engines' ops,
 *   the DMA of its inputs and outputs), written as JSON where the real runtime writes NTFF.
 * - nrt_inspect_*: a profiling session. At nrt_inspect_stop() the session's system trace is
 *   written to <output dir>/sim_pid_<pid>/system_trace_session_<session id>.json, a document of
 *   the same shape nrt_sys_trace_fetch_events() returns. It has a capture of its own: a
 *   nrt_sys_trace_start() capture in the same process runs beside it and neither takes the
 *   other's events. Device profiles, host memory and CPU use are not captured by the simulator.
 * - nrt_profile_continuous_*: the options object works; starting, saving and stopping are not
 *   supported by the simulated runtime (NRT_FAILURE, said once on stderr).
 */
#pragma once

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Profiling one model ------------------------------------------------------------------ */

/* Enables profiling for a model; `filename` names the profile for nrt_profile_stop(). A model
 * profiled already, or a filename in use, is NRT_INVALID. */
NRT_STATUS nrt_profile_start(nrt_model_t *model, const char *filename);

/* Writes the profile started under `filename` to that file and stops it. */
NRT_STATUS nrt_profile_stop(const char *filename);

/* ---- Continuous device profiling ----------------------------------------------------------- */

/* Options of continuous device profiling (opaque). Default output directory: "./output". */
typedef struct nrt_profile_continuous_options nrt_profile_continuous_options_t;

/* Allocates an options object with the defaults into *options. NULL: NRT_INVALID. */
NRT_STATUS nrt_profile_continuous_options_allocate(nrt_profile_continuous_options_t **options);

/* Frees an options object. NULL: NRT_INVALID. */
NRT_STATUS nrt_profile_continuous_options_free(nrt_profile_continuous_options_t *options);

/* Sets the directory saved profiles go to (the runtime names the files). The string is copied.
 * A NULL object, a NULL or empty directory: NRT_INVALID. */
NRT_STATUS nrt_profile_continuous_options_set_output_dir(nrt_profile_continuous_options_t *options,
                                                         const char *output_dir);

/* Would profile every model's executions, keeping them until nrt_profile_continuous_save().
 * Not supported by the simulated runtime: NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_start(nrt_profile_continuous_options_t *options);

/* Would write the profile of the latest execution on NeuronCore `vnc` into the options'
 * directory, profiling going on. Not supported by the simulated runtime: NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_save(uint32_t vnc, nrt_profile_continuous_options_t *options);

/* Would end continuous profiling, saving nothing. Not supported: NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_stop();

/* ---- Inspect sessions ---------------------------------------------------------------------- */

/* Begins a session configured by the environment, read at this call:
 *   NEURON_RT_INSPECT_ENABLE          1: capture (0 or unset: the session captures nothing)
 *   NEURON_RT_INSPECT_OUTPUT_DIR      where nrt_inspect_stop() writes (default ./output)
 *   NEURON_RT_INSPECT_SYSTEM_PROFILE  0: no system trace (default 1)
 *   NEURON_RT_INSPECT_DEVICE_PROFILE  0: no device profiles (default 1; not captured here)
 *   NEURON_RT_INSPECT_ON_FAIL         1: device profiles of failed executions (not captured)
 * A malformed value is NRT_INVALID, with one line naming the variable. A session in progress
 * already: NRT_INVALID. */
NRT_STATUS nrt_inspect_begin();

/* Ends the session and writes what it captured. No session: NRT_INVALID. nrt_close() drops a
 * session's capture: the stop then returns NRT_CLOSED and writes nothing. A folder or file that
 * cannot be written: NRT_FAILURE (the session is over all the same). */
NRT_STATUS nrt_inspect_stop();

/* Options of nrt_inspect_begin_with_options() (opaque). */
typedef struct nrt_inspect_config nrt_inspect_config_t;

/* Allocates an options object with the defaults (those of nrt_inspect_config_set_defaults())
 * into *options. NULL: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_allocate(nrt_inspect_config_t **options);

/* Resets every option, whatever the environment says: session id 1, output directory
 * "./output", every activity type, every NeuronCore and event type, sys_trace's default ring
 * size, enable_inspect and enable_inspect_on_fail off. NULL: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_defaults(nrt_inspect_config_t *options);

/* Frees an options object. NULL: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_free(nrt_inspect_config_t *options);

/* The session's id (in the output's file name). NULL object: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_session_id(nrt_inspect_config_t *options, int session_id);

/* Where nrt_inspect_stop() writes; the string is copied. A NULL object, a NULL or empty
 * directory: NRT_INVALID; no memory: NRT_RESOURCE. */
NRT_STATUS nrt_inspect_config_set_output_dir(nrt_inspect_config_t *options, const char *output_dir);

/* The size of the session's system-trace ring buffer on each NeuronCore (a full one overwrites
 * its oldest event). NULL object, 0 or more than 16777216: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_sys_trace_max_events_per_nc(nrt_inspect_config_t *options,
                                                              uint64_t sys_trace_max_events_per_nc);

/* Captures a NeuronCore's system-trace events or not. NULL object: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_nc(nrt_inspect_config_t *options,
                                                         uint32_t nc_idx, bool enabled);

/* Captures an event type or not; the names are nrt_sys_trace_get_event_types()'s. A NULL
 * object or name, or a name not in that list: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_event_type_string(
    nrt_inspect_config_t *options, const char *event_type, bool enabled);

/* Whether the session captures at all (off by default: with it and enable_inspect_on_fail both
 * off, a session captures nothing). NULL object: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_enable_inspect(nrt_inspect_config_t *options, bool enable_inspect);

/* Device profiles of failed executions (off by default; not captured by the simulator). NULL
 * object: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_enable_inspect_on_fail(nrt_inspect_config_t *options,
                                                         bool enable_inspect_on_fail);

/* Begins a session with these options (NULL: the defaults); NEURON_RT_INSPECT_* are not read.
 * A session in progress already: NRT_INVALID. If none of the activities asked for can be
 * captured by the simulator (system_profile is the one it can): NRT_FAILURE. */
NRT_STATUS nrt_inspect_begin_with_options(nrt_inspect_config_t *options);

/* Every activity type's name ("system_profile", "device_profile", "host_memory", "cpu_util")
 * in a new array of new strings (free with nrt_inspect_config_free_activity_types()). NULL
 * output pointers: NRT_INVALID; no memory: NRT_RESOURCE. */
NRT_STATUS nrt_inspect_config_get_all_activity_types(const char ***activity_types, size_t *count);

/* The options' enabled activity types, as nrt_inspect_config_get_all_activity_types() returns
 * them. NULL arguments: NRT_INVALID; no memory: NRT_RESOURCE. */
NRT_STATUS nrt_inspect_config_get_enabled_activity_types(nrt_inspect_config_t *options,
                                                         const char ***activity_types,
                                                         size_t *count);

/* Frees an array from the two functions above, and its strings. */
void nrt_inspect_config_free_activity_types(const char **activity_types, size_t count);

/* Enables or disables one activity type by name, or every one with "all". A NULL object or
 * name, or another name: NRT_INVALID. */
NRT_STATUS nrt_inspect_config_set_activity(nrt_inspect_config_t *options, const char *activity_type,
                                           bool enabled);

#ifdef __cplusplus
}
#endif
