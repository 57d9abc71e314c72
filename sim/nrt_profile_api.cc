// The runtime's own profiling entry points (nrt/nrt_profile.h) and nrt_get_status_as_str: filled in by issue 38.
