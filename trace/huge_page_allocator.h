// An allocator for the daemon's big per-capture buffers (a process's ingested events, the
// Trace's events, the lanes' slices; CaptureVector below): blocks of 2 MiB and more are
// anonymous mappings, 2 MiB-aligned and marked for transparent huge pages (madvise
// MADV_HUGEPAGE), so filling them takes one page fault per 2 MiB instead of one per 4 KiB. On
// the virtual machines the daemon runs on a page fault costs microseconds: with 4 KiB pages
// they were most of ingest's time (bench/README.md, "Daemon load") and a third of a capture's
// correlating and writing (BENCHMARKS.md, "The flight recorder"). Smaller blocks come from
// operator new. Where THP is off the mappings are ordinary pages.
//
// While a capture is written (a HugePageReuse in scope), a big block freed is kept, joined to
// the kept blocks next to it, for the next big block of the same size or smaller, so that the
// later phases of the capture (its Trace, its lanes) and its later processes reuse the pages its
// earlier ones (the raw events, the process before) had the kernel fault in and zero --
// zeroing fresh pages was the largest single cost left in writing a capture. A big block that
// no kept block is big enough for is a new mapping with kept blocks moved into its front
// (mremap: their pages, not copies), so pieces kept apart still serve the next process's events. Only the huge
// pages of a freed block that were touched are kept (mincore); its untouched rest, address
// space without pages, is unmapped, since reusing it would cost what a new mapping does. malloc
// is told to keep what is freed meanwhile too (mallopt; huge_page_allocator.cc). When the last
// such scope ends, what is kept is unmapped -- unless a scope asked for it to stay
// (HugePageReuse::kKeepAfter: a standing daemon's next capture, which reuses it rather than
// faulting in and zeroing as many fresh pages), in which case it stays, and malloc keeps what
// it freed, until ReleaseKeptPages(). Outside any scope (ingest, whose vectors only grow) a
// freed block is unmapped at once.
//
// The allocator is stateless (any two instances are interchangeable); the kept blocks are one
// list per process, behind a mutex. Thread-safe.
#ifndef NRTPROF_TRACE_HUGE_PAGE_ALLOCATOR_H_
#define NRTPROF_TRACE_HUGE_PAGE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace nrtprof::daemon {

inline constexpr size_t kHugePage = 2 << 20;

inline size_t RoundUpToHugePages(size_t bytes) {
  return (bytes + kHugePage - 1) & ~(kHugePage - 1);
}

// `bytes` (a multiple of kHugePage) at a 2 MiB boundary: a block kept from an earlier free, or
// a new mapping. Null if the system has no memory.
void* AllocateHugePages(size_t bytes);
// Keeps the block for a later AllocateHugePages while a HugePageReuse is in scope (up to
// kHugePageReuseBytes kept), else unmaps it.
void FreeHugePages(void* block, size_t bytes);
// What is kept now.
size_t HugePageReuseBytes();

// Sets malloc's thresholds to the steady values a HugePageReuse leaves behind, for a daemon
// from its start: glibc's own start values (its mmap threshold at 128 KiB, rising with what is
// freed) had a standing daemon map, fault in and give back (madvise) a batch's buffers of a few
// hundred KiB on every batch until the first capture set these.
void UseSteadyMallocThresholds();

// Gives back what kKeepAfter scopes left kept: unmaps the kept blocks, returns malloc's free
// heap to the system (malloc_trim) and sets the steady thresholds. Returns false, having done
// nothing, while a scope is alive (call again later); true once nothing is kept.
bool ReleaseKeptPages();

// At most this much freed memory is kept for reuse.
inline constexpr size_t kHugePageReuseBytes = size_t{2} << 30;

// Big blocks freed while one of these is alive are kept for reuse; when the last one ends they
// are unmapped, unless a kKeepAfter one was made since the last ReleaseKeptPages(). Scopes may
// overlap (captures written at once on several threads).
class HugePageReuse {
 public:
  enum AtEnd {
    kRelease,    // what is kept goes when the last scope ends (unless a kKeepAfter one asked)
    kKeepAfter,  // what is kept, and malloc's free heap, stay until ReleaseKeptPages()
  };
  explicit HugePageReuse(AtEnd at_end = kRelease);
  ~HugePageReuse();
  HugePageReuse(const HugePageReuse&) = delete;
  HugePageReuse& operator=(const HugePageReuse&) = delete;
};

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    void* block = AllocateHugePages(RoundUpToHugePages(bytes));
    if (block == nullptr) throw std::bad_alloc();
    return static_cast<T*>(block);
  }

  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {
      ::operator delete(p);
    } else {
      FreeHugePages(p, RoundUpToHugePages(bytes));
    }
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

// A vector of millions of a capture's records.
template <typename T>
using CaptureVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_HUGE_PAGE_ALLOCATOR_H_
