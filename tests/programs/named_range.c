/* A program that names a range as it likes: any bytes, as a framework passes its ops' and
 * modules' names through. Usage: named_range NAME SECONDS. Makes nrt_init, a host tensor and
 * one tensor write inside a range called NAME, then stays connected to the profiler for
 * SECONDS (so that `nrtprof status` lists it) and ends with nrt_close. Prints "named_range:
 * ok" once the write is made. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nrt/nrt.h"

void nrtprof_range_push(const char* name) __attribute__((weak));
void nrtprof_range_pop(void) __attribute__((weak));

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: named_range NAME SECONDS\n");
    return 2;
  }
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 64, "t", &tensor) != NRT_SUCCESS) return 1;
  char buf[64] = {0};
  if (nrtprof_range_push) nrtprof_range_push(argv[1]);
  const NRT_STATUS status = nrt_tensor_write(tensor, buf, 0, sizeof(buf));
  if (nrtprof_range_pop) nrtprof_range_pop();
  if (status != NRT_SUCCESS) return 1;
  printf("named_range: ok\n");
  fflush(stdout);
  sleep((unsigned)atoi(argv[2]));
  nrt_tensor_free(&tensor);
  nrt_close();
  return 0;
}
