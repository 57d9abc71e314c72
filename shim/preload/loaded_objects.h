// The shim's view of the objects the dynamic loader has mapped: where the runtime (libnrt) is,
// whichever way the program loaded it, and which references to it bypass the shim.
//
// Plain LD_PRELOAD interposition sees a call only when the caller's reference binds through
// the global scope, where the preloaded shim comes first. That misses two shapes real
// programs have (docs/interposition.md):
//  - libnrt in a local scope: a module dlopen()ed RTLD_LOCAL (Python's default for extension
//    modules and ctypes) has libnrt.so.1 as a dependency. The module's calls still reach the
//    shim, but dlsym(RTLD_NEXT) from the shim cannot see the real functions. FindRuntime finds
//    them in the loaded object that defines them.
//  - RTLD_DEEPBIND: the module's references bind to libnrt directly, never to the shim.
//    ScanLoadedObjects points those references (their GOT slots) at the shim's wrappers.
// A libnrt loaded into another link-map namespace (dlmopen) is reported, not redirected.
//
// Called from the dlsym hook and the first resolution of a runtime function: possibly before
// the shim is configured and inside the loader's locks. No allocation; the scan never blocks on
// a lock of its own (a second scanner skips, and the next look-up scans again).
#ifndef NRTPROF_SHIM_PRELOAD_LOADED_OBJECTS_H_
#define NRTPROF_SHIM_PRELOAD_LOADED_OBJECTS_H_

#include "shim/preload/core.h"

namespace nrtprof::shim::core {

// The address of the runtime function `f` in the first object of the main link-map namespace,
// other than the shim, that defines it; null if none does. The object is pinned (it stays
// mapped for the life of the process) so the address never dangles.
void* FindRuntime(ApiFunction f) NRTPROF_HIDDEN;

// Scans the objects loaded since the last scan: a GOT slot of a wrapped function that bypasses
// the shim (bound to libnrt directly, or not yet bound by a deep-bound object) is pointed at the
// wrapper, and the real address remembered. A libnrt in another namespace is said once on
// stderr. Cheap when nothing was loaded since the last scan.
void ScanLoadedObjects() NRTPROF_HIDDEN;

// In the child of fork(): a scan another thread of the parent was in is forgotten.
void LoadedObjectsAtForkChild() NRTPROF_HIDDEN;

// Keeps the object holding `address` mapped for the life of the process (RTLD_NODELETE
// promoted onto it): a remembered runtime address never dangles, even when the program
// unloads the module that brought libnrt in and loads it again.
void PinObjectOf(const void* address) NRTPROF_HIDDEN;

// Says once on stderr that a second, different libnrt defines `function`: its calls are the
// program's, not recorded.
void ReportSecondRuntime(const char* function) NRTPROF_HIDDEN;

}  // namespace nrtprof::shim::core

#endif  // NRTPROF_SHIM_PRELOAD_LOADED_OBJECTS_H_
