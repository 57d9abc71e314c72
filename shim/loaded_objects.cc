#include "shim/loaded_objects.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim/interpose.h"

namespace nrtprof::shim::core {
namespace {

#if defined(__x86_64__)
constexpr unsigned kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr unsigned kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr unsigned kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr unsigned kGlobDat = R_AARCH64_GLOB_DAT;
#else
#error "loaded_objects.cc knows the relocations of x86-64 and AArch64 only"
#endif

#if __ELF_NATIVE_CLASS == 64
#define NRTPROF_ELF_R_SYM ELF64_R_SYM
#define NRTPROF_ELF_R_TYPE ELF64_R_TYPE
#define NRTPROF_ELF_ST_TYPE ELF64_ST_TYPE
#else
#define NRTPROF_ELF_R_SYM ELF32_R_SYM
#define NRTPROF_ELF_R_TYPE ELF32_R_TYPE
#define NRTPROF_ELF_ST_TYPE ELF32_ST_TYPE
#endif

// What one loaded object's dynamic section says, as absolute addresses.
struct DynamicInfo {
  uintptr_t base = 0;  // dlpi_addr: what the object's addresses are relative to
  uintptr_t begin = UINTPTR_MAX, end = 0;  // its mapped PT_LOAD segments
  uintptr_t relro_begin = 0, relro_end = 0;  // the pages the loader made read-only
  const ElfW(Dyn)* dynamic = nullptr;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  size_t strsz = 0;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  const ElfW(Rela)* jmprel = nullptr;
  size_t jmprel_bytes = 0;
  const ElfW(Rela)* rela = nullptr;
  size_t rela_bytes = 0;
};

uintptr_t PageSize() {
  static uintptr_t size = 0;
  if (size == 0) size = getauxval(AT_PAGESZ);
  return size != 0 ? size : 4096;
}

// The loader rewrites most objects' dynamic entries to absolute addresses; some (the vDSO,
// objects with a read-only dynamic section) keep them relative to the load address.
template <typename T>
const T* DynamicPointer(ElfW(Addr) value, uintptr_t base) {
  return reinterpret_cast<const T*>(value < base ? base + value : value);
}

bool ReadDynamicSection(DynamicInfo* d);

bool ReadDynamic(const struct dl_phdr_info* info, DynamicInfo* d) {
  d->base = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t b = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      if (b < d->begin) d->begin = b;
      if (b + ph.p_memsz > d->end) d->end = b + ph.p_memsz;
    } else if (ph.p_type == PT_DYNAMIC) {
      d->dynamic = reinterpret_cast<const ElfW(Dyn)*>(b);
    } else if (ph.p_type == PT_GNU_RELRO) {
      // As the loader protects it: whole pages, the last partial one left writable.
      d->relro_begin = b & ~(PageSize() - 1);
      d->relro_end = (b + ph.p_memsz) & ~(PageSize() - 1);
    }
  }
  return ReadDynamicSection(d);
}

// The symbol and relocation tables of d->dynamic (d->base set).
bool ReadDynamicSection(DynamicInfo* d) {
  if (d->dynamic == nullptr) return false;
  uint64_t pltrel = DT_RELA;
  for (const ElfW(Dyn)* e = d->dynamic; e->d_tag != DT_NULL; ++e) {
    switch (e->d_tag) {
      case DT_SYMTAB: d->symtab = DynamicPointer<ElfW(Sym)>(e->d_un.d_ptr, d->base); break;
      case DT_STRTAB: d->strtab = DynamicPointer<char>(e->d_un.d_ptr, d->base); break;
      case DT_STRSZ: d->strsz = e->d_un.d_val; break;
      case DT_GNU_HASH: d->gnu_hash = DynamicPointer<uint32_t>(e->d_un.d_ptr, d->base); break;
      case DT_HASH: d->sysv_hash = DynamicPointer<uint32_t>(e->d_un.d_ptr, d->base); break;
      case DT_JMPREL: d->jmprel = DynamicPointer<ElfW(Rela)>(e->d_un.d_ptr, d->base); break;
      case DT_PLTRELSZ: d->jmprel_bytes = e->d_un.d_val; break;
      case DT_PLTREL: pltrel = e->d_un.d_val; break;
      case DT_RELA: d->rela = DynamicPointer<ElfW(Rela)>(e->d_un.d_ptr, d->base); break;
      case DT_RELASZ: d->rela_bytes = e->d_un.d_val; break;
      default: break;
    }
  }
  // Both architectures here use RELA; an object with REL PLT relocations is left alone.
  if (pltrel != DT_RELA) d->jmprel = nullptr;
  return d->symtab != nullptr && d->strtab != nullptr;
}

