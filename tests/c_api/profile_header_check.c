/*
 * Compiled, not run (tests/c_api/c_api_test.sh: cc -std=c99 -Wall -Werror -fsyntax-only): the
 * profiling header and nrt_get_status_as_str as a C99 program sees them. Each function is
 * assigned to a pointer of the type the public SDK header gives it, so a signature that drifts
 * from the public one is a compile error here.
 */
#include <nrt/nrt.h>
#include <nrt/nrt_profile.h>
#include <nrt/nrt_status.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

const char *(*status_as_str)(NRT_STATUS) = nrt_get_status_as_str;

NRT_STATUS (*profile_start)(nrt_model_t *, const char *) = nrt_profile_start;
NRT_STATUS (*profile_stop)(const char *) = nrt_profile_stop;

NRT_STATUS (*continuous_options_allocate)(nrt_profile_continuous_options_t **) =
    nrt_profile_continuous_options_allocate;
NRT_STATUS (*continuous_options_free)(nrt_profile_continuous_options_t *) =
    nrt_profile_continuous_options_free;
NRT_STATUS (*continuous_options_set_output_dir)(nrt_profile_continuous_options_t *,
                                                const char *) =
    nrt_profile_continuous_options_set_output_dir;
NRT_STATUS (*continuous_start)(nrt_profile_continuous_options_t *) = nrt_profile_continuous_start;
NRT_STATUS (*continuous_save)(uint32_t, nrt_profile_continuous_options_t *) =
    nrt_profile_continuous_save;
NRT_STATUS (*continuous_stop)(void) = nrt_profile_continuous_stop;

NRT_STATUS (*inspect_begin)(void) = nrt_inspect_begin;
NRT_STATUS (*inspect_stop)(void) = nrt_inspect_stop;
NRT_STATUS (*inspect_begin_with_options)(nrt_inspect_config_t *) = nrt_inspect_begin_with_options;

NRT_STATUS (*config_allocate)(nrt_inspect_config_t **) = nrt_inspect_config_allocate;
NRT_STATUS (*config_set_defaults)(nrt_inspect_config_t *) = nrt_inspect_config_set_defaults;
NRT_STATUS (*config_free)(nrt_inspect_config_t *) = nrt_inspect_config_free;
NRT_STATUS (*config_set_session_id)(nrt_inspect_config_t *, int) =
    nrt_inspect_config_set_session_id;
NRT_STATUS (*config_set_output_dir)(nrt_inspect_config_t *, const char *) =
    nrt_inspect_config_set_output_dir;
NRT_STATUS (*config_set_max_events)(nrt_inspect_config_t *, uint64_t) =
    nrt_inspect_config_set_sys_trace_max_events_per_nc;
NRT_STATUS (*config_set_nc)(nrt_inspect_config_t *, uint32_t, bool) =
    nrt_inspect_config_set_capture_enabled_for_nc;
NRT_STATUS (*config_set_event_type)(nrt_inspect_config_t *, const char *, bool) =
    nrt_inspect_config_set_capture_enabled_for_event_type_string;
NRT_STATUS (*config_set_enable_inspect)(nrt_inspect_config_t *, bool) =
    nrt_inspect_config_set_enable_inspect;
NRT_STATUS (*config_set_enable_inspect_on_fail)(nrt_inspect_config_t *, bool) =
    nrt_inspect_config_set_enable_inspect_on_fail;
NRT_STATUS (*config_get_all_activity_types)(const char ***, size_t *) =
    nrt_inspect_config_get_all_activity_types;
NRT_STATUS (*config_get_enabled_activity_types)(nrt_inspect_config_t *, const char ***,
                                                size_t *) =
    nrt_inspect_config_get_enabled_activity_types;
void (*config_free_activity_types)(const char **, size_t) = nrt_inspect_config_free_activity_types;
NRT_STATUS (*config_set_activity)(nrt_inspect_config_t *, const char *, bool) =
    nrt_inspect_config_set_activity;

/* A session as a C program writes one. */
int profile_session(const char *output_dir) {
  nrt_inspect_config_t *config = NULL;
  if (nrt_inspect_config_allocate(&config) != NRT_SUCCESS) return 1;
  nrt_inspect_config_set_output_dir(config, output_dir);
  nrt_inspect_config_set_enable_inspect(config, true);
  NRT_STATUS status = nrt_inspect_begin_with_options(config);
  if (status == NRT_SUCCESS) status = nrt_inspect_stop();
  nrt_inspect_config_free(config);
  return status == NRT_SUCCESS ? 0 : (int)nrt_get_status_as_str(status)[0];
}
