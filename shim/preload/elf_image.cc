#include "shim/preload/elf_image.h"

#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

namespace nrtprof::shim {
namespace {

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

const char* SymbolName(const ElfImage& image, const ElfW(Sym)& sym) {
  return sym.st_name < image.strsz ? image.strtab + sym.st_name : "";
}

const ElfW(Sym)* IfFunction(const ElfW(Sym)& sym) {
  const bool function = ELF64_ST_TYPE(sym.st_info) == STT_FUNC;
  return sym.st_shndx != SHN_UNDEF && sym.st_value != 0 && function ? &sym : nullptr;
}

}  // namespace

bool ReadElfImage(const struct dl_phdr_info* info, ElfImage* image) {
  image->base = info->dlpi_addr;
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t b = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      if (b < image->begin) image->begin = b;
      if (b + ph.p_memsz > image->end) image->end = b + ph.p_memsz;
    } else if (ph.p_type == PT_DYNAMIC) {
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(b);
    } else if (ph.p_type == PT_GNU_RELRO) {
      // As the loader protects it: whole pages, the last partial one left writable.
      image->relro_begin = b & ~(PageSize() - 1);
      image->relro_end = (b + ph.p_memsz) & ~(PageSize() - 1);
    }
  }
  return ReadElfImageFromDynamic(image->base, dynamic, image);
}

bool ReadElfImageFromDynamic(uintptr_t base, const ElfW(Dyn)* dynamic, ElfImage* image) {
  image->base = base;
  image->dynamic = dynamic;
  if (dynamic == nullptr) return false;
  uint64_t pltrel = DT_RELA;
  for (const ElfW(Dyn)* e = dynamic; e->d_tag != DT_NULL; ++e) {
    const ElfW(Addr) p = e->d_un.d_ptr;
    switch (e->d_tag) {
      case DT_SYMTAB: image->symtab = DynamicPointer<ElfW(Sym)>(p, base); break;
      case DT_STRTAB: image->strtab = DynamicPointer<char>(p, base); break;
      case DT_STRSZ: image->strsz = e->d_un.d_val; break;
      case DT_GNU_HASH: image->gnu_hash = DynamicPointer<uint32_t>(p, base); break;
      case DT_HASH: image->sysv_hash = DynamicPointer<uint32_t>(p, base); break;
      case DT_JMPREL: image->jmprel = DynamicPointer<ElfW(Rela)>(p, base); break;
      case DT_PLTRELSZ: image->jmprel_bytes = e->d_un.d_val; break;
      case DT_PLTREL: pltrel = e->d_un.d_val; break;
      case DT_RELA: image->rela = DynamicPointer<ElfW(Rela)>(p, base); break;
      case DT_RELASZ: image->rela_bytes = e->d_un.d_val; break;
      default: break;
    }
  }
  // Both architectures here use RELA; PLT relocations of another kind are left alone.
  if (pltrel != DT_RELA) image->jmprel = nullptr;
  return image->symtab != nullptr && image->strtab != nullptr;
}

const ElfW(Sym)* FindDefinedFunction(const ElfImage& image, const char* name) {
  if (image.gnu_hash != nullptr) {
    uint32_t h = 5381;
    for (const char* c = name; *c != '\0'; ++c) h = h * 33 + static_cast<unsigned char>(*c);
    const uint32_t nbuckets = image.gnu_hash[0], symoffset = image.gnu_hash[1];
    const uint32_t bloom_size = image.gnu_hash[2], bloom_shift = image.gnu_hash[3];
    if (nbuckets == 0 || bloom_size == 0) return nullptr;
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(image.gnu_hash + 4);
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
      if ((h | 1) == (h2 | 1) && strcmp(name, SymbolName(image, image.symtab[i])) == 0) {
        return IfFunction(image.symtab[i]);
      }
      if ((h2 & 1) != 0) return nullptr;
    }
  }
  if (image.sysv_hash != nullptr) {
    uint32_t h = 0;
    for (const char* c = name; *c != '\0'; ++c) {
      h = (h << 4) + static_cast<unsigned char>(*c);
      const uint32_t g = h & 0xf0000000u;
      if (g != 0) h ^= g >> 24;
      h &= ~g;
    }
    const uint32_t nbucket = image.sysv_hash[0];
    if (nbucket == 0) return nullptr;
    const uint32_t* bucket = image.sysv_hash + 2;
    const uint32_t* chain = bucket + nbucket;
    for (uint32_t i = bucket[h % nbucket]; i != 0; i = chain[i]) {
      if (strcmp(name, SymbolName(image, image.symtab[i])) == 0) {
        return IfFunction(image.symtab[i]);
      }
    }
  }
  return nullptr;
}

bool WriteGotSlot(const ElfImage& image, void** slot, void* value) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(slot);
  const uintptr_t page = at & ~(PageSize() - 1);
  const bool protect = at >= image.relro_begin && at < image.relro_end;
  if (protect &&
      mprotect(reinterpret_cast<void*>(page), PageSize(), PROT_READ | PROT_WRITE) != 0) {
    return false;
  }
  __atomic_store_n(slot, value, __ATOMIC_RELEASE);
  if (protect) mprotect(reinterpret_cast<void*>(page), PageSize(), PROT_READ);
  return true;
}

}  // namespace nrtprof::shim
