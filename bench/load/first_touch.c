// nrtprof_first_touch: what a byte of fresh memory costs on this machine, against a byte of
// memory already faulted in. The daemon's capture path is bound by it (BENCHMARKS.md, "capture
// --last"): every byte a capture touches for the first time is a page the kernel must map and
// zero, and on a VM with free page reporting one the host must provide again. Maps 1 GiB, touches one byte a page (4 KiB pages, then 2 MiB transparent huge pages),
// then rewrites the whole of it; the thread's CPU time per byte. With --after-free, instead:
// 128 MiB on huge pages touched and freed, then after a pause (0 to 8 s) another 128 MiB
// touched -- how long memory the process gave back stays cheap to take again (on a VM whose
// guest reports free pages to the host, until it is reported). Prints figures; asserts nothing.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double ThreadSeconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// A 2 MiB-aligned mapping of `bytes`, on huge pages or 4 KiB ones, or NULL; unmap *mapping,
// *mapped bytes.
static char* Map(size_t bytes, int huge, char** mapping, size_t* mapped) {
  const size_t align = (size_t)2 << 20;
  *mapped = bytes + align;
  *mapping = mmap(NULL, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (*mapping == MAP_FAILED) {
    perror("mmap");
    return NULL;
  }
  char* p = (char*)(((uintptr_t)*mapping + align - 1) & ~(uintptr_t)(align - 1));
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return p;
}

static void Measure(int huge) {
  const size_t bytes = (size_t)1 << 30;
  char* mapping;
  size_t mapped;
  char* p = Map(bytes, huge, &mapping, &mapped);
  if (p == NULL) return;
  const double t0 = ThreadSeconds();
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  const double t1 = ThreadSeconds();
  memset(p, 2, bytes);
  const double t2 = ThreadSeconds();
  printf("%-15s first touch %.3f ns/byte (%.2f GB/s); rewriting it %.3f ns/byte (%.1f GB/s)\n",
         huge ? "2 MiB THP:" : "4 KiB pages:", (t1 - t0) / bytes * 1e9, bytes / (t1 - t0) / 1e9,
         (t2 - t1) / bytes * 1e9, bytes / (t2 - t1) / 1e9);
  munmap(mapping, mapped);
}

static void AfterAFree(void) {
  const size_t bytes = (size_t)128 << 20;
  const int pauses_ms[] = {0, 500, 1000, 2000, 4000, 8000};
  for (size_t k = 0; k < sizeof pauses_ms / sizeof pauses_ms[0]; ++k) {
    char* mapping;
    size_t mapped;
    char* p = Map(bytes, 1, &mapping, &mapped);
    if (p == NULL) return;
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
    munmap(mapping, mapped);
    usleep((useconds_t)pauses_ms[k] * 1000);
    p = Map(bytes, 1, &mapping, &mapped);
    if (p == NULL) return;
    const double t0 = ThreadSeconds();
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
    const double t1 = ThreadSeconds();
    printf("%5d ms after freeing as much: first touch %.3f ns/byte\n", pauses_ms[k],
           (t1 - t0) / bytes * 1e9);
    munmap(mapping, mapped);
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--after-free") == 0) {
    AfterAFree();
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: nrtprof_first_touch [--after-free]\n");
    return 2;
  }
  Measure(0);
  Measure(1);
  return 0;
}
