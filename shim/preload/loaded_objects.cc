#include "shim/preload/loaded_objects.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "shim/preload/elf_image.h"
#include "shim/preload/interpose.h"

namespace nrtprof::shim::core {
namespace {

bool IsShim(const ElfImage& image) {
  const uintptr_t self = reinterpret_cast<uintptr_t>(&g_core);
  return self >= image.begin && self < image.end;
}

// A runtime: an object that defines nrt_init.
bool IsRuntime(const ElfImage& image) {
  return FindDefinedFunction(image, ApiFunctionName(kNrtInit)) != nullptr;
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

bool InMainNamespace(const MainNamespace& ns, const ElfImage& image) {
  if (!ns.complete) return true;  // a process this large: assume so rather than skip it
  for (int i = 0; i < ns.count; ++i) {
    if (ns.dynamic[i] == image.dynamic) return true;
  }
  return false;
}

// ---- FindRuntime ----

struct FindRequest {
  const char* name;
  void* found;
};

// The same without a copy of the list (FindRuntime takes no lock, so that a child forked while
// another thread resolves can resolve too): a walk per object, for a few look-ups a process.
bool InMainNamespaceList(const void* dynamic) {
  int n = 0;
  for (const struct link_map* m = _r_debug.r_map; m != nullptr; m = m->l_next) {
    if (m->l_ld == dynamic || ++n == kMaxObjects) return true;
  }
  return false;
}

int FindDefinition(struct dl_phdr_info* info, size_t, void* data) {
  auto* request = static_cast<FindRequest*>(data);
  ElfImage image;
  if (!ReadElfImage(info, &image) || IsShim(image) || !InMainNamespaceList(image.dynamic)) {
    return 0;
  }
  const ElfW(Sym)* sym = FindDefinedFunction(image, request->name);
  if (sym == nullptr) return 0;
  request->found = reinterpret_cast<void*>(image.base + sym->st_value);
  return 1;
}

// ---- ScanLoadedObjects ----

pthread_mutex_t g_scan_mu = PTHREAD_MUTEX_INITIALIZER;
// What the last scan saw (dlpi_adds, dlpi_subs): nothing to do while they stay the same.
std::atomic<unsigned long long> g_seen_adds{0};
std::atomic<unsigned long long> g_seen_subs{0};

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

void ReportOtherNamespace(const void* dynamic, const char* path) {
  for (const void*& r : g_reported_runtimes) {
    if (r == dynamic) return;
    if (r == nullptr) {
      r = dynamic;
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

// Runtimes in the other link-map namespaces (dlmopen), which dl_iterate_phdr does not show:
// glibc links one r_debug per namespace from the main one's (r_version 2). Called inside
// dl_iterate_phdr's callback, whose lock keeps the lists still.
void ReportOtherNamespaces() {
  if (_r_debug.r_version < 2 || _r_debug.r_map == nullptr) return;
  // The extended record, where link.h says to find it: the program's DT_DEBUG entry.
  const struct r_debug_extended* main = nullptr;
  for (const ElfW(Dyn)* d = _r_debug.r_map->l_ld; d != nullptr && d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_DEBUG) {
      main = reinterpret_cast<const struct r_debug_extended*>(d->d_un.d_ptr);
    }
  }
  if (main == nullptr) return;
  int namespaces = 0;
  for (const struct r_debug_extended* r = main->r_next; r != nullptr && namespaces < 16;
       r = r->r_next, ++namespaces) {
    int objects = 0;
    for (const struct link_map* m = r->base.r_map; m != nullptr && objects < kMaxObjects;
         m = m->l_next, ++objects) {
      ElfImage image;
      if (ReadElfImageFromDynamic(m->l_addr, m->l_ld, &image) && IsRuntime(image)) {
        ReportOtherNamespace(m->l_ld, m->l_name);
      }
    }
  }
}

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

bool InRuntime(const ScanState& s, uintptr_t value) {
  for (int i = 0; i < s.runtime_count; ++i) {
    if (value >= s.runtimes[i].begin && value < s.runtimes[i].end) return true;
  }
  return false;
}

// Points the object's references to wrapped functions that bypass the shim at the wrappers.
void RedirectReferences(const ElfImage& image, ScanState* s) {
  ForEachImportSlot(image, [&](const ImportSlot& import) {
    const char* name = import.name;
    if (name[0] != 'n' || name[1] != 'r' || name[2] != 't' || name[3] != '_') return;
    const int f = ApiFunctionFromName(name);
    if (f < 0) return;
    void* wrapper = WrapperAddress(static_cast<ApiFunction>(f));
    void* value = __atomic_load_n(import.slot, __ATOMIC_ACQUIRE);
    const uintptr_t v = reinterpret_cast<uintptr_t>(value);
    if (value == wrapper || value == nullptr) return;  // through the shim, or weak and absent
    if (import.kind == ImportSlot::kPlt && v >= image.begin && v < image.end) {
      // Not bound yet (lazy binding): it would bind to the shim through the global scope, or
      // to libnrt directly if the object was opened RTLD_DEEPBIND. The wrapper is right for
      // both.
    } else if (InRuntime(*s, v)) {
      // Bound to libnrt directly (RTLD_DEEPBIND).
      void* expected = nullptr;
      if (!g_real[f].compare_exchange_strong(expected, value, std::memory_order_acq_rel) &&
          expected != value) {
        ReportSecondRuntime(name);
        return;
      }
      s->remembered = value;
    } else {
      return;  // bound to something else the program chose (another interposer)
    }
    WriteGotSlot(image, import.slot, wrapper);  // refused: the calls stay unrecorded
  });
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
  ElfImage image;
  if (!ReadElfImage(info, &image) || IsShim(image) || !IsRuntime(image)) return 0;
  if (!InMainNamespace(s->ns, image)) {
    ReportOtherNamespace(image.dynamic, info->dlpi_name);
    return 0;
  }
  if (s->runtime_count < 8) s->runtimes[s->runtime_count++] = {image.begin, image.end};
  return 0;
}

// Pass 2: the references of objects not scanned before.
int RedirectNewObjects(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<ScanState*>(data);
  ElfImage image;
  if (!ReadElfImage(info, &image) || IsShim(image) || IsRuntime(image)) return 0;
  if (!InMainNamespace(s->ns, image) || SeenBefore(image.dynamic)) return 0;
  RedirectReferences(image, s);
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

void* FindRuntime(ApiFunction f) {
  FindRequest request{ApiFunctionName(f), nullptr};
  dl_iterate_phdr(&FindDefinition, &request);
  if (request.found != nullptr) PinObjectOf(request.found);
  return request.found;
}

void LoadedObjectsAtForkChild() { pthread_mutex_init(&g_scan_mu, nullptr); }

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
  dl_iterate_phdr(&RedirectNewObjects, &state);
  if (state.remembered != nullptr) PinObjectOf(state.remembered);
  g_seen_adds.store(state.adds, std::memory_order_release);
  g_seen_subs.store(state.subs, std::memory_order_release);
  pthread_mutex_unlock(&g_scan_mu);
}

}  // namespace nrtprof::shim::core
