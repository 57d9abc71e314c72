/* The add model of the test programs (dlopen_client, fork_client): a model file whose inputs a
 * and b (fp32 [4]) add into its output out, loaded and given its tensors through whichever
 * libnrt functions the program has, linked or looked up with dlsym. Test-only. */
#ifndef NRTPROF_SHIM_TESTING_ADD_MODEL_H_
#define NRTPROF_SHIM_TESTING_ADD_MODEL_H_

#include <stdio.h>

#include "nrt/nrt.h"

typedef struct {
  NRT_STATUS (*load)(const void*, size_t, int32_t, int32_t, nrt_model_t**);
  NRT_STATUS (*allocate)(nrt_tensor_placement_t, int, size_t, const char*, nrt_tensor_t**);
  NRT_STATUS (*write)(nrt_tensor_t*, const void*, size_t, size_t);
  NRT_STATUS (*allocate_set)(nrt_tensor_set_t**);
  NRT_STATUS (*add_to_set)(nrt_tensor_set_t*, const char*, nrt_tensor_t*);
} AddModelApi;

typedef struct {
  nrt_model_t* model;
  nrt_tensor_t *a, *b, *out;
  nrt_tensor_set_t *inputs, *outputs;
} AddModel;

/* Loads the model file at `path` on NeuronCore 0, allocates a (1 2 3 4), b (0.5 each) and out
 * on the device, and puts them in *inputs and *outputs. 0 on success; else 1, after a line on
 * stderr naming what failed. */
static inline int SetUpAddModel(const AddModelApi* api, const char* path, AddModel* m) {
  static char bytes[1 << 16];
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "add model: cannot open %s\n", path);
    return 1;
  }
  const size_t size = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);
  const float av[4] = {1, 2, 3, 4}, bv[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  if (api->load(bytes, size, 0, -1, &m->model) != NRT_SUCCESS ||
      api->allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "a", &m->a) != NRT_SUCCESS ||
      api->allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "b", &m->b) != NRT_SUCCESS ||
      api->allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &m->out) != NRT_SUCCESS ||
      api->write(m->a, av, 0, 16) != NRT_SUCCESS || api->write(m->b, bv, 0, 16) != NRT_SUCCESS ||
      api->allocate_set(&m->inputs) != NRT_SUCCESS ||
      api->allocate_set(&m->outputs) != NRT_SUCCESS ||
      api->add_to_set(m->inputs, "a", m->a) != NRT_SUCCESS ||
      api->add_to_set(m->inputs, "b", m->b) != NRT_SUCCESS ||
      api->add_to_set(m->outputs, "out", m->out) != NRT_SUCCESS) {
    fprintf(stderr, "add model: setting up %s failed\n", path);
    return 1;
  }
  return 0;
}

#endif /* NRTPROF_SHIM_TESTING_ADD_MODEL_H_ */