const char* SymbolName(const DynamicInfo& d, const ElfW(Sym)& sym) {
  return sym.st_name < d.strsz ? d.strtab + sym.st_name : "";
}

bool Defined(const ElfW(Sym)& sym) {
  const unsigned type = NRTPROF_ELF_ST_TYPE(sym.st_info);
  return sym.st_shndx != SHN_UNDEF && sym.st_value != 0 && type == STT_FUNC;
}

// The object's own definition of `name` through its hash table, or null.
const ElfW(Sym)* LookupDefined(const DynamicInfo& d, const char* name) {
  if (d.gnu_hash != nullptr) {
    uint32_t h = 5381;
    for (const char* c = name; *c != '\0'; ++c) h = h * 33 + static_cast<unsigned char>(*c);
    const uint32_t nbuckets = d.gnu_hash[0], symoffset = d.gnu_hash[1];
    const uint32_t bloom_size = d.gnu_hash[2], bloom_shift = d.gnu_hash[3];
    if (nbuckets == 0 || bloom_size == 0) return nullptr;
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(d.gnu_hash + 4);
    constexpr uint32_t kBits = sizeof(ElfW(Addr)) * 8;
    const ElfW(Addr) word = bloom[(h / kBits) % bloom_size];
    const ElfW(Addr) mask = (ElfW(Addr){1} << (h % kBits)) |
                            (ElfW(Addr){1} << ((h >> bloom_shift) % kBits));
    if ((word & mask) != mask) return nullptr;
    const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
    const uint32_t* chain = buckets + nbuckets;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset) return nullptr;
    for (;; ++i) {
      const uint32_t h2 = chain[i - symoffset];
      if ((h | 1) == (h2 | 1) && strcmp(name, SymbolName(d, d.symtab[i])) == 0) {
        return Defined(d.symtab[i]) ? &d.symtab[i] : nullptr;
      }
      if ((h2 & 1) != 0) return nullptr;
    }
  }
  if (d.sysv_hash != nullptr) {
    uint32_t h = 0;
    for (const char* c = name; *c != '\0'; ++c) {
      h = (h << 4) + static_cast<unsigned char>(*c);
      const uint32_t g = h & 0xf0000000u;
      if (g != 0) h ^= g >> 24;
      h &= ~g;
    }
    const uint32_t nbucket = d.sysv_hash[0];
    if (nbucket == 0) return nullptr;
    const uint32_t* bucket = d.sysv_hash + 2;
    const uint32_t* chain = bucket + nbucket;
    for (uint32_t i = bucket[h % nbucket]; i != 0; i = chain[i]) {
      if (strcmp(name, SymbolName(d, d.symtab[i])) == 0) {
        return Defined(d.symtab[i]) ? &d.symtab[i] : nullptr;
      }
    }
  }
  return nullptr;
}

bool IsShim(const DynamicInfo& d) {
  const uintptr_t self = reinterpret_cast<uintptr_t>(&g_core);
  return self >= d.begin && self < d.end;
}

// A runtime: an object that defines nrt_init.
bool IsRuntime(const DynamicInfo& d) {
  return LookupDefined(d, ApiFunctionName(kNrtInit)) != nullptr;
}

// The main namespace's objects, by their dynamic section's address (link_map::l_ld). Read
// inside dl_iterate_phdr's callback, whose lock keeps the loader from changing the list.
constexpr int kMaxObjects = 4096;
struct MainNamespace {
  const void* dynamic[kMaxObjects];
  int count = 0;
  bool complete = true;
};

