/*
 * A plain C99 program on the Neuron runtime's explicit asynchronous API (nrt/nrt_async.h),
 * written from its public documentation only: it keeps up to SLOTS executions of a model in
 * flight on the compute execution unit while the tensor-op execution unit moves their inputs
 * and outputs, and
 *   - schedules each input write, execution and output read, each returning at once;
 *   - on NRT_QUEUE_FULL waits until the queue completes something (nrta_get_sequence), then
 *     tries again;
 *   - waits for requests by polling nrta_is_completed, and for the last execution through an
 *     eventfd (nrta_event_register_seq_id_completion) and poll();
 *   - checks each request's own status (`ret`, written when it completes), the arithmetic of
 *     every output, and that the compute queue's last completed sequence id reached the last
 *     one submitted.
 * It includes only the public headers and links only -lnrt (tests/c_api/c_api_test.sh builds it
 * outside Bazel).
 *
 *   async_docs_example MODEL_FILE EXECUTIONS
 *
 * The model must have two fp32 inputs and one fp32 output of one size and compute
 * out = (in0 + in1) * 0.5 (tests/c_api/add_model.txt). Execution k writes in0[i] = k + i and
 * in1[i] = 2 (k + i) + 1 and prints "execution k: out0 out1 ...". Exit status 0 on success, 1
 * with a message on stderr on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <nrt/nrt.h>
#include <nrt/nrt_async.h>
#include <nrt/nrt_experimental.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define NEURON_CORE 0
#define SLOTS 4        /* executions in flight at most, each with its own tensors */
#define MAX_ELEMS 4096 /* per tensor */
#define TRANSFER_QUEUE 0
#define COMPUTE_QUEUE 0 /* the compute execution unit's one queue */

static const char *program = "async_docs_example";

struct slot {
  nrt_tensor_t *in[2];
  nrt_tensor_t *out;
  nrt_tensor_set_t *inputs;
  nrt_tensor_set_t *outputs;
  float in_values[2][MAX_ELEMS];
  float out_values[MAX_ELEMS];
  int execution; /* the execution using this slot, -1 none */
  nrta_seq_t exec_seq;
  NRT_STATUS exec_ret;
};

static struct slot slots[SLOTS];
static size_t elems;                /* per tensor */
static nrta_seq_t last_exec_submitted;

static int fail(const char *what, NRT_STATUS status) {
  fprintf(stderr, "%s: %s failed with status %d\n", program, what, (int)status);
  return 1;
}

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

/* Polls until request `seq` has completed (the documented busy-wait pattern). */
static int wait_for(nrta_seq_t seq) {
  bool done = false;
  for (;;) {
    NRT_STATUS status = nrta_is_completed(seq, &done);
    if (status != NRT_SUCCESS) return fail("nrta_is_completed", status);
    if (done) return 0;
    sched_yield();
  }
}

/* After NRT_QUEUE_FULL: waits until the queue completes one more request (or has completed
 * everything submitted to it, `last_submitted`). */
static int wait_for_room(nrta_xu_t xu, int queue, nrta_seq_t last_submitted) {
  nrta_seq_t before = 0, now = 0;
  NRT_STATUS status = nrta_get_sequence(NEURON_CORE, xu, queue, &before);
  if (status != NRT_SUCCESS) return fail("nrta_get_sequence", status);
  now = before;
  while (now == before && now < last_submitted) {
    sched_yield();
    status = nrta_get_sequence(NEURON_CORE, xu, queue, &now);
    if (status != NRT_SUCCESS) return fail("nrta_get_sequence", status);
  }
  return 0;
}

/* Writes `bytes` of `values` to `tensor` on the tensor-op queue and waits for it to complete. */
static int write_and_wait(nrt_tensor_t *tensor, const float *values, size_t bytes) {
  static nrta_seq_t last_submitted = 0;
  NRT_STATUS ret = NRT_FAILURE, status;
  nrta_seq_t seq = 0;
  while ((status = nrta_tensor_write(tensor, values, 0, bytes, TRANSFER_QUEUE, &ret, &seq)) ==
         NRT_QUEUE_FULL) {
    if (wait_for_room(NRTA_XU_TENSOR_OP, TRANSFER_QUEUE, last_submitted) != 0) return 1;
  }
  if (status != NRT_SUCCESS) return fail("nrta_tensor_write", status);
  last_submitted = seq;
  if (wait_for(seq) != 0) return 1;
  if (ret != NRT_SUCCESS) return fail("the tensor write", ret);
  return 0;
}

