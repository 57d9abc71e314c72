/* A program of the explicit async API's shapes, written from the public documentation of
 * nrt/nrt_async.h only (schedule calls that return at once with a sequence number; NRT_STATUS
 * *ret written at completion; NRT_QUEUE_FULL when a queue has no room; nrta_is_completed,
 * nrta_get_sequence and eventfd completion): run bare and under `nrtprof run` by
 * tests/async_test.cc, which compares the two.
 *
 *   async_client MODEL_FILE MODE EXECUTIONS DEPTH
 *
 * The model adds two fp32[4] inputs. Execution k writes a[i] = k + i and b[i] = 2i with
 * nrta_tensor_write, waits for both writes (a transfer is not ordered against the compute
 * queue), schedules the execution with up to DEPTH in flight, and reads each output back with
 * nrta_tensor_read once its execution completed. Modes:
 *   poll     one thread, completions polled with nrta_is_completed
 *   threads  two threads, each with its own tensors, scheduling on the same model
 *   full     one thread: every execution's inputs written first (DEPTH slots, DEPTH >= N),
 *            then the N executions scheduled back to back, each NRT_QUEUE_FULL met by waiting
 *            with nrta_get_sequence for a completion and retrying (run it with a queue
 *            shallower than N, NRT_SIM_ASYNC_QUEUE_DEPTH, and the device's time passing)
 *   eventfd  one thread, each execution waited for through an eventfd and poll()
 *   fork     a round, then a child process that runs a round of its own (its own nrt_init),
 *            then another round in the parent
 *   inspect  as poll, inside the runtime's own profiling session (nrt_inspect_begin/_stop,
 *            set up by the NEURON_RT_INSPECT_* variables), as a program may run beside nrtprof
 *   tail     three threads that call nothing of libnrt but nrta_is_completed, each polling N
 *            times an execution the main thread scheduled, then ending; three threads, each
 *            running one execution and then scheduling another and polling
 *            it N times with nrta_is_completed without waiting for it, then ending; the main
 *            thread waits for those, polls nrta_get_sequence N times with nothing left to
 *            complete, and prints how many times it called each completion query (DEPTH unused)
 *   running  one thread that runs an execution, schedules another and polls it N times with
 *            nrta_is_completed, then polls nrta_get_sequence N times, and then waits, never to
 *            end; the main thread waits for that execution, prints how many times the program
 *            called each completion query and returns from main with the thread still there
 *            (DEPTH unused)
 *   spinning one execution, then a thread that polls nrta_get_sequence without end; once it has
 *            polled N times, the main thread prints how many times it had then, and returns from
 *            main with the runtime open and the thread still polling; a handler that exit() runs
 *            after the profiler's prints how many times it had by then (DEPTH unused)
 * Prints each round's checksum of the outputs; exits non-zero on any wrong output or error. */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_profile.h"

#define MAX_DEPTH 64
#define WIDTH 4

static const char *g_model_file;
static int g_executions, g_depth;
static const char *g_mode;

struct slot {
  nrt_tensor_t *a, *b, *out;
  nrt_tensor_set_t *inputs, *outputs;
  nrta_seq_t seq;
  NRT_STATUS ret;
  int execution; /* -1: free */
};

static int fail(const char *what, NRT_STATUS s) {
  fprintf(stderr, "async_client: %s failed: %d\n", what, (int)s);
  return 1;
}

/* The completion queries, each call counted (mode tail prints the counts). */
static long g_is_completed_calls, g_get_sequence_calls;

static NRT_STATUS is_completed(nrta_seq_t seq, bool *done) {
  __atomic_fetch_add(&g_is_completed_calls, 1, __ATOMIC_RELAXED);
  return nrta_is_completed(seq, done);
}

static NRT_STATUS get_sequence(uint32_t lnc, nrta_xu_t xu, int queue, nrta_seq_t *seq) {
  __atomic_fetch_add(&g_get_sequence_calls, 1, __ATOMIC_RELAXED);
  return nrta_get_sequence(lnc, xu, queue, seq);
}

static void wait_for(nrta_seq_t seq) {
  bool done = false;
  while (is_completed(seq, &done) == NRT_SUCCESS && !done) {
  }
}

