/* Uses libnrt only as Python's ctypes does: it does not link libnrt, it dlopen()s it
 * (RTLD_LOCAL) and calls it through pointers dlsym()'d from the handle. Two uses:
 *   dlopen_client LIBNRT           a tensor's round trip: allocate "dlopen_tensor" (64 bytes) on
 *                                  NeuronCore 0, write, read back, read out of bounds (which must
 *                                  fail), free. Prints "dlopen client: ok".
 *   dlopen_client LIBNRT MODEL N   N executions of MODEL, which must take inputs a, b (fp32 [4])
 *                                  and give out (fp32 [4]) = a + b. Prints the last result.
 * Exits 0 when every call behaves, else prints what failed on stderr and exits 1 (2: usage). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt/nrt.h"

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

static int ExecuteAdd(void* lib, const char* model_path, int n) {
  NRT_STATUS (*load)(const void*, size_t, int32_t, int32_t, nrt_model_t**);
  NRT_STATUS (*execute)(nrt_model_t*, const nrt_tensor_set_t*, nrt_tensor_set_t*);
  NRT_STATUS (*allocate)(nrt_tensor_placement_t, int, size_t, const char*, nrt_tensor_t**);
  NRT_STATUS (*write)(nrt_tensor_t*, const void*, size_t, size_t);
  NRT_STATUS (*read)(const nrt_tensor_t*, void*, size_t, size_t);
  NRT_STATUS (*allocate_set)(nrt_tensor_set_t**);
  NRT_STATUS (*add_to_set)(nrt_tensor_set_t*, const char*, nrt_tensor_t*);
  LOOKUP(load, "nrt_load");
  LOOKUP(execute, "nrt_execute");
  LOOKUP(allocate, "nrt_tensor_allocate");
  LOOKUP(write, "nrt_tensor_write");
  LOOKUP(read, "nrt_tensor_read");
  LOOKUP(allocate_set, "nrt_allocate_tensor_set");
  LOOKUP(add_to_set, "nrt_add_tensor_to_tensor_set");

  FILE* f = fopen(model_path, "rb");
  if (f == NULL) {
    fprintf(stderr, "dlopen client: cannot open %s\n", model_path);
    return 1;
  }
  static char bytes[1 << 16];
  const size_t size = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);

  nrt_model_t* model = NULL;
  nrt_tensor_t *a = NULL, *b = NULL, *out = NULL;
  nrt_tensor_set_t *inputs = NULL, *outputs = NULL;
  const float av[4] = {1, 2, 3, 4}, bv[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  float result[4] = {0};
  CHECK(load(bytes, size, 0, -1, &model));
  CHECK(allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "a", &a));
  CHECK(allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "b", &b));
  CHECK(allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &out));
  CHECK(write(a, av, 0, 16));
  CHECK(write(b, bv, 0, 16));
  CHECK(allocate_set(&inputs));
  CHECK(allocate_set(&outputs));
  CHECK(add_to_set(inputs, "a", a));
  CHECK(add_to_set(inputs, "b", b));
  CHECK(add_to_set(outputs, "out", out));
  for (int i = 0; i < n; ++i) CHECK(execute(model, inputs, outputs));
  CHECK(read(out, result, 0, 16));
  printf("out: %g %g %g %g\n", result[0], result[1], result[2], result[3]);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    fprintf(stderr, "usage: dlopen_client LIBNRT [MODEL N]\n");
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
  const int rc = argc == 2 ? TensorRoundTrip(lib) : ExecuteAdd(lib, argv[2], atoi(argv[3]));
  close_runtime();
  return rc;
}
