/* Bursts of calls with nothing between them, the pattern that fills a thread's ring between
 * two of the flusher's ticks. Usage: burst_client PAUSE_MS:N [PAUSE_MS:N ...].
 * Makes a 4-byte HOST tensor, then for each argument sleeps PAUSE_MS and makes N
 * nrt_tensor_write calls to it, one after the other (each writes how many came before it).
 * Then reads the last value back, frees the tensor, closes the runtime and exits at once;
 * prints "writes W last L" and exits 0 when the value read is the last written. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nrt/nrt.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: burst_client PAUSE_MS:N [PAUSE_MS:N ...]\n");
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    long pause_ms = -1, n = 0;
    char end = 0;
    if (sscanf(argv[a], "%ld:%ld%c", &pause_ms, &n, &end) != 2 || pause_ms < 0 || n <= 0) {
      fprintf(stderr, "burst_client: '%s' is not PAUSE_MS:N\n", argv[a]);
      return 2;
    }
  }
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, 0, 4, "burst", &tensor) != NRT_SUCCESS) {
    return 1;
  }
  long writes = 0;
  uint32_t value = 0;
  for (int a = 1; a < argc; ++a) {
    long pause_ms = 0, n = 0;
    sscanf(argv[a], "%ld:%ld", &pause_ms, &n);
    const struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
    for (long i = 0; i < n; ++i) {
      value = (uint32_t)writes;
      if (nrt_tensor_write(tensor, &value, 0, sizeof(value)) != NRT_SUCCESS) return 1;
      ++writes;
    }
  }
  uint32_t last = 0;
  if (nrt_tensor_read(tensor, &last, 0, sizeof(last)) != NRT_SUCCESS) return 1;
  nrt_tensor_free(&tensor);
  nrt_close();
  printf("writes %ld last %u\n", writes, (unsigned)last);
  return last == value ? 0 : 1;
}