/* Waits for `seq` through an eventfd the runtime signals at its completion. */
static int wait_with_eventfd(nrta_seq_t seq) {
  int efd = eventfd(0, EFD_CLOEXEC);
  if (efd < 0) return 1;
  NRT_STATUS s = nrta_event_register_seq_id_completion(seq, efd);
  if (s != NRT_SUCCESS) {
    close(efd);
    return fail("nrta_event_register_seq_id_completion", s);
  }
  struct pollfd p = {efd, POLLIN, 0};
  int n = poll(&p, 1, 10000);
  uint64_t count = 0;
  if (n == 1 && read(efd, &count, sizeof(count)) != sizeof(count)) n = 0;
  nrta_event_register_seq_id_completion(seq, -1);
  close(efd);
  if (n != 1) {
    fprintf(stderr, "async_client: no completion through the eventfd\n");
    return 1;
  }
  return 0;
}

static int make_slot(nrt_model_t *model, struct slot *s) {
  (void)model;
  size_t bytes = WIDTH * sizeof(float);
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, bytes, "a", &s->a) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, bytes, "b", &s->b) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, bytes, "out", &s->out) != NRT_SUCCESS ||
      nrt_allocate_tensor_set(&s->inputs) != NRT_SUCCESS ||
      nrt_allocate_tensor_set(&s->outputs) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(s->inputs, "a", s->a) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(s->inputs, "b", s->b) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(s->outputs, "out", s->out) != NRT_SUCCESS) {
    return fail("allocating tensors", NRT_FAILURE);
  }
  s->execution = -1;
  return 0;
}

static void free_slot(struct slot *s) {
  nrt_destroy_tensor_set(&s->inputs);
  nrt_destroy_tensor_set(&s->outputs);
  nrt_tensor_free(&s->a);
  nrt_tensor_free(&s->b);
  nrt_tensor_free(&s->out);
}

/* Reads the output of the slot's completed execution and adds it to *sum; checks it. */
static int harvest(struct slot *s, double *sum) {
  if (s->ret != NRT_SUCCESS) return fail("the execution", s->ret);
  float out[WIDTH];
  NRT_STATUS ret = NRT_FAILURE;
  nrta_seq_t seq;
  NRT_STATUS st = nrta_tensor_read(out, s->out, 0, sizeof(out), 0, &ret, &seq);
  if (st != NRT_SUCCESS) return fail("nrta_tensor_read", st);
  wait_for(seq);
  if (ret != NRT_SUCCESS) return fail("the read", ret);
  for (int i = 0; i < WIDTH; ++i) {
    float want = (float)(s->execution + 3 * i);
    if (out[i] != want) {
      fprintf(stderr, "async_client: execution %d: out[%d] = %g, not %g\n", s->execution, i,
              out[i], want);
      return 1;
    }
    *sum += out[i];
  }
  s->execution = -1;
  return 0;
}

/* Writes execution k's inputs into the slot and waits for both writes. */
static int write_inputs(struct slot *s, int k) {
  float a[WIDTH], b[WIDTH];
  for (int i = 0; i < WIDTH; ++i) {
    a[i] = (float)(k + i);
    b[i] = (float)(2 * i);
  }
  NRT_STATUS ra = NRT_FAILURE, rb = NRT_FAILURE;
  nrta_seq_t sa, sb;
  NRT_STATUS st = nrta_tensor_write(s->a, a, 0, sizeof(a), 0, &ra, &sa);
  if (st != NRT_SUCCESS) return fail("nrta_tensor_write", st);
  st = nrta_tensor_write(s->b, b, 0, sizeof(b), 1, &rb, &sb);
  if (st != NRT_SUCCESS) return fail("nrta_tensor_write", st);
  wait_for(sa);
  wait_for(sb);
  if (ra != NRT_SUCCESS || rb != NRT_SUCCESS) return fail("a write", ra != NRT_SUCCESS ? ra : rb);
  return 0;
}

/* Schedules the slot's execution; on NRT_QUEUE_FULL (mode full) waits for the compute queue to
 * complete one more request and retries. Counts the full queues met in *full. */
static int schedule(nrt_model_t *model, struct slot *s, int *full) {
  for (;;) {
    NRT_STATUS st = nrta_execute_schedule(model, s->inputs, s->outputs, 0, &s->ret, &s->seq);
    if (st == NRT_SUCCESS) return 0;
    if (st != NRT_QUEUE_FULL) return fail("nrta_execute_schedule", st);
    ++*full;
    nrta_seq_t before = 0, now = 0;
    get_sequence(0, NRTA_XU_COMPUTE, 0, &before);
    do {
      get_sequence(0, NRTA_XU_COMPUTE, 0, &now);
    } while (now == before);
  }
}

