// The shim's dlsym: programs that dlopen() libnrt themselves (C, Python ctypes with
// RTLD_LOCAL) look its functions up through a library handle, which plain LD_PRELOAD
// interposition never sees (docs/interposition.md). When such a look-up names a
// function the shim wraps, the real address is remembered and the wrapper handed back.
//
// RTLD_DEFAULT and RTLD_NEXT look-ups depend on who calls dlsym (glibc reads the return
// address): they must reach libc's dlsym with the program's return address, not the shim's,
// or another interposer's dlsym(RTLD_NEXT, ...) would find itself. On x86-64 the entry point
// is therefore a few instructions of assembly that tail-jump to libc for those two handles.
//
// Called before the shim is initialised and from inside the dynamic loader's locks: no
// allocation, no lock, nothing that could call dlsym again.
#include <dlfcn.h>

#include "shim/preload/core.h"
#include "shim/preload/interpose.h"
#include "shim/preload/loaded_objects.h"

namespace nrtprof::shim::core {

// libc's dlsym once resolved; read by the assembly below.
extern "C" NRTPROF_HIDDEN void* nrtprof_real_dlsym;
void* nrtprof_real_dlsym = nullptr;

extern "C" NRTPROF_HIDDEN void* nrtprof_resolve_real_dlsym() {
  void* p = __atomic_load_n(&nrtprof_real_dlsym, __ATOMIC_ACQUIRE);
  if (p != nullptr) return p;
  p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  __atomic_store_n(&nrtprof_real_dlsym, p, __ATOMIC_RELEASE);
  return p;
}

DlsymFn RealDlsym() { return reinterpret_cast<DlsymFn>(nrtprof_resolve_real_dlsym()); }

// A look-up through a library handle (anything but RTLD_DEFAULT and RTLD_NEXT).
extern "C" NRTPROF_HIDDEN void* nrtprof_dlsym_by_handle(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  if (real == nullptr) return nullptr;
  void* p = real(handle, name);
  if (DisabledByEnvironment()) return p;
  // A program looks a function up in a module it has just dlopen()ed: if that module was
  // opened RTLD_DEEPBIND its libnrt references bypass the shim until they are redirected.
  ScanLoadedObjects();
  if (p == nullptr) return p;
  const int f = ApiFunctionFromName(name);
  if (f < 0) return p;
  void* wrapper = WrapperAddress(static_cast<ApiFunction>(f));
  // The handle reached the shim itself (dlopen(NULL), or the shim's own handle).
  if (p == wrapper) return p;
  void* expected = nullptr;
  if (!g_real[f].compare_exchange_strong(expected, p, std::memory_order_acq_rel) &&
      expected != p) {
    // A second, different libnrt (another namespace, another file): the one already recorded
    // stays the wrappers' target, and this one is the program's, untouched.
    ReportSecondRuntime(name);
    return p;
  }
  PinObjectOf(p);
  g_nrt_handle.store(handle, std::memory_order_release);
  return wrapper;
}

#if defined(__x86_64__)
// dlsym(handle, name): RTLD_NEXT (-1) and RTLD_DEFAULT (0) tail-jump to libc's dlsym, keeping
// the caller's return address; library handles go to nrtprof_dlsym_by_handle.
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    leaq 1(%rdi), %rax
    cmpq $1, %rax
    ja nrtprof_dlsym_by_handle
    movq nrtprof_real_dlsym(%rip), %rax
    testq %rax, %rax
    jz 1f
    jmp *%rax
1:
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call nrtprof_resolve_real_dlsym
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 2f
    jmp *%rax
2:
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
// Elsewhere RTLD_NEXT and RTLD_DEFAULT look-ups resolve relative to the shim, which is right
// for programs but not for other interposers preloaded after it.
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
    DlsymFn real = RealDlsym();
    return real != nullptr ? real(handle, name) : nullptr;
  }
  return nrtprof_dlsym_by_handle(handle, name);
}
#endif

}  // namespace nrtprof::shim::core
