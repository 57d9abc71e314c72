#include "trace/huge_page_allocator.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace nrtprof::daemon {
namespace {

// Blocks freed and kept (each a multiple of kHugePage, 2 MiB-aligned), by address and by size.
// Neighbours are joined as they are freed: a block cut to serve smaller ones (the lanes, cut
// from the raw events') is whole again once they are all freed, for the next process of the
// capture to take whole.
struct Cache {
  std::mutex mu;
  std::map<uintptr_t, size_t> by_address;
  std::multimap<size_t, uintptr_t> by_size;
  size_t bytes = 0;
  int scopes = 0;  // HugePageReuse objects alive
  bool keep_after = false;  // a kKeepAfter scope began since the last release
};

Cache& TheCache() {
  static Cache* const cache = new Cache();
  return *cache;
}

void Forget(Cache& c, uintptr_t block, size_t size) {
  c.by_address.erase(block);
  auto [first, last] = c.by_size.equal_range(size);
  for (auto it = first; it != last; ++it) {
    if (it->second == block) {
      c.by_size.erase(it);
      return;
    }
  }
}

void Keep(Cache& c, uintptr_t block, size_t size) {
  c.by_address.emplace(block, size);
  c.by_size.emplace(size, block);
}

// Keeps a freed block, joined to the kept blocks that touch it.
void KeepJoined(Cache& c, uintptr_t block, size_t size) {
  auto next = c.by_address.lower_bound(block);
  if (next != c.by_address.end() && block + size == next->first) {
    const auto [next_block, next_size] = *next;
    Forget(c, next_block, next_size);
    size += next_size;
  }
  auto after = c.by_address.lower_bound(block);
  if (after != c.by_address.begin()) {
    const auto [prev_block, prev_size] = *std::prev(after);
    if (prev_block + prev_size == block) {
      Forget(c, prev_block, prev_size);
      block = prev_block;
      size += prev_size;
    }
  }
  Keep(c, block, size);
}

// A kept block of at least `bytes`, cut to `bytes` (its tail stays kept); 0 if none.
uintptr_t TakeKept(size_t bytes) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_size.lower_bound(bytes);
  if (it == c.by_size.end()) return 0;
  const size_t size = it->first;
  const uintptr_t block = it->second;
  Forget(c, block, size);
  c.bytes -= bytes;
  if (size > bytes) Keep(c, block + bytes, size - bytes);
  return block;
}

void* MapHugePages(size_t bytes) {
  // Map one huge page more than needed and trim, so the block starts on a 2 MiB boundary.
  void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + bytes + kHugePage;
  if (end > aligned + bytes) {
    munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  }
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a hint: may fail
  return reinterpret_cast<void*>(aligned);
}

// Kept blocks of `bytes` at most in all, largest first, the last one cut to fit (its tail stays
// kept), as (address, size) pairs; taken out of the cache.
std::vector<std::pair<uintptr_t, size_t>> TakeKeptPieces(size_t bytes) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  std::vector<std::pair<uintptr_t, size_t>> pieces;
  while (bytes != 0 && !c.by_size.empty()) {
    const auto largest = std::prev(c.by_size.end());
    const size_t size = largest->first;
    const uintptr_t block = largest->second;
    const size_t take = std::min(size, bytes);
    Forget(c, block, size);
    if (size > take) Keep(c, block + take, size - take);
    c.bytes -= take;
    pieces.emplace_back(block, take);
    bytes -= take;
  }
  return pieces;
}

}  // namespace

void* AllocateHugePages(size_t bytes) {
  if (uintptr_t kept = TakeKept(bytes); kept != 0) return reinterpret_cast<void*>(kept);
  void* block = MapHugePages(bytes);
  if (block == nullptr) return nullptr;
  // No kept block is big enough, but kept blocks together may be (the freed pieces of the
  // process before, not all of them next to each other): their pages are moved to the front of
  // the new mapping, which a vector fills first. mremap moves page tables, not bytes: the pages
  // come along already faulted in and zeroed once, which on the VMs the daemon runs on was most
  // of a process's decoding when each process of a capture took fresh ones.
  uintptr_t at = reinterpret_cast<uintptr_t>(block);
  for (const auto& [piece, size] : TakeKeptPieces(bytes)) {
    void* moved = mremap(reinterpret_cast<void*>(piece), size, size,
                         MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(at));
    // Where it cannot move, the new mapping's own pages serve, and the piece is unmapped.
    if (moved == MAP_FAILED) munmap(reinterpret_cast<void*>(piece), size);
    at += size;
  }
  return block;
}

namespace {

// Keeps [block, block + bytes) if a scope is open and the bound allows; false if not kept.
bool KeepIfInScope(uintptr_t block, size_t bytes) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.scopes == 0 || c.bytes + bytes > kHugePageReuseBytes) return false;
  KeepJoined(c, block, bytes);
  c.bytes += bytes;
  return true;
}

}  // namespace

