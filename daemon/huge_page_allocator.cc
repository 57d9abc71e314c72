#include "daemon/huge_page_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace nrtprof::daemon {
namespace {

// Blocks freed and kept, by size (each a multiple of kHugePage, 2 MiB-aligned).
struct Cache {
  std::mutex mu;
  std::multimap<size_t, uintptr_t> blocks;
  size_t bytes = 0;
  int scopes = 0;  // HugePageReuse objects alive
};

Cache& TheCache() {
  static Cache* const cache = new Cache();
  return *cache;
}

// A kept block of at least `bytes`, cut to `bytes` (its tail stays kept); 0 if none.
uintptr_t TakeKept(size_t bytes) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.blocks.lower_bound(bytes);
  if (it == c.blocks.end()) return 0;
  const size_t size = it->first;
  const uintptr_t block = it->second;
  c.blocks.erase(it);
  c.bytes -= bytes;
  if (size > bytes) c.blocks.emplace(size - bytes, block + bytes);
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

}  // namespace

void* AllocateHugePages(size_t bytes) {
  if (uintptr_t kept = TakeKept(bytes); kept != 0) return reinterpret_cast<void*>(kept);
  return MapHugePages(bytes);
}

void FreeHugePages(void* block, size_t bytes) {
  Cache& c = TheCache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.scopes > 0 && c.bytes + bytes <= kHugePageReuseBytes) {
      c.blocks.emplace(bytes, reinterpret_cast<uintptr_t>(block));
      c.bytes += bytes;
      return;
    }
  }
  munmap(block, bytes);
}

HugePageReuse::HugePageReuse() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.scopes;
}

HugePageReuse::~HugePageReuse() {
  Cache& c = TheCache();
  std::multimap<size_t, uintptr_t> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (--c.scopes > 0) return;
    blocks.swap(c.blocks);
    c.bytes = 0;
  }
  for (const auto& [size, block] : blocks) munmap(reinterpret_cast<void*>(block), size);
}

size_t HugePageReuseBytes() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace nrtprof::daemon
