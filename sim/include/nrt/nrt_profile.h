/*
 * nrtprof's simulated Neuron runtime: device profiling of a model's executions, with the names
 * and signatures of the public header of the same name (the first two of its functions).
 *
 * Between nrt_profile_start(model, filename) and nrt_profile_stop(filename) the runtime keeps
 * what happens inside each execution of `model` — the engines' ops and the DMA moving the
 * model's inputs and outputs — and nrt_profile_stop() writes it to `filename`. The real runtime
 * writes NTFF there; the simulator writes JSON (see sim/README.md, "Device profile").
 */
#pragma once

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enables profiling for a model; `filename` names the profile for nrt_profile_stop(). A model
 * profiled already, or a filename in use, is NRT_INVALID. */
NRT_STATUS nrt_profile_start(nrt_model_t *model, const char *filename);

/* Writes the profile started under `filename` to that file and stops it. */
NRT_STATUS nrt_profile_stop(const char *filename);

#ifdef __cplusplus
}
#endif