void FreeHugePages(void* block, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(TheCache().mu);
    if (TheCache().scopes == 0) {
      munmap(block, bytes);
      return;
    }
  }
  // Only the huge pages the block's owner touched are worth keeping: a vector reserved big and
  // filled a little (a process's events, kReservedCaptureBytes) is mostly address space with no
  // pages, and a block cut from it would fault in fresh pages as a new mapping does -- while
  // the bound kept it, pages really freed would be unmapped. So the untouched runs are unmapped
  // now, and the touched ones kept (mincore: resident, in 2 MiB steps).
  const uintptr_t start = reinterpret_cast<uintptr_t>(block);
  constexpr size_t kPage = 4096;
  constexpr size_t kStep = 64 * kHugePage;  // mincore's answer for 128 MiB: 32 KiB
  std::vector<unsigned char> resident(kStep / kPage);
  uintptr_t run = start;   // the run of huge pages of one kind being walked
  bool run_touched = true;
  auto end_run = [&](uintptr_t at) {
    if (at == run) return;
    if (!run_touched || !KeepIfInScope(run, at - run)) {
      munmap(reinterpret_cast<void*>(run), at - run);
    }
    run = at;
  };
  for (uintptr_t at = start; at < start + bytes; at += kStep) {
    const size_t span = std::min<size_t>(kStep, start + bytes - at);
    // Where residency cannot be told (it can on every kernel the daemon runs on), all of it is
    // taken as touched.
    const bool known = mincore(reinterpret_cast<void*>(at), span, resident.data()) == 0;
    for (size_t huge = 0; huge < span; huge += kHugePage) {
      bool touched = !known;
      for (size_t page = huge / kPage; !touched && page < (huge + kHugePage) / kPage; ++page) {
        touched = (resident[page] & 1) != 0;
      }
      if (at + huge == start) run_touched = touched;
      if (touched != run_touched) {
        end_run(at + huge);
        run_touched = touched;
      }
    }
  }
  end_run(start + bytes);
}

// malloc's thresholds (mallopt): while a capture is written, memory malloc serves (the
// correlator's and the lanes' smaller vectors, up to kMallocKeepMmap) comes from its heap, and
// what is freed stays there, so that each process of a capture reuses the pages the one before
// it had faulted in; outside, the values glibc's own dynamic threshold settles on once big
// blocks have been freed (its maximum, and twice that for trimming). ReleaseKeptPages gives the
// heap back (malloc_trim) once the daemon is idle of captures (CollectorCore::ReleaseIdleMemory).
constexpr int kMallocKeepMmap = 32 << 20;  // the largest M_MMAP_THRESHOLD glibc takes
constexpr int kMallocKeepTrim = 1 << 30;
constexpr int kMallocSteadyMmap = 32 << 20;
constexpr int kMallocSteadyTrim = 64 << 20;

HugePageReuse::HugePageReuse(AtEnd at_end) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (at_end == kKeepAfter) c.keep_after = true;
  if (c.scopes++ == 0) {
    mallopt(M_MMAP_THRESHOLD, kMallocKeepMmap);
    mallopt(M_TRIM_THRESHOLD, kMallocKeepTrim);
  }
}

namespace {

// Takes every kept block out of the cache and sets malloc's steady thresholds (c.mu held); the
// caller unmaps the blocks, outside the lock.
std::map<uintptr_t, size_t> TakeAllKept(Cache& c) {
  std::map<uintptr_t, size_t> blocks;
  blocks.swap(c.by_address);
  c.by_size.clear();
  c.bytes = 0;
  c.keep_after = false;
  mallopt(M_TRIM_THRESHOLD, kMallocSteadyTrim);
  mallopt(M_MMAP_THRESHOLD, kMallocSteadyMmap);
  return blocks;
}

void Unmap(const std::map<uintptr_t, size_t>& blocks) {
  for (const auto& [block, size] : blocks) munmap(reinterpret_cast<void*>(block), size);
}

}  // namespace

HugePageReuse::~HugePageReuse() {
  Cache& c = TheCache();
  std::map<uintptr_t, size_t> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (--c.scopes > 0 || c.keep_after) return;
    blocks = TakeAllKept(c);
  }
  Unmap(blocks);
}

bool ReleaseKeptPages() {
  Cache& c = TheCache();
  std::map<uintptr_t, size_t> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.scopes != 0) return false;
    if (!c.keep_after) return true;
    blocks = TakeAllKept(c);
  }
  Unmap(blocks);
  // What the capture's smaller allocations freed: glibc keeps much of it in its arenas
  // otherwise (~170 bytes per event of the capture, measured).
  malloc_trim(0);
  return true;
}

void UseSteadyMallocThresholds() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.scopes != 0 || c.keep_after) return;  // a capture's scope sets its own, and these after
  mallopt(M_TRIM_THRESHOLD, kMallocSteadyTrim);
  mallopt(M_MMAP_THRESHOLD, kMallocSteadyMmap);
}

size_t HugePageReuseBytes() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace nrtprof::daemon
