/*
 * What a ring's pages cost a producer on this machine, without the shim: the experiments behind
 * bench/README.md's "Where a new thread's first calls went" (issue 13).
 *
 *   bazel build --config=opt //bench:ring_pages && bazel-out/k8-opt/bin/bench/ring_pages
 *
 * 1. First access. 625 KiB (the slots 10,000 calls take) of a fresh 2 MiB memory file, mapped
 *    shared as the shim maps its rings, written 64 bytes at a time on CPU 0: fresh; after
 *    MADV_POPULATE_WRITE; after the populate and a read of one byte of each page by a thread on
 *    CPU 1 (what the shim's flusher does ahead of the producer); after that read alone. Minor
 *    page faults are counted (getrusage) to tell the guest's faults from the hypervisor's.
 * 2. Dropped mappings. A producer writes bursts of 10,000 64-byte records (two time-stamp
 *    counter reads each) into a 2 MiB ring after 150 ms pauses while a consumer thread reads
 *    them every 25 ms: as is; with the ring's page mappings dropped at each pause's start
 *    (MADV_DONTNEED on the shared mapping: the data stays, the page table entries go), which
 *    is what a host that reclaims or re-protects guest mappings while a thread sleeps would do;
 *    and the same with the consumer reading one byte of each page of the next 20,000 slots at
 *    every tick.
 *
 * Prints figures; asserts nothing (a benchmark, not a test).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

enum { kRingBytes = 2 << 20, kSlots = kRingBytes / 64, kBurst = 10000, kUseBytes = kBurst * 64 };

static uint64_t Ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static long MinorFaults(void) {
  struct rusage r;
  getrusage(RUSAGE_THREAD, &r);
  return r.ru_minflt;
}

static void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static char* MapRing(void) {
  const int fd = memfd_create("ring_pages", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, kRingBytes) != 0) return NULL;
  char* p = mmap(NULL, kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

/* ---- 1. First access ---- */

static char* g_pages;

static void* ReadEachPage(void* arg) {
  (void)arg;
  Pin(1);
  for (size_t i = 0; i < kUseBytes; i += 4096) (void)((volatile char*)g_pages)[i];
  return NULL;
}

static void FirstAccess(const char* name, int populate, int read_by_other) {
  char* p = MapRing();
  if (p == NULL) return;
  g_pages = p;
  const uint64_t t0 = Ns();
  if (populate) madvise(p, kUseBytes, MADV_POPULATE_WRITE);
  if (read_by_other) {
    pthread_t t;
    pthread_create(&t, NULL, ReadEachPage, NULL);
    pthread_join(t, NULL);
  }
  const uint64_t t1 = Ns();
  const long f0 = MinorFaults();
  for (size_t i = 0; i < kUseBytes; i += 64) {
    memset(p + i, 1, 64);
    __asm__ volatile("" : : "r"(p) : "memory");
  }
  const uint64_t t2 = Ns();
  printf("  %-44s before: %7.1f us   writes: %7.1f us (%5.1f ns/slot, %ld faults)\n", name,
         (t1 - t0) / 1e3, (t2 - t1) / 1e3, (t2 - t1) / (double)kBurst, MinorFaults() - f0);
  munmap(p, kRingBytes);
}

/* ---- 2. Dropped mappings ---- */

static char* g_ring;
static _Atomic uint64_t g_head, g_tail;
static _Atomic int g_stop;
static int g_touch_ahead;

static void* Consumer(void* arg) {
  (void)arg;
  uint64_t sum = 0;
  while (!atomic_load(&g_stop)) {
    const uint64_t head = atomic_load_explicit(&g_head, memory_order_acquire);
    uint64_t tail = atomic_load(&g_tail);
    for (; tail < head; ++tail) sum += ((volatile uint64_t*)(g_ring + (tail % kSlots) * 64))[1];
    atomic_store(&g_tail, tail);
    if (g_touch_ahead) {
      for (uint64_t s = head; s < head + 2 * kBurst; s += 64) {
        (void)((volatile char*)g_ring)[(s % kSlots) * 64];
      }
    }
    usleep(25000);
  }
  return (void*)(uintptr_t)sum;
}

static int Compare(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void Bursts(const char* name, int drop, int touch_ahead) {
  g_ring = MapRing();
  if (g_ring == NULL) return;
  for (size_t i = 0; i < kRingBytes; i += 4096) g_ring[i] = 0;
  atomic_store(&g_head, 0);
  atomic_store(&g_tail, 0);
  atomic_store(&g_stop, 0);
  g_touch_ahead = touch_ahead;
  pthread_t consumer;
  pthread_create(&consumer, NULL, Consumer, NULL);
  enum { kWarm = 6, kTimed = 24 };
  double ns_per_record[kTimed];
  for (int b = 0; b < kWarm + kTimed; ++b) {
    if (drop) madvise(g_ring, kRingBytes, MADV_DONTNEED);
    usleep(150000);
    const uint64_t head = atomic_load(&g_head);
    const uint64_t t0 = Ns();
    for (uint64_t i = 0; i < kBurst; ++i) {
      uint64_t* r = (uint64_t*)(g_ring + ((head + i) % kSlots) * 64);
      const uint64_t start = __rdtsc();
      r[0] = 1;
      r[1] = start;
      r[2] = i;
      r[3] = head;
      r[4] = r[5] = r[6] = 0;
      r[7] = __rdtsc();
      atomic_store_explicit(&g_head, head + i + 1, memory_order_release);
    }
    const uint64_t t1 = Ns();
    if (b >= kWarm) ns_per_record[b - kWarm] = (double)(t1 - t0) / kBurst;
  }
  atomic_store(&g_stop, 1);
  pthread_join(consumer, NULL);
  munmap(g_ring, kRingBytes);
  qsort(ns_per_record, kTimed, sizeof(double), Compare);
  printf("  %-56s %6.1f ns/record (p25 %.1f, p75 %.1f)\n", name, ns_per_record[kTimed / 2],
         ns_per_record[kTimed / 4], ns_per_record[3 * kTimed / 4]);
}

int main(void) {
  Pin(0);
  printf("1. First access: 625 KiB of a 2 MiB memory file, written 64 bytes at a time on CPU 0\n");
  for (int round = 0; round < 3; ++round) {
    FirstAccess("fresh", 0, 0);
    FirstAccess("after MADV_POPULATE_WRITE", 1, 0);
    FirstAccess("after the populate and a read (CPU 1)", 1, 1);
    FirstAccess("after a read alone (CPU 1)", 0, 1);
  }
  printf("2. Bursts of %d records after 150 ms pauses, a consumer every 25 ms; medians of 24\n",
         kBurst);
  for (int round = 0; round < 2; ++round) {
    Bursts("as is", 0, 0);
    Bursts("mappings dropped at each pause", 1, 0);
    Bursts("mappings dropped, the consumer reads the next pages", 1, 1);
  }
  return 0;
}
