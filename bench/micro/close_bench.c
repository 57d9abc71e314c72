/* What close() costs a program under the shim (shim/preload/fd_guard.h): ns per close(-1) (the system
 * call alone) and per close of a dup of stdin, before libnrt is used (the shim's close is a jump
 * to libc's) and after nrt_init (the backend started: close checks the shim's descriptors).
 * Run it plain and with LD_PRELOAD=libnrtprof_shim.so and compare; it asserts nothing.
 * Usage: close_bench [N] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <nrt/nrt.h>

static double NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void Measure(const char *when, long n) {
  double best_invalid = 1e30, best_dup = 1e30;
  for (int round = 0; round < 5; ++round) {
    double t0 = NowNs();
    for (long i = 0; i < n; ++i) close(-1);
    double t1 = NowNs();
    if ((t1 - t0) / n < best_invalid) best_invalid = (t1 - t0) / n;
    double spent = 0;
    for (long i = 0; i < n / 4; ++i) {
      const int fd = dup(0);
      const double a = NowNs();
      close(fd);
      spent += NowNs() - a;
    }
    if (spent / (n / 4) < best_dup) best_dup = spent / (n / 4);
  }
  printf("%-16s close(-1) %6.1f ns   close(dup(0)) %6.1f ns (incl. two clock reads)\n", when,
         best_invalid, best_dup);
}

int main(int argc, char **argv) {
  const long n = argc > 1 ? atol(argv[1]) : 2000000;
  Measure("before libnrt", n);
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  Measure("after nrt_init", n);
  nrt_close();
  return 0;
}