/* Mode full: all inputs first, then every schedule back to back, so that a queue shallower than
 * N is met full whatever the machine's speed. */
static int run_back_to_back(nrt_model_t *model, int n, double *sum, int *full) {
  struct slot slots[MAX_DEPTH];
  int rc = 0, made = 0;
  for (; made < n && rc == 0; ++made) rc = make_slot(model, &slots[made]);
  for (int k = 0; k < n && rc == 0; ++k) rc = write_inputs(&slots[k], k);
  for (int k = 0; k < n && rc == 0; ++k) {
    slots[k].execution = k;
    rc = schedule(model, &slots[k], full);
  }
  for (int k = 0; k < n && rc == 0; ++k) {
    wait_for(slots[k].seq);
    rc = harvest(&slots[k], sum);
  }
  for (int i = 0; i < made; ++i) free_slot(&slots[i]);
  return rc;
}

/* N executions with up to `depth` in flight; the outputs' sum in *sum. */
static int run_executions(nrt_model_t *model, int n, int depth, int use_eventfd, double *sum,
                          int *full) {
  struct slot slots[MAX_DEPTH];
  int rc = 0;
  for (int i = 0; i < depth && rc == 0; ++i) rc = make_slot(model, &slots[i]);
  if (rc != 0) return rc;
  int oldest = 0;  /* the slot of the oldest execution in flight */
  for (int k = 0; k < n && rc == 0; ++k) {
    struct slot *s = &slots[k % depth];
    if (s->execution >= 0) {
      /* The slot's execution is the oldest in flight: wait for it, then read its output. */
      if (use_eventfd) {
        rc = wait_with_eventfd(s->seq);
      } else {
        wait_for(s->seq);
      }
      if (rc == 0) rc = harvest(s, sum);
      oldest = (k + 1) % depth;
    }
    if (rc == 0) rc = write_inputs(s, k);
    if (rc == 0) {
      NRT_STATUS st =
          nrta_execute_schedule(model, s->inputs, s->outputs, 0, &s->ret, &s->seq);
      if (st != NRT_SUCCESS) rc = fail("nrta_execute_schedule", st);
      s->execution = k;
    }
  }
  for (int i = 0; i < depth && rc == 0; ++i) {
    struct slot *s = &slots[(oldest + i) % depth];
    if (s->execution < 0) continue;
    if (use_eventfd) {
      rc = wait_with_eventfd(s->seq);
    } else {
      wait_for(s->seq);
    }
    if (rc == 0) rc = harvest(s, sum);
  }
  for (int i = 0; i < depth; ++i) free_slot(&slots[i]);
  return rc;
}

static nrt_model_t *g_model;

/* Mode tail: a thread's execution left in flight, polled N times, for the main thread to wait
 * for once the thread has ended. */
struct tail_thread {
  struct slot slot;
  int rc;
};

static void *tail_main(void *arg) {
  struct tail_thread *t = arg;
  struct slot *s = &t->slot;
  double sum = 0;
  int rc = make_slot(g_model, s);
  for (int k = 0; k < 2 && rc == 0; ++k) {
    rc = write_inputs(s, k);
    if (rc != 0) break;
    NRT_STATUS st = nrta_execute_schedule(g_model, s->inputs, s->outputs, 0, &s->ret, &s->seq);
    if (st != NRT_SUCCESS) {
      rc = fail("nrta_execute_schedule", st);
      break;
    }
    s->execution = k;
    if (k == 0) {
      wait_for(s->seq);
      rc = harvest(s, &sum);
    }
  }
  /* The second execution is still running: polls that see nothing new, the thread's last. */
  for (int i = 0; i < g_executions && rc == 0; ++i) {
    bool done = false;
    is_completed(s->seq, &done);
  }
  t->rc = rc;
  return NULL;
}

/* Mode tail: a thread that calls nothing of libnrt but nrta_is_completed, N times, of the
 * main thread's execution in flight. */
static void *poller_main(void *arg) {
  const nrta_seq_t *seq = arg;
  for (int i = 0; i < g_executions; ++i) {
    bool done = false;
    is_completed(*seq, &done);
  }
  return NULL;
}

/* Mode running: tail_main's polls of an execution in flight, then N nrta_get_sequence polls
 * (the first sees the sequence move), then a wait that outlasts the process. */
