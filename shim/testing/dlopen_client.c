/* Uses libnrt only as Python's ctypes does: it does not link libnrt, it dlopen()s it
 * (RTLD_LOCAL) and calls it through pointers dlsym()'d from the handle. Two uses:
 *   dlopen_client LIBNRT           a tensor's round trip: allocate "dlopen_tensor" (64 bytes) on
 *                                  NeuronCore 0, write, read back, read out of bounds (which must
 *                                  fail), free. Prints "dlopen client: ok".
 *   dlopen_client LIBNRT MODEL N [collectives]
 *                                  N executions of MODEL, which must take inputs a, b (fp32 [4])
 *                                  and give out (fp32 [4]) = a + b. Prints the last result. With
 *                                  "collectives", MODEL is loaded by nrt_load_collectives, as
 *                                  device 0 of a group of one (a rank of a distributed job).
 * Exits 0 when every call behaves, else prints what failed on stderr and exits 1 (2: usage). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt/nrt.h"
#include "shim/testing/add_model.h"

#define LOOKUP(var, name)                                             \
  do {                                                                \
    *(void**)(&var) = dlsym(lib, name);                               \
    if (var == NULL) {                                                \
      fprintf(stderr, "dlopen client: no %s: %s\n", name, dlerror()); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

#define CHECK(call)                                               \
  do {                                                            \
    if ((call) != NRT_SUCCESS) {                                  \
      fprintf(stderr, "dlopen client: %s failed\n", #call);       \
      return 1;                                                   \
    }                                                             \
  } while (0)

static int TensorRoundTrip(void* lib) {
  NRT_STATUS (*allocate)(nrt_tensor_placement_t, int, size_t, const char*, nrt_tensor_t**);
  NRT_STATUS (*write)(nrt_tensor_t*, const void*, size_t, size_t);
  NRT_STATUS (*read)(const nrt_tensor_t*, void*, size_t, size_t);
  void (*tensor_free)(nrt_tensor_t**);
  size_t (*get_size)(const nrt_tensor_t*);
  LOOKUP(allocate, "nrt_tensor_allocate");
  LOOKUP(write, "nrt_tensor_write");
  LOOKUP(read, "nrt_tensor_read");
  LOOKUP(tensor_free, "nrt_tensor_free");
  LOOKUP(get_size, "nrt_tensor_get_size"); /* not interposed: the real function */

  nrt_tensor_t* tensor = NULL;
  CHECK(allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "dlopen_tensor", &tensor));
  unsigned char in[64], out[64];
  for (int i = 0; i < 64; ++i) in[i] = (unsigned char)(i * 3);
  CHECK(write(tensor, in, 0, sizeof(in)));
  CHECK(read(tensor, out, 0, sizeof(out)));
  if (memcmp(in, out, sizeof(in)) != 0 || get_size(tensor) != 64) {
    fprintf(stderr, "dlopen client: the tensor did not read back\n");
    return 1;
  }
  /* A read out of bounds fails with the runtime's own status. */
  if (read(tensor, out, 60, 8) == NRT_SUCCESS) {
    fprintf(stderr, "dlopen client: a read out of bounds succeeded\n");
    return 1;
  }
  tensor_free(&tensor);
  printf("dlopen client: ok\n");
  return 0;
}

static NRT_STATUS (*load_collectives)(const void*, size_t, int32_t, int32_t, uint32_t, uint32_t,
                                      nrt_model_t**);

/* nrt_load's shape, through nrt_load_collectives: device 0 of a group of one. */
static NRT_STATUS LoadAsRank(const void* bytes, size_t size, int32_t vnc, int32_t vnc_count,
                             nrt_model_t** model) {
  return load_collectives(bytes, size, vnc, vnc_count, 0, 1, model);
}

static int ExecuteAdd(void* lib, const char* model_path, int n, int collectives) {
  AddModelApi api;
  NRT_STATUS (*execute)(nrt_model_t*, const nrt_tensor_set_t*, nrt_tensor_set_t*);
  NRT_STATUS (*read)(const nrt_tensor_t*, void*, size_t, size_t);
  if (collectives) {
    LOOKUP(load_collectives, "nrt_load_collectives");
    api.load = LoadAsRank;
  } else {
    LOOKUP(api.load, "nrt_load");
  }
  LOOKUP(api.allocate, "nrt_tensor_allocate");
  LOOKUP(api.write, "nrt_tensor_write");
  LOOKUP(api.allocate_set, "nrt_allocate_tensor_set");
  LOOKUP(api.add_to_set, "nrt_add_tensor_to_tensor_set");
  LOOKUP(execute, "nrt_execute");
  LOOKUP(read, "nrt_tensor_read");
  AddModel m;
  if (SetUpAddModel(&api, model_path, &m) != 0) return 1;
  for (int i = 0; i < n; ++i) CHECK(execute(m.model, m.inputs, m.outputs));
  float result[4] = {0};
  CHECK(read(m.out, result, 0, 16));
  printf("out: %g %g %g %g\n", result[0], result[1], result[2], result[3]);
  return 0;
}

int main(int argc, char** argv) {
  const int collectives = argc == 5 && strcmp(argv[4], "collectives") == 0;
  if (argc != 2 && argc != 4 && !collectives) {
    fprintf(stderr, "usage: dlopen_client LIBNRT [MODEL N [collectives]]\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen client: %s\n", dlerror());
    return 1;
  }
  NRT_STATUS (*init)(nrt_framework_type_t, const char*, const char*);
  void (*close_runtime)(void);
  LOOKUP(init, "nrt_init");
  LOOKUP(close_runtime, "nrt_close");
  CHECK(init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
  const int rc =
      argc == 2 ? TensorRoundTrip(lib) : ExecuteAdd(lib, argv[2], atoi(argv[3]), collectives);
  close_runtime();
  return rc;
}
