/* Uses libnrt only as Python's ctypes does: dlopen(RTLD_LOCAL) and dlsym through the handle.
 * Usage: dlopen_client PATH_TO_LIBNRT. Prints "dlopen client: ok" and exits 0 when every call
 * behaves. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nrt/nrt.h"

#define LOOKUP(var, name)                                           \
  do {                                                              \
    *(void**)(&var) = dlsym(lib, name);                             \
    if (var == NULL) {                                              \
      fprintf(stderr, "dlopen client: no %s: %s\n", name, dlerror()); \
      return 2;                                                     \
    }                                                               \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_client PATH_TO_LIBNRT\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen client: %s\n", dlerror());
    return 2;
  }
  NRT_STATUS (*init)(nrt_framework_type_t, const char*, const char*);
  void (*close_runtime)(void);
  NRT_STATUS (*allocate)(nrt_tensor_placement_t, int, size_t, const char*, nrt_tensor_t**);
  NRT_STATUS (*write)(nrt_tensor_t*, const void*, size_t, size_t);
  NRT_STATUS (*read)(const nrt_tensor_t*, void*, size_t, size_t);
  void (*tensor_free)(nrt_tensor_t**);
  size_t (*get_size)(const nrt_tensor_t*);
  LOOKUP(init, "nrt_init");
  LOOKUP(close_runtime, "nrt_close");
  LOOKUP(allocate, "nrt_tensor_allocate");
  LOOKUP(write, "nrt_tensor_write");
  LOOKUP(read, "nrt_tensor_read");
  LOOKUP(tensor_free, "nrt_tensor_free");
  LOOKUP(get_size, "nrt_tensor_get_size"); /* not interposed: the real function */

  if (init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 3;
  nrt_tensor_t* tensor = NULL;
  if (allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "dlopen_tensor", &tensor) != NRT_SUCCESS) {
    return 4;
  }
  unsigned char in[64], out[64];
  for (int i = 0; i < 64; ++i) in[i] = (unsigned char)(i * 3);
  if (write(tensor, in, 0, sizeof(in)) != NRT_SUCCESS) return 5;
  if (read(tensor, out, 0, sizeof(out)) != NRT_SUCCESS) return 6;
  if (memcmp(in, out, sizeof(in)) != 0 || get_size(tensor) != 64) return 7;
  /* A read out of bounds fails with the runtime's own status. */
  if (read(tensor, out, 60, 8) == NRT_SUCCESS) return 8;
  tensor_free(&tensor);
  close_runtime();
  printf("dlopen client: ok\n");
  return 0;
}