/* Waits for the slot's execution, reads its output back asynchronously, checks and prints it. */
static int finish(struct slot *s) {
  NRT_STATUS ret = NRT_FAILURE, status;
  nrta_seq_t seq = 0;
  size_t i;
  if (s->execution < 0) return 0;
  if (wait_for(s->exec_seq) != 0) return 1;
  if (s->exec_ret != NRT_SUCCESS) return fail("an execution", s->exec_ret);
  while ((status = nrta_tensor_read(s->out_values, s->out, 0, elems * sizeof(float),
                                    TRANSFER_QUEUE, &ret, &seq)) == NRT_QUEUE_FULL) {
    sched_yield();
  }
  if (status != NRT_SUCCESS) return fail("nrta_tensor_read", status);
  if (wait_for(seq) != 0) return 1;
  if (ret != NRT_SUCCESS) return fail("the tensor read", ret);
  printf("execution %d:", s->execution);
  for (i = 0; i < elems; ++i) {
    const float want = (s->in_values[0][i] + s->in_values[1][i]) * 0.5f;
    if (s->out_values[i] != want) {
      fprintf(stderr, "%s: execution %d, element %lu: %g, want %g\n", program, s->execution,
              (unsigned long)i, s->out_values[i], want);
      return 1;
    }
    printf(" %g", s->out_values[i]);
  }
  printf("\n");
  s->execution = -1;
  return 0;
}

/* Fills the slot's inputs for execution k, writes them, and schedules the execution. */
static int start(struct slot *s, nrt_model_t *model, int k) {
  NRT_STATUS status;
  size_t i;
  int n;
  for (i = 0; i < elems; ++i) {
    s->in_values[0][i] = (float)(k + (int)i);
    s->in_values[1][i] = 2.0f * (float)(k + (int)i) + 1.0f;
  }
  /* The execution may start only once its inputs are on the device. */
  for (n = 0; n < 2; ++n) {
    if (write_and_wait(s->in[n], s->in_values[n], elems * sizeof(float)) != 0) return 1;
  }
  s->exec_ret = NRT_FAILURE;
  while ((status = nrta_execute_schedule(model, s->inputs, s->outputs, COMPUTE_QUEUE,
                                         &s->exec_ret, &s->exec_seq)) == NRT_QUEUE_FULL) {
    if (wait_for_room(NRTA_XU_COMPUTE, COMPUTE_QUEUE, last_exec_submitted) != 0) return 1;
  }
  if (status != NRT_SUCCESS) return fail("nrta_execute_schedule", status);
  last_exec_submitted = s->exec_seq;
  s->execution = k;
  return 0;
}

/* Waits for the slot's execution through an eventfd and poll(). */
static int wait_by_eventfd(const struct slot *s) {
  struct pollfd p;
  uint64_t count = 0;
  int efd = eventfd(0, 0);
  NRT_STATUS status;
  bool done = false;
  if (efd < 0) return fail("eventfd", NRT_FAILURE);
  status = nrta_event_register_seq_id_completion(s->exec_seq, efd);
  if (status != NRT_SUCCESS) {
    close(efd);
    return fail("nrta_event_register_seq_id_completion", status);
  }
  p.fd = efd;
  p.events = POLLIN;
  p.revents = 0;
  if (poll(&p, 1, 60000) != 1 || read(efd, &count, sizeof(count)) != (ssize_t)sizeof(count) ||
      count != 1) {
    close(efd);
    fprintf(stderr, "%s: the eventfd of execution %d was not signalled once\n", program,
            s->execution);
    return 1;
  }
  close(efd);
  status = nrta_is_completed(s->exec_seq, &done);
  if (status != NRT_SUCCESS || !done) return fail("nrta_is_completed after the eventfd", status);
  printf("execution %d: signalled through an eventfd\n", s->execution);
  return 0;
}

