// An allocator for the daemon's big per-capture buffers (a process's ingested events, the
// Trace's events, the lanes' slices; CaptureVector below): blocks of 2 MiB and more are
// anonymous mappings, 2 MiB-aligned and marked for transparent huge pages (madvise
// MADV_HUGEPAGE), so filling them takes one page fault per 2 MiB instead of one per 4 KiB. On
// the virtual machines the daemon runs on a page fault costs microseconds: with 4 KiB pages
// they were most of ingest's time (bench/README.md, "Daemon load") and a third of a capture's
// correlating and writing (BENCHMARKS.md, "The flight recorder"). Smaller blocks come from
// operator new. Where THP is off the mappings are ordinary pages.
//
// A big block freed is kept (HugePageCache) for the next big block of the same size or
// smaller, so that the later phases of a capture (its Trace, its lanes) reuse the pages its
// earlier ones (the raw events) had the kernel fault in and zero -- zeroing fresh pages was
// the largest single cost left in writing a capture. ReleaseHugePageCache() unmaps what is
// kept: the daemon calls it when a capture is written.
//
// The allocator is stateless (any two instances are interchangeable); the cache is one per
// process, behind a mutex. Thread-safe.
#ifndef NRTPROF_DAEMON_HUGE_PAGE_ALLOCATOR_H_
#define NRTPROF_DAEMON_HUGE_PAGE_ALLOCATOR_H_

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
// Keeps the block for a later AllocateHugePages (up to kHugePageCacheBytes kept), else unmaps it.
void FreeHugePages(void* block, size_t bytes);
// Unmaps every block kept. Returns the bytes given back.
size_t ReleaseHugePageCache();
// What is kept now.
size_t HugePageCacheBytes();

// At most this much freed memory is kept for reuse between two ReleaseHugePageCache().
inline constexpr size_t kHugePageCacheBytes = size_t{4} << 30;

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

#endif  // NRTPROF_DAEMON_HUGE_PAGE_ALLOCATOR_H_
