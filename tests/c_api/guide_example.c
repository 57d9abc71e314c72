/*
 * A plain C99 program on the public libnrt API, in the manner of the example in the Neuron
 * runtime API guide: load a compiled model, allocate its tensors from the model's own tensor
 * info, fill the inputs, execute, print the outputs and release everything in the documented
 * order. It includes only the public headers and links only -lnrt, so it builds against the
 * simulated runtime and the real one alike (tests/c_api/c_api_test.sh builds it outside Bazel).
 *
 *   guide_example MODEL_FILE
 *
 * Input k, element i is set to (k + 1) * (i + 1); each output prints as one line,
 * "output NAME: v0 v1 ...". Only fp32 tensors are handled. Exit status 0 on success, 1 with a
 * message on stderr on any failure.
 */
#include <nrt/nrt.h>
#include <nrt/nrt_experimental.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every tensor is allocated on the NeuronCore the model is loaded on. */
#define NEURON_CORE 0

static const char *program = "guide_example";

static int fail(const char *what, NRT_STATUS status) {
  fprintf(stderr, "%s: %s failed with status %d\n", program, what, (int)status);
  return 1;
}

/* Reads the whole file into a malloc'ed buffer (never NULL on success, even when empty). */
static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  size_t capacity = 1 << 16, used = 0, n;
  char *data = NULL;
  if (f == NULL) return NULL;
  data = malloc(capacity);
  while (data != NULL && (n = fread(data + used, 1, capacity - used, f)) > 0) {
    used += n;
    if (used == capacity) {
      char *bigger = realloc(data, capacity * 2);
      if (bigger == NULL) free(data);
      data = bigger;
      capacity *= 2;
    }
  }
  if (data != NULL && ferror(f)) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = used;
  return data;
}

/* The fp32 values the program writes to input number `k` (0-based). */
static void fill_input(float *values, size_t count, int k) {
  size_t i;
  for (i = 0; i < count; ++i) values[i] = (float)(k + 1) * (float)(i + 1);
}

static void print_values(const char *usage, const char *name, const float *values, size_t count) {
  size_t i;
  printf("%s %s:", usage, name);
  for (i = 0; i < count; ++i) printf(" %g", values[i]);
  printf("\n");
}

/*
 * Allocates a device tensor for every tensor of the model, puts it in the input or output set
 * by its usage, and writes the inputs. tensors[i] belongs to info->tensor_array[i]; entries
 * stay NULL past a failure so the caller frees exactly what exists.
 */
static int allocate_tensors(const nrt_tensor_info_array_t *info, nrt_tensor_t **tensors,
                            nrt_tensor_set_t *inputs, nrt_tensor_set_t *outputs) {
  uint64_t i;
  int input_number = 0;
  for (i = 0; i < info->tensor_count; ++i) {
    const nrt_tensor_info_t *t = &info->tensor_array[i];
    const int is_input = t->usage == NRT_TENSOR_USAGE_INPUT;
    NRT_STATUS status;
    float *values;
    if (t->dtype != NRT_DTYPE_FLOAT32 || t->size % sizeof(float) != 0) {
      fprintf(stderr, "%s: tensor %s is not fp32, which this example does not handle\n", program,
              t->name);
      return 1;
    }
    status = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, NEURON_CORE, t->size, t->name,
                                 &tensors[i]);
    if (status != NRT_SUCCESS) return fail("nrt_tensor_allocate", status);
    status = nrt_add_tensor_to_tensor_set(is_input ? inputs : outputs, t->name, tensors[i]);
    if (status != NRT_SUCCESS) return fail("nrt_add_tensor_to_tensor_set", status);
    if (!is_input) continue;
    values = malloc(t->size);
    if (values == NULL) return fail("malloc", NRT_RESOURCE);
    fill_input(values, t->size / sizeof(float), input_number++);
    print_values("input", t->name, values, t->size / sizeof(float));
    status = nrt_tensor_write(tensors[i], values, 0, t->size);
    free(values);
    if (status != NRT_SUCCESS) return fail("nrt_tensor_write", status);
  }
  return 0;
}

static int print_outputs(const nrt_tensor_info_array_t *info, nrt_tensor_t **tensors) {
  uint64_t i;
  for (i = 0; i < info->tensor_count; ++i) {
    const nrt_tensor_info_t *t = &info->tensor_array[i];
    NRT_STATUS status;
    float *values;
    if (t->usage != NRT_TENSOR_USAGE_OUTPUT) continue;
    values = malloc(t->size);
    if (values == NULL) return fail("malloc", NRT_RESOURCE);
    status = nrt_tensor_read(tensors[i], values, 0, t->size);
    if (status == NRT_SUCCESS) print_values("output", t->name, values, t->size / sizeof(float));
    free(values);
    if (status != NRT_SUCCESS) return fail("nrt_tensor_read", status);
  }
  return 0;
}

int main(int argc, char **argv) {
  void *model_bytes = NULL;
  size_t model_size = 0;
  nrt_model_t *model = NULL;
  nrt_tensor_info_array_t *info = NULL;
  nrt_tensor_t **tensors = NULL;
  nrt_tensor_set_t *inputs = NULL, *outputs = NULL;
  NRT_STATUS status;
  int failed = 1;
  uint64_t i;

  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL_FILE\n", program);
    return 1;
  }
  model_bytes = read_file(argv[1], &model_size);
  if (model_bytes == NULL) {
    fprintf(stderr, "%s: cannot read %s\n", program, argv[1]);
    return 1;
  }
  status = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
  if (status != NRT_SUCCESS) {
    free(model_bytes);
    return fail("nrt_init", status);
  }

  /* Loaded on NeuronCore 0 (not -1, "any core") so the tensors below sit beside it. */
  status = nrt_load(model_bytes, model_size, NEURON_CORE, -1, &model);
  free(model_bytes); /* the runtime keeps its own copy */
  if (status != NRT_SUCCESS) {
    fail("nrt_load", status);
    goto close;
  }
  status = nrt_get_model_tensor_info(model, &info);
  if (status != NRT_SUCCESS) {
    fail("nrt_get_model_tensor_info", status);
    goto unload;
  }
  tensors = calloc(info->tensor_count > 0 ? info->tensor_count : 1, sizeof(*tensors));
  if (tensors == NULL) {
    fail("calloc", NRT_RESOURCE);
    goto free_info;
  }
  status = nrt_allocate_tensor_set(&inputs);
  if (status == NRT_SUCCESS) status = nrt_allocate_tensor_set(&outputs);
  if (status != NRT_SUCCESS) {
    fail("nrt_allocate_tensor_set", status);
    goto free_tensors;
  }
  if (allocate_tensors(info, tensors, inputs, outputs) != 0) goto free_tensors;

  status = nrt_execute(model, inputs, outputs);
  if (status != NRT_SUCCESS) {
    fail("nrt_execute", status);
    goto free_tensors;
  }
  if (print_outputs(info, tensors) == 0) failed = 0;

free_tensors:
  if (tensors != NULL) {
    for (i = 0; i < info->tensor_count; ++i) nrt_tensor_free(&tensors[i]);
    free(tensors);
  }
  if (inputs != NULL) nrt_destroy_tensor_set(&inputs);
  if (outputs != NULL) nrt_destroy_tensor_set(&outputs);
free_info:
  nrt_free_model_tensor_info(info);
unload:
  status = nrt_unload(model);
  if (status != NRT_SUCCESS) failed = fail("nrt_unload", status);
close:
  nrt_close();
  return failed;
}