void ReadMainNamespace(MainNamespace* ns) {
  ns->count = 0;
  ns->complete = true;
  for (const struct link_map* m = _r_debug.r_map; m != nullptr; m = m->l_next) {
    if (ns->count == kMaxObjects) {
      ns->complete = false;
      return;
    }
    ns->dynamic[ns->count++] = m->l_ld;
  }
}

bool InMainNamespace(const MainNamespace& ns, const DynamicInfo& d) {
  if (!ns.complete) return true;  // a process this large: assume so rather than skip it
  for (int i = 0; i < ns.count; ++i) {
    if (ns.dynamic[i] == d.dynamic) return true;
  }
  return false;
}

// Keeps the object that holds `address` mapped for the life of the process (RTLD_NODELETE
// promoted onto the loaded object), so that a remembered runtime address never dangles when
// the program unloads the module that brought libnrt in.
}  // namespace

void PinObjectOf(const void* address) {
  static std::atomic<uintptr_t> pinned[8];
  Dl_info info;
  if (dladdr(address, &info) == 0 || info.dli_fbase == nullptr) return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  for (auto& p : pinned) {
    if (p.load(std::memory_order_acquire) == base) return;
  }
  if (info.dli_fname == nullptr || info.dli_fname[0] == '\0') return;  // the program itself
  if (dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE) == nullptr) {
    dlerror();  // the program's next dlerror() is its own
    return;
  }
  for (auto& p : pinned) {
    uintptr_t expected = 0;
    if (p.compare_exchange_strong(expected, base, std::memory_order_acq_rel)) return;
  }
}

namespace {

// ---- FindRuntime ----

struct FindRequest {
  const char* name;
  MainNamespace* ns;
  void* found;
};

int FindDefinition(struct dl_phdr_info* info, size_t, void* data) {
  auto* request = static_cast<FindRequest*>(data);
  if (request->ns->count == 0) ReadMainNamespace(request->ns);
  DynamicInfo d;
  if (!ReadDynamic(info, &d) || IsShim(d) || !InMainNamespace(*request->ns, d)) return 0;
  const ElfW(Sym)* sym = LookupDefined(d, request->name);
  if (sym == nullptr) return 0;
  request->found = reinterpret_cast<void*>(d.base + sym->st_value);
  return 1;
}

// ---- ScanLoadedObjects ----

pthread_mutex_t g_scan_mu = PTHREAD_MUTEX_INITIALIZER;
// What the last scan saw (dlpi_adds, dlpi_subs): nothing to do while they stay the same.
std::atomic<unsigned long long> g_seen_adds{0};
std::atomic<unsigned long long> g_seen_subs{0};
std::atomic<unsigned long> g_redirected{0};

// Objects already scanned (by l_ld), an open-addressing set; cleared when objects unload.
constexpr int kScannedSlots = 8192;
const void* g_scanned[kScannedSlots];  // guarded by g_scan_mu
int g_scanned_count = 0;               // guarded by g_scan_mu

// True if `dynamic` was scanned before; else remembers it (while there is room).
bool SeenBefore(const void* dynamic) {
  uintptr_t h = reinterpret_cast<uintptr_t>(dynamic) * 0x9E3779B97F4A7C15ull;
  for (int probe = 0; probe < kScannedSlots; ++probe) {
    const void*& slot = g_scanned[(h >> 51) % kScannedSlots];
    if (slot == dynamic) return true;
    if (slot == nullptr) {
      if (g_scanned_count >= kScannedSlots / 2) return false;  // full: scan again, harmless
      slot = dynamic;
      ++g_scanned_count;
      return false;
    }
    h += uintptr_t{1} << 51;
  }
  return false;
}

// Runtimes outside the main namespace already reported, by their dynamic section.
const void* g_reported_runtimes[16];  // guarded by g_scan_mu

void ReportOtherNamespace(const DynamicInfo& d, const char* path) {
  for (const void*& r : g_reported_runtimes) {
    if (r == d.dynamic) return;
    if (r == nullptr) {
      r = d.dynamic;
      char line[kNoticeBytes + 16];
      snprintf(line, sizeof(line),
               "nrtprof: %s is loaded into a separate link-map namespace (dlmopen); its "
               "libnrt calls there are not recorded\n",
               path != nullptr && path[0] != '\0' ? path : "a libnrt");
      SayNotice(line);
      return;
    }
  }
}

}  // namespace

