// A loaded object read in place through its dynamic section: its symbol table, its import
// relocations, the global-offset-table slots they fill. The shim rewrites some of those slots:
// deep-bound references to libnrt point at the wrappers (loaded_objects.cc), the backend's
// libraries' descriptor calls at the descriptor guard (fd_guard.cc).
//
// Reads memory only: no allocation, no lock, no system call but mprotect in WriteGotSlot. Safe
// inside dl_iterate_phdr's callback, whose lock keeps the object loaded. x86-64 and AArch64
// (both use RELA relocations); elsewhere ReadElfImage finds nothing to rewrite.
#ifndef NRTPROF_SHIM_PRELOAD_ELF_IMAGE_H_
#define NRTPROF_SHIM_PRELOAD_ELF_IMAGE_H_

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

namespace nrtprof::shim {

struct ElfImage {
  uintptr_t base = 0;                        // what the object's addresses are relative to
  uintptr_t begin = UINTPTR_MAX, end = 0;    // its mapped PT_LOAD segments
  uintptr_t relro_begin = 0, relro_end = 0;  // the pages the loader made read-only
  const ElfW(Dyn)* dynamic = nullptr;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  size_t strsz = 0;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  const ElfW(Rela)* jmprel = nullptr;  // PLT relocations
  size_t jmprel_bytes = 0;
  const ElfW(Rela)* rela = nullptr;    // the others
  size_t rela_bytes = 0;
};

// From dl_iterate_phdr's description of an object; false if it has no usable dynamic section.
bool ReadElfImage(const struct dl_phdr_info* info, ElfImage* image)
    __attribute__((visibility("hidden")));
// From a link_map's load address and dynamic section (objects dl_iterate_phdr does not show,
// such as another namespace's). begin, end and RELRO stay unknown.
bool ReadElfImageFromDynamic(uintptr_t base, const ElfW(Dyn)* dynamic, ElfImage* image)
    __attribute__((visibility("hidden")));

// The object's own definition of function `name` (through its GNU or SysV hash table), or null:
// the first of that name whatever its symbol version; an IFUNC (its resolver) is not one.
const ElfW(Sym)* FindDefinedFunction(const ElfImage& image, const char* name)
    __attribute__((visibility("hidden")));

// One relocation that fills a pointer-sized slot with an imported symbol's address: a PLT
// slot (kPlt), a GOT slot (kGot), or an absolute pointer in data without addend (kData).
struct ImportSlot {
  enum Kind { kPlt, kGot, kData } kind;
  const char* name;
  void** slot;
};

// Calls fn(const ImportSlot&) for each import relocation of the object. Inline so that the
// callers' lambdas cost no indirection.
template <typename Fn>
void ForEachImportSlot(const ElfImage& image, Fn&& fn) {
#if defined(__x86_64__)
  constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT,
                     kAbs = R_X86_64_64;
#elif defined(__aarch64__)
  constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT,
                     kAbs = R_AARCH64_ABS64;
#else
  return;
#endif
#if defined(__x86_64__) || defined(__aarch64__)
  const ElfW(Rela)* tables[2] = {image.jmprel, image.rela};
  const size_t bytes[2] = {image.jmprel_bytes, image.rela_bytes};
  for (int t = 0; t < 2; ++t) {
    if (tables[t] == nullptr) continue;
    const size_t n = bytes[t] / sizeof(ElfW(Rela));
    for (size_t i = 0; i < n; ++i) {
      const ElfW(Rela)& r = tables[t][i];
      const uint32_t type = ELF64_R_TYPE(r.r_info);
      ImportSlot::Kind kind;
      if (type == kJumpSlot) {
        kind = ImportSlot::kPlt;
      } else if (type == kGlobDat) {
        kind = ImportSlot::kGot;
      } else if (type == kAbs && r.r_addend == 0) {
        kind = ImportSlot::kData;
      } else {
        continue;
      }
      const ElfW(Sym)& sym = image.symtab[ELF64_R_SYM(r.r_info)];
      if (sym.st_shndx != SHN_UNDEF || sym.st_name == 0 || sym.st_name >= image.strsz) continue;
      fn(ImportSlot{kind, image.strtab + sym.st_name,
                    reinterpret_cast<void**>(image.base + r.r_offset)});
    }
  }
#endif
}

// Stores `value` in `slot` of `image` (atomically, as a pointer), making its page writable
// for the store if the loader made it read-only (RELRO). False if that was refused.
bool WriteGotSlot(const ElfImage& image, void** slot, void* value)
    __attribute__((visibility("hidden")));

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_ELF_IMAGE_H_