static pthread_mutex_t g_parked_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_parked_cv = PTHREAD_COND_INITIALIZER;
static int g_parked;

static void *running_main(void *arg) {
  struct tail_thread *t = arg;
  tail_main(t);
  for (int i = 0; i < g_executions && t->rc == 0; ++i) {
    nrta_seq_t last = 0;
    if (get_sequence(0, NRTA_XU_COMPUTE, 0, &last) != NRT_SUCCESS) t->rc = 1;
  }
  pthread_mutex_lock(&g_parked_mu);
  g_parked = 1;
  pthread_cond_broadcast(&g_parked_cv);
  pthread_mutex_unlock(&g_parked_mu);
  for (;;) pause();
  return NULL;
}

/* Mode running: the thread above, left running when main returns. */
static int run_running(double *sum) {
  static struct tail_thread running;
  memset(&running, 0, sizeof(running));
  pthread_t thread;
  if (pthread_create(&thread, NULL, running_main, &running) != 0) return 1;
  pthread_mutex_lock(&g_parked_mu);
  while (!g_parked) pthread_cond_wait(&g_parked_cv, &g_parked_mu);
  pthread_mutex_unlock(&g_parked_mu);
  int rc = running.rc;
  if (rc == 0) {
    wait_for(running.slot.seq);
    rc = harvest(&running.slot, sum);
  }
  free_slot(&running.slot);
  return rc;
}

/* Mode spinning: nrta_get_sequence polled until the process ends. */
static void *spinning_main(void *arg) {
  (void)arg;
  for (;;) {
    nrta_seq_t last = 0;
    get_sequence(0, NRTA_XU_COMPUTE, 0, &last);
  }
  return NULL;
}

static void print_calls_at_exit(void) {
  printf("at exit: nrta_get_sequence calls %ld\n",
         __atomic_load_n(&g_get_sequence_calls, __ATOMIC_RELAXED));
  fflush(stdout);
}

/* Mode spinning: one execution, then the thread above, left polling; the calls it had made once
 * it made N. */
static int run_spinning(double *sum, long *polled) {
  int full = 0;
  int rc = run_executions(g_model, 1, 1, 0, sum, &full);
  pthread_t thread;
  if (rc != 0 || pthread_create(&thread, NULL, spinning_main, NULL) != 0) return 1;
  while (__atomic_load_n(&g_get_sequence_calls, __ATOMIC_RELAXED) < g_executions) sched_yield();
  *polled = __atomic_load_n(&g_get_sequence_calls, __ATOMIC_RELAXED);
  return 0;
}

/* Mode tail: three threads that only poll, three threads' tails, then the main thread's, of N
 * polls each. */
static int run_tails(double *sum) {
  enum { kThreads = 3 };
  pthread_t threads[kThreads];
  struct tail_thread tails[kThreads];
  memset(tails, 0, sizeof(tails));
  struct slot polled;
  memset(&polled, 0, sizeof(polled));
  int polled_rc = make_slot(g_model, &polled);
  if (polled_rc == 0) polled_rc = write_inputs(&polled, 0);
  if (polled_rc == 0) {
    NRT_STATUS st =
        nrta_execute_schedule(g_model, polled.inputs, polled.outputs, 0, &polled.ret, &polled.seq);
    if (st != NRT_SUCCESS) polled_rc = fail("nrta_execute_schedule", st);
    polled.execution = 0;
  }
  if (polled_rc == 0) {
    pthread_t pollers[kThreads];
    for (int t = 0; t < kThreads; ++t) pthread_create(&pollers[t], NULL, poller_main, &polled.seq);
    for (int t = 0; t < kThreads; ++t) pthread_join(pollers[t], NULL);
    wait_for(polled.seq);
    polled_rc = harvest(&polled, sum);
  }
  free_slot(&polled);
  if (polled_rc != 0) return polled_rc;
  for (int t = 0; t < kThreads; ++t) pthread_create(&threads[t], NULL, tail_main, &tails[t]);
  int rc = 0;
  for (int t = 0; t < kThreads; ++t) {
    pthread_join(threads[t], NULL);
    rc |= tails[t].rc;
    if (tails[t].rc == 0) {
      wait_for(tails[t].slot.seq);
      rc |= harvest(&tails[t].slot, sum);
    }
    free_slot(&tails[t].slot);
  }
  for (int i = 0; i < g_executions && rc == 0; ++i) {
    nrta_seq_t last = 0;
    if (get_sequence(0, NRTA_XU_COMPUTE, 0, &last) != NRT_SUCCESS) rc = 1;
  }
  return rc;
}