void ReportSecondRuntime(const char* function) {
  static std::atomic<int> said{0};
  if (said.exchange(1, std::memory_order_relaxed) != 0) return;
  char line[256];
  snprintf(line, sizeof(line),
           "nrtprof: a second libnrt is loaded (its %s differs from the one recorded); calls "
           "to it are not recorded\n",
           function);
  SayNotice(line);
}

namespace {

// Runtimes of the main namespace seen by the current scan: where their code is.
struct RuntimeRange {
  uintptr_t begin, end;
};

struct ScanState {
  MainNamespace ns;
  RuntimeRange runtimes[8];
  int runtime_count = 0;
  unsigned long long adds = 0, subs = 0;
  // A runtime address this scan remembered as real: its object is pinned after the scan.
  const void* remembered = nullptr;
};

// Points one GOT slot at `wrapper`: the loader made it read-only if it lies in RELRO.
bool WriteSlot(const DynamicInfo& d, void** slot, void* wrapper) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(slot);
  const uintptr_t page = at & ~(PageSize() - 1);
  const bool protect = at >= d.relro_begin && at < d.relro_end;
  if (protect && mprotect(reinterpret_cast<void*>(page), PageSize(), PROT_READ | PROT_WRITE) != 0) {
    return false;
  }
  __atomic_store_n(slot, wrapper, __ATOMIC_RELEASE);
  if (protect) mprotect(reinterpret_cast<void*>(page), PageSize(), PROT_READ);
  return true;
}

bool InRuntime(const ScanState& s, uintptr_t value) {
  for (int i = 0; i < s.runtime_count; ++i) {
    if (value >= s.runtimes[i].begin && value < s.runtimes[i].end) return true;
  }
  return false;
}

void RedirectRelocations(const DynamicInfo& d, const ElfW(Rela)* relocs, size_t bytes,
                         ScanState* s) {
  if (relocs == nullptr) return;
  const size_t n = bytes / sizeof(ElfW(Rela));
  for (size_t i = 0; i < n; ++i) {
    const unsigned type = NRTPROF_ELF_R_TYPE(relocs[i].r_info);
    if (type != kJumpSlot && type != kGlobDat) continue;
    const ElfW(Sym)& sym = d.symtab[NRTPROF_ELF_R_SYM(relocs[i].r_info)];
    const char* name = SymbolName(d, sym);
    if (name[0] != 'n' || name[1] != 'r' || name[2] != 't' || name[3] != '_') continue;
    const int f = ApiFunctionFromName(name);
    if (f < 0) continue;
    void* wrapper = WrapperAddress(static_cast<ApiFunction>(f));
    auto** slot = reinterpret_cast<void**>(d.base + relocs[i].r_offset);
    void* value = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    const uintptr_t v = reinterpret_cast<uintptr_t>(value);
    if (value == wrapper || value == nullptr) continue;  // through the shim, or weak and absent
    if (type == kJumpSlot && v >= d.begin && v < d.end) {
      // Not bound yet (lazy binding): it would bind to the shim through the global scope, or to
      // libnrt directly if the object was opened RTLD_DEEPBIND. The wrapper is right for both.
    } else if (InRuntime(*s, v)) {
      // Bound to libnrt directly (RTLD_DEEPBIND, or -Bsymbolic-like direct binding).
      void* expected = nullptr;
      if (!g_real[f].compare_exchange_strong(expected, value, std::memory_order_acq_rel) &&
          expected != value) {
        ReportSecondRuntime(name);
        continue;
      }
      s->remembered = value;
    } else {
      continue;  // bound to something else the program chose (another interposer)
    }
    if (WriteSlot(d, slot, wrapper)) g_redirected.fetch_add(1, std::memory_order_relaxed);
  }
}

