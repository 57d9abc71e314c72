/* Marks chosen instants with a libnrt call and a training step, for the tests of `nrtprof
 * capture --hosts`. Usage: clock_marks FIRST_NS COUNT GAP_MS [PAUSE_AFTER PAUSE_MS]. After
 * nrt_init and a tensor,
 * makes one nrt_tensor_write when this process's CLOCK_REALTIME reads FIRST_NS, then one every
 * GAP_MS, COUNT in all (sleeping until 2 ms before each, then watching the clock), each
 * the first call of a training step (nrtprof_step()); waits 300 ms for the profiler to send them,
 * and exits. Two such programs on two hosts, given the same instant each in its host's clock,
 * make calls at the same real instant and are in step, as the ranks of a training job. With
 * PAUSE_AFTER, the marks after mark number PAUSE_AFTER (from 0) come PAUSE_MS later: both
 * programs then stand still at the same step for that long. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

static int64_t RealtimeNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void SleepNs(int64_t ns) {
  struct timespec ts = {ns / 1000000000, ns % 1000000000};
  nanosleep(&ts, NULL);
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6) {
    fprintf(stderr, "usage: clock_marks FIRST_NS COUNT GAP_MS [PAUSE_AFTER PAUSE_MS]\n");
    return 2;
  }
  const int64_t first = strtoll(argv[1], NULL, 10);
  const int count = atoi(argv[2]);
  const int64_t gap = strtoll(argv[3], NULL, 10) * 1000000;
  const int pause_after = argc == 6 ? atoi(argv[4]) : count;
  const int64_t pause = argc == 6 ? strtoll(argv[5], NULL, 10) * 1000000 : 0;
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 3;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "mark", &tensor) != NRT_SUCCESS) {
    return 4;
  }
  char buf[64] = {0};
  for (int i = 0; i < count; ++i) {
    const int64_t at = first + i * gap + (i > pause_after ? pause : 0);
    const int64_t ahead = at - RealtimeNs();
    if (ahead > 2000000) SleepNs(ahead - 2000000);
    while (RealtimeNs() < at) {
    }
    nrtprof_step();  /* a step each, with its mark in it */
    nrt_tensor_write(tensor, buf, 0, sizeof(buf));
  }
  SleepNs(300000000);
  nrt_tensor_free(&tensor);
  nrt_close();
  return 0;
}
