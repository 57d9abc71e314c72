/* A program that does not link libnrt: it dlopen()s the library (RTLD_LOCAL, as Python's
 * ctypes does) and calls it through dlsym()'d pointers. Usage: dlopen_client LIBNRT MODEL N.
 * The model must take inputs a, b (fp32 [4]) and give out (fp32 [4]) = a + b. Prints the
 * result of the last of N executions. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <nrt/nrt.h>

#define LOOKUP(name)                                                     \
  name##_fn name = (name##_fn)dlsym(lib, #name);                         \
  if (name == NULL) {                                                    \
    fprintf(stderr, "dlopen_client: %s not found: %s\n", #name, dlerror()); \
    return 1;                                                            \
  }

typedef NRT_STATUS (*nrt_init_fn)(nrt_framework_type_t, const char *, const char *);
typedef void (*nrt_close_fn)(void);
typedef NRT_STATUS (*nrt_load_fn)(const void *, size_t, int32_t, int32_t, nrt_model_t **);
typedef NRT_STATUS (*nrt_execute_fn)(nrt_model_t *, const nrt_tensor_set_t *, nrt_tensor_set_t *);
typedef NRT_STATUS (*nrt_tensor_allocate_fn)(nrt_tensor_placement_t, int, size_t, const char *,
                                             nrt_tensor_t **);
typedef NRT_STATUS (*nrt_tensor_write_fn)(nrt_tensor_t *, const void *, size_t, size_t);
typedef NRT_STATUS (*nrt_tensor_read_fn)(const nrt_tensor_t *, void *, size_t, size_t);
typedef NRT_STATUS (*nrt_allocate_tensor_set_fn)(nrt_tensor_set_t **);
typedef NRT_STATUS (*nrt_add_tensor_to_tensor_set_fn)(nrt_tensor_set_t *, const char *,
                                                      nrt_tensor_t *);

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: dlopen_client LIBNRT MODEL N\n");
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen_client: %s\n", dlerror());
    return 1;
  }
  LOOKUP(nrt_init);
  LOOKUP(nrt_close);
  LOOKUP(nrt_load);
  LOOKUP(nrt_execute);
  LOOKUP(nrt_tensor_allocate);
  LOOKUP(nrt_tensor_write);
  LOOKUP(nrt_tensor_read);
  LOOKUP(nrt_allocate_tensor_set);
  LOOKUP(nrt_add_tensor_to_tensor_set);

  FILE *f = fopen(argv[2], "rb");
  if (f == NULL) return 1;
  static char bytes[1 << 16];
  const size_t size = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);
  const int n = atoi(argv[3]);

  nrt_model_t *model = NULL;
  nrt_tensor_t *a = NULL, *b = NULL, *out = NULL;
  nrt_tensor_set_t *in = NULL, *outs = NULL;
  const float av[4] = {1, 2, 3, 4}, bv[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  float result[4] = {0};
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS ||
      nrt_load(bytes, size, 0, -1, &model) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "a", &a) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "b", &b) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &out) != NRT_SUCCESS ||
      nrt_tensor_write(a, av, 0, 16) != NRT_SUCCESS ||
      nrt_tensor_write(b, bv, 0, 16) != NRT_SUCCESS ||
      nrt_allocate_tensor_set(&in) != NRT_SUCCESS || nrt_allocate_tensor_set(&outs) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(in, "a", a) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(in, "b", b) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(outs, "out", out) != NRT_SUCCESS) {
    fprintf(stderr, "dlopen_client: setup failed\n");
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    if (nrt_execute(model, in, outs) != NRT_SUCCESS) {
      fprintf(stderr, "dlopen_client: nrt_execute failed\n");
      return 1;
    }
  }
  if (nrt_tensor_read(out, result, 0, 16) != NRT_SUCCESS) return 1;
  printf("out: %g %g %g %g\n", result[0], result[1], result[2], result[3]);
  nrt_close();
  return 0;
}