// Runtimes in the other link-map namespaces (dlmopen), which dl_iterate_phdr does not show:
// glibc links one r_debug per namespace from the main one's (r_version 2). Called inside
// dl_iterate_phdr's callback, whose lock keeps the lists still.
void ReportOtherNamespaces() {
  if (_r_debug.r_version < 2) return;
  const auto* main = reinterpret_cast<const struct r_debug_extended*>(&_r_debug);
  int namespaces = 0;
  for (const struct r_debug_extended* r = main->r_next; r != nullptr && namespaces < 16;
       r = r->r_next, ++namespaces) {
    int objects = 0;
    for (const struct link_map* m = r->base.r_map; m != nullptr && objects < kMaxObjects;
         m = m->l_next, ++objects) {
      DynamicInfo d;
      d.base = m->l_addr;
      d.dynamic = m->l_ld;
      if (ReadDynamicSection(&d) && IsRuntime(d)) ReportOtherNamespace(d, m->l_name);
    }
  }
}

// Pass 1: where the main namespace's runtimes are; runtimes elsewhere are reported.
int FindRuntimes(struct dl_phdr_info* info, size_t size, void* data) {
  auto* s = static_cast<ScanState*>(data);
  if (s->ns.count == 0) {
    ReadMainNamespace(&s->ns);
    ReportOtherNamespaces();
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
      s->adds = info->dlpi_adds;
      s->subs = info->dlpi_subs;
    }
  }
  DynamicInfo d;
  if (!ReadDynamic(info, &d) || IsShim(d) || !IsRuntime(d)) return 0;
  if (!InMainNamespace(s->ns, d)) {
    ReportOtherNamespace(d, info->dlpi_name);
    return 0;
  }
  if (s->runtime_count < 8) s->runtimes[s->runtime_count++] = {d.begin, d.end};
  return 0;
}

// Pass 2: the references of objects not scanned before.
int RedirectReferences(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<ScanState*>(data);
  DynamicInfo d;
  if (!ReadDynamic(info, &d) || IsShim(d) || IsRuntime(d)) return 0;
  if (!InMainNamespace(s->ns, d) || SeenBefore(d.dynamic)) return 0;
  RedirectRelocations(d, d.jmprel, d.jmprel_bytes, s);
  RedirectRelocations(d, d.rela, d.rela_bytes, s);
  return 0;
}

int ReadCounters(struct dl_phdr_info* info, size_t size, void* data) {
  auto* counters = static_cast<unsigned long long*>(data);
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    counters[0] = info->dlpi_adds;
    counters[1] = info->dlpi_subs;
  }
  return 1;
}

}  // namespace

void* FindRuntime(ApiFunction f) {
  static MainNamespace ns;  // large: not on the caller's stack
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&mu);
  ns.count = 0;
  FindRequest request{ApiFunctionName(f), &ns, nullptr};
  dl_iterate_phdr(&FindDefinition, &request);
  pthread_mutex_unlock(&mu);
  if (request.found != nullptr) PinObjectOf(request.found);
  return request.found;
}

void ScanLoadedObjects() {
  unsigned long long counters[2] = {0, 0};
  dl_iterate_phdr(&ReadCounters, counters);
  if (counters[0] == g_seen_adds.load(std::memory_order_acquire) &&
      counters[1] == g_seen_subs.load(std::memory_order_acquire)) {
    return;
  }
  // Never wait: the caller may hold the loader's lock while another scanner waits for it.
  if (pthread_mutex_trylock(&g_scan_mu) != 0) return;
  static ScanState state;  // large: not on the caller's stack; guarded by g_scan_mu
  state.ns.count = 0;
  state.runtime_count = 0;
  state.remembered = nullptr;
  dl_iterate_phdr(&FindRuntimes, &state);
  if (state.subs != g_seen_subs.load(std::memory_order_relaxed)) {
    // Objects were unloaded: an address in the set may now belong to a new object.
    memset(g_scanned, 0, sizeof(g_scanned));
    g_scanned_count = 0;
  }
  dl_iterate_phdr(&RedirectReferences, &state);
  if (state.remembered != nullptr) PinObjectOf(state.remembered);
  g_seen_adds.store(state.adds, std::memory_order_release);
  g_seen_subs.store(state.subs, std::memory_order_release);
  pthread_mutex_unlock(&g_scan_mu);
}

unsigned long RedirectedReferences() { return g_redirected.load(std::memory_order_relaxed); }

}  // namespace nrtprof::shim::core
