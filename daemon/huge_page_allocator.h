// An allocator for the daemon's big per-capture buffers (a process's ingested events): blocks
// of 2 MiB and more are their own anonymous mappings, 2 MiB-aligned and marked for transparent
// huge pages (madvise MADV_HUGEPAGE), so filling them takes one page fault per 2 MiB instead of
// one per 4 KiB. On the virtual machines the daemon runs on a page fault costs microseconds:
// with 4 KiB pages they were most of ingest's time (bench/README.md, "Daemon load"). Smaller
// blocks come from operator new. Where THP is off the mappings are ordinary pages.
//
// Stateless: any two instances are interchangeable. Thread-safe.
#ifndef NRTPROF_DAEMON_HUGE_PAGE_ALLOCATOR_H_
#define NRTPROF_DAEMON_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace nrtprof::daemon {

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  static constexpr size_t kHugePage = 2 << 20;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    const size_t mapped = RoundUp(bytes);
    // Map one huge page more than needed and trim, so the block starts on a 2 MiB boundary.
    void* raw = mmap(nullptr, mapped + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
    if (aligned > start) munmap(raw, aligned - start);
    const uintptr_t end = start + mapped + kHugePage;
    if (end > aligned + mapped)
      munmap(reinterpret_cast<void*>(aligned + mapped), end - aligned - mapped);
    madvise(reinterpret_cast<void*>(aligned), mapped, MADV_HUGEPAGE);  // a hint: may fail
    return reinterpret_cast<T*>(aligned);
  }

  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {
      ::operator delete(p);
    } else {
      munmap(p, RoundUp(bytes));
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

 private:
  static size_t RoundUp(size_t bytes) { return (bytes + kHugePage - 1) & ~(kHugePage - 1); }
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_HUGE_PAGE_ALLOCATOR_H_