struct thread_result {
  double sum;
  int rc, full;
};

static void *thread_main(void *arg) {
  struct thread_result *r = arg;
  r->rc = run_executions(g_model, g_executions, g_depth, 0, &r->sum, &r->full);
  return NULL;
}

/* nrt_init, load, the executions of the mode, unload, nrt_close; prints the checksum. */
static int one_round(const char *who) {
  FILE *f = fopen(g_model_file, "rb");
  if (f == NULL) return fail("opening the model file", NRT_FAILURE);
  static char bytes[1 << 20];
  size_t size = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);
  NRT_STATUS st = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
  if (st != NRT_SUCCESS) return fail("nrt_init", st);
  st = nrt_load(bytes, size, 0, 1, &g_model);
  if (st != NRT_SUCCESS) return fail("nrt_load", st);
  int rc = 0, full = 0;
  double sum = 0;
  const int inspect = strcmp(g_mode, "inspect") == 0;
  if (inspect && (st = nrt_inspect_begin()) != NRT_SUCCESS) return fail("nrt_inspect_begin", st);
  if (strcmp(g_mode, "threads") == 0) {
    pthread_t threads[2];
    struct thread_result results[2];
    memset(results, 0, sizeof(results));
    for (int t = 0; t < 2; ++t) pthread_create(&threads[t], NULL, thread_main, &results[t]);
    for (int t = 0; t < 2; ++t) {
      pthread_join(threads[t], NULL);
      rc |= results[t].rc;
      sum += results[t].sum;
    }
  } else if (strcmp(g_mode, "tail") == 0) {
    rc = run_tails(&sum);
  } else if (strcmp(g_mode, "running") == 0) {
    rc = run_running(&sum);
  } else if (strcmp(g_mode, "spinning") == 0) {
    long polled = 0;
    rc = run_spinning(&sum, &polled);
    if (rc != 0) return rc;
    /* The runtime stays open: the thread polls on while the process exits. */
    printf("%s: checksum %.1f\n%s: nrta_get_sequence calls %ld\n", who, sum, who, polled);
    fflush(stdout);
    return 0;
  } else if (strcmp(g_mode, "full") == 0) {
    rc = g_executions <= g_depth ? run_back_to_back(g_model, g_executions, &sum, &full) : 2;
  } else {
    rc = run_executions(g_model, g_executions, g_depth, strcmp(g_mode, "eventfd") == 0, &sum,
                        &full);
  }
  if (inspect && (st = nrt_inspect_stop()) != NRT_SUCCESS) rc = fail("nrt_inspect_stop", st);
  nrt_unload(g_model);
  nrt_close();
  if (rc != 0) return rc;
  printf("%s: checksum %.1f\n", who, sum);
  if (strcmp(g_mode, "full") == 0) printf("%s: queue full met: %s\n", who, full > 0 ? "yes" : "no");
  if (strcmp(g_mode, "tail") == 0 || strcmp(g_mode, "running") == 0) {
    printf("%s: nrta_is_completed calls %ld, nrta_get_sequence calls %ld\n", who,
           __atomic_load_n(&g_is_completed_calls, __ATOMIC_RELAXED),
           __atomic_load_n(&g_get_sequence_calls, __ATOMIC_RELAXED));
  }
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5 || (g_executions = atoi(argv[3])) < 1 || (g_depth = atoi(argv[4])) < 1 ||
      g_depth > MAX_DEPTH) {
    fprintf(stderr,
            "usage: async_client MODEL_FILE poll|threads|full|eventfd|fork|inspect|tail|running|"
            "spinning N DEPTH\n");
    return 2;
  }
  g_model_file = argv[1];
  g_mode = argv[2];
  /* Registered before the profiler's handler (made at the first libnrt call): runs after it. */
  if (strcmp(g_mode, "spinning") == 0) atexit(print_calls_at_exit);
  if (strcmp(g_mode, "fork") != 0) return one_round("main");
  g_mode = "poll";
  if (one_round("parent, before the fork") != 0) return 1;
  pid_t child = fork();
  if (child < 0) return fail("fork", NRT_FAILURE);
  if (child == 0) _exit(one_round("child"));
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "async_client: the child failed\n");
    return 1;
  }
  return one_round("parent, after the fork");
}
