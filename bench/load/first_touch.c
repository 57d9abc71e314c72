// nrtprof_first_touch: what a byte of fresh memory costs on this machine, against a byte of
// memory already faulted in. The daemon's capture path is bound by it (BENCHMARKS.md, "capture
// --last"): every byte a capture touches for the first time is a page the kernel must map and
// zero, and on a VM with free page reporting one the host must provide again. Maps 1 GiB, touches one byte a page (4 KiB pages, then 2 MiB transparent huge pages),
// then rewrites the whole of it; the thread's CPU time per byte. Prints figures; asserts nothing.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double ThreadSeconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void Measure(int huge) {
  const size_t bytes = (size_t)1 << 30, align = (size_t)2 << 20;
  char* mapping = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    perror("mmap");
    return;
  }
  char* p = (char*)(((uintptr_t)mapping + align - 1) & ~(uintptr_t)(align - 1));
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  const double t0 = ThreadSeconds();
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  const double t1 = ThreadSeconds();
  memset(p, 2, bytes);
  const double t2 = ThreadSeconds();
  printf("%-15s first touch %.3f ns/byte (%.2f GB/s); rewriting it %.3f ns/byte (%.1f GB/s)\n",
         huge ? "2 MiB THP:" : "4 KiB pages:", (t1 - t0) / bytes * 1e9, bytes / (t1 - t0) / 1e9,
         (t2 - t1) / bytes * 1e9, bytes / (t2 - t1) / 1e9);
  munmap(mapping, bytes + align);
}

int main(void) {
  Measure(0);
  Measure(1);
  return 0;
}
