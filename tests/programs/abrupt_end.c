/* A program that ends abruptly after using libnrt, as killed or crashed programs do.
 * Usage: abrupt_end HOW N. Makes nrt_init, nrt_tensor_allocate and N tensor writes, waits
 * 1 s (long enough for the profiler to send them), makes N more writes, each inside an
 * annotation range, then ends at once: HOW is kill (SIGKILL), exit (_exit(0), no atexit
 * handlers), segv (SIGSEGV) or abort (SIGABRT); at_once: SIGKILL right after the first N
 * writes, without waiting; busy: goes on writing, one call a millisecond, until killed (a
 * program that keeps recording beside another); sigint: waits for SIGINT, then, in the
 * manner of a KeyboardInterrupt handler, makes N writes and nrt_close and exits 130; threads:
 * the second N writes are made by four threads, one after another, each 60 ms after the last
 * one ended (so that the profiler has taken back its ring), and the fourth kills the process
 * with SIGKILL right after its writes. Prints how many calls it made first. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nrt/nrt.h"

void nrtprof_range_push(const char* name) __attribute__((weak));
void nrtprof_range_pop(void) __attribute__((weak));

static nrt_tensor_t* g_tensor;
static int g_writes_per_thread;

static void Writes(int n) {
  char buf[64] = {0};
  for (int i = 0; i < n; ++i) {
    if (nrtprof_range_push) nrtprof_range_push("step");
    nrt_tensor_write(g_tensor, buf, 0, sizeof(buf));
    if (nrtprof_range_pop) nrtprof_range_pop();
  }
}

static void* Worker(void* last) {
  Writes(g_writes_per_thread);
  if (last != NULL) raise(SIGKILL);
  return NULL;
}

static volatile sig_atomic_t g_interrupted = 0;
static void OnInterrupt(int sig) {
  (void)sig;
  g_interrupted = 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: abrupt_end kill|exit|segv|abort|at_once|busy|sigint|threads N\n");
    return 2;
  }
  const char* how = argv[1];
  const int n = atoi(argv[2]);
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 3;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "t", &tensor) != NRT_SUCCESS) {
    return 4;
  }
  char buf[64] = {0};
  for (int i = 0; i < n; ++i) nrt_tensor_write(tensor, buf, 0, sizeof(buf));
  if (strcmp(how, "at_once") == 0) {
    printf("abrupt_end: %d runtime calls, 0 ranges; ending by SIGKILL at once\n", 2 + n);
    fflush(stdout);
    raise(SIGKILL);
  }
  if (strcmp(how, "sigint") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnInterrupt;
    sigaction(SIGINT, &sa, NULL);
    printf("abrupt_end: waiting for SIGINT\n");
    fflush(stdout);
    while (!g_interrupted) pause();
    for (int i = 0; i < n; ++i) nrt_tensor_write(tensor, buf, 0, sizeof(buf));
    nrt_close();
    printf("abrupt_end: %d runtime calls after SIGINT; exiting 130\n", n + 1);
    fflush(stdout);
    exit(130);
  }
  if (strcmp(how, "busy") == 0) {
    const struct timespec tick = {0, 1000 * 1000};
    for (;;) {
      nrt_tensor_write(tensor, buf, 0, sizeof(buf));
      nanosleep(&tick, NULL);
    }
  }
  /* Long enough for the first half to be sent: a batch waits up to 500 ms, then the next tick. */
  const struct timespec wait = {1, 0};
  nanosleep(&wait, NULL);
  if (strcmp(how, "threads") == 0) {
    printf("abrupt_end: %d runtime calls, %d ranges; ending by SIGKILL on the fourth thread\n",
           2 + n + n / 4 * 4, n / 4 * 4);
    fflush(stdout);
    g_tensor = tensor;
    g_writes_per_thread = n / 4;
    const struct timespec between = {0, 60 * 1000 * 1000};
    for (int t = 0; t < 4; ++t) {
      pthread_t thread;
      if (pthread_create(&thread, NULL, &Worker, t == 3 ? &g_tensor : NULL) != 0) return 5;
      pthread_join(thread, NULL);
      nanosleep(&between, NULL);
    }
    return 6;  // not reached: the fourth thread kills the process
  }
  for (int i = 0; i < n; ++i) {
    if (nrtprof_range_push) nrtprof_range_push("step");
    nrt_tensor_write(tensor, buf, 0, sizeof(buf));
    if (nrtprof_range_pop) nrtprof_range_pop();
  }
  printf("abrupt_end: %d runtime calls, %d ranges; ending by %s\n", 2 + 2 * n, n, how);
  fflush(stdout);
  if (strcmp(how, "kill") == 0) raise(SIGKILL);
  if (strcmp(how, "segv") == 0) raise(SIGSEGV);
  if (strcmp(how, "abort") == 0) abort();
  _exit(0);
}