static int set_up_slots(const nrt_tensor_info_array_t *info) {
  uint64_t i;
  int k, inputs = 0, outputs = 0;
  for (i = 0; i < info->tensor_count; ++i) {
    const nrt_tensor_info_t *t = &info->tensor_array[i];
    if (t->dtype != NRT_DTYPE_FLOAT32 || t->size == 0 || t->size % sizeof(float) != 0 ||
        t->size / sizeof(float) > MAX_ELEMS || (elems != 0 && t->size / sizeof(float) != elems)) {
      fprintf(stderr, "%s: tensor %s is not fp32 of the others' size\n", program, t->name);
      return 1;
    }
    elems = t->size / sizeof(float);
    if (t->usage == NRT_TENSOR_USAGE_INPUT) ++inputs; else ++outputs;
  }
  if (inputs != 2 || outputs != 1) {
    fprintf(stderr, "%s: the model has %d inputs and %d outputs, not 2 and 1\n", program, inputs,
            outputs);
    return 1;
  }
  for (k = 0; k < SLOTS; ++k) {
    struct slot *s = &slots[k];
    NRT_STATUS status = nrt_allocate_tensor_set(&s->inputs);
    if (status == NRT_SUCCESS) status = nrt_allocate_tensor_set(&s->outputs);
    if (status != NRT_SUCCESS) return fail("nrt_allocate_tensor_set", status);
    inputs = 0;
    for (i = 0; i < info->tensor_count; ++i) {
      const nrt_tensor_info_t *t = &info->tensor_array[i];
      const int is_input = t->usage == NRT_TENSOR_USAGE_INPUT;
      nrt_tensor_t **tensor = is_input ? &s->in[inputs++] : &s->out;
      status = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, NEURON_CORE, t->size, t->name,
                                   tensor);
      if (status != NRT_SUCCESS) return fail("nrt_tensor_allocate", status);
      status = nrt_add_tensor_to_tensor_set(is_input ? s->inputs : s->outputs, t->name, *tensor);
      if (status != NRT_SUCCESS) return fail("nrt_add_tensor_to_tensor_set", status);
    }
  }
  return 0;
}

static void free_slots(void) {
  int k;
  for (k = 0; k < SLOTS; ++k) {
    struct slot *s = &slots[k];
    if (s->in[0] != NULL) nrt_tensor_free(&s->in[0]);
    if (s->in[1] != NULL) nrt_tensor_free(&s->in[1]);
    if (s->out != NULL) nrt_tensor_free(&s->out);
    if (s->inputs != NULL) nrt_destroy_tensor_set(&s->inputs);
    if (s->outputs != NULL) nrt_destroy_tensor_set(&s->outputs);
  }
}

static int run(nrt_model_t *model, int executions) {
  nrta_seq_t completed = 0;
  NRT_STATUS status;
  int k;
  for (k = 0; k < executions; ++k) {
    struct slot *s = &slots[k % SLOTS];
    if (finish(s) != 0) return 1; /* the slot's previous execution */
    if (start(s, model, k) != 0) return 1;
  }
  if (executions > 0 && wait_by_eventfd(&slots[(executions - 1) % SLOTS]) != 0) return 1;
  for (k = executions < SLOTS ? 0 : executions - SLOTS; k < executions; ++k) {
    if (finish(&slots[k % SLOTS]) != 0) return 1;
  }
  /* Everything submitted has completed: the queue's last completed id reached the last one. */
  status = nrta_get_sequence(NEURON_CORE, NRTA_XU_COMPUTE, COMPUTE_QUEUE, &completed);
  if (status != NRT_SUCCESS) return fail("nrta_get_sequence", status);
  if (completed < last_exec_submitted) {
    fprintf(stderr, "%s: the compute queue's last completed id is behind the last submitted\n",
            program);
    return 1;
  }
  printf("all %d executions completed\n", executions);
  return 0;
}

int main(int argc, char **argv) {
  void *model_bytes = NULL;
  size_t model_size = 0;
  nrt_model_t *model = NULL;
  nrt_tensor_info_array_t *info = NULL;
  NRT_STATUS status;
  int failed = 1, executions, k;

  if (argc != 3 || (executions = atoi(argv[2])) < 1) {
    fprintf(stderr, "usage: %s MODEL_FILE EXECUTIONS\n", program);
    return 1;
  }
  for (k = 0; k < SLOTS; ++k) slots[k].execution = -1;
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
  status = nrt_load(model_bytes, model_size, NEURON_CORE, -1, &model);
  free(model_bytes);
  if (status != NRT_SUCCESS) {
    fail("nrt_load", status);
    goto close;
  }
  status = nrt_get_model_tensor_info(model, &info);
  if (status != NRT_SUCCESS) {
    fail("nrt_get_model_tensor_info", status);
    goto unload;
  }
  if (set_up_slots(info) == 0 && run(model, executions) == 0) failed = 0;
  /* A tensor goes only once no request uses it: after a success every request has completed;
   * after a failure nrt_close completes what is left and frees the tensors itself. */
  if (!failed) free_slots();
  nrt_free_model_tensor_info(info);
unload:
  status = nrt_unload(model);
  if (status != NRT_SUCCESS) failed = fail("nrt_unload", status);
close:
  nrt_close();
  return failed;
}
