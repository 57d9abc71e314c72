// ElfImage reads loaded objects in place: what it finds must be what the dynamic loader
// finds, and a GOT slot it rewrites (RELRO included) must be the one the program's calls go
// through.
#include "shim/preload/elf_image.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

struct Found {
  std::string path_part;  // the object to read: the first whose name holds this, "" = program
  ElfImage image;
  bool found = false;
};

int FindObject(struct dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<Found*>(data);
  const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const bool match =
      f->path_part.empty() ? name.empty() : name.find(f->path_part) != std::string::npos;
  if (!match) return 0;
  f->found = ReadElfImage(info, &f->image);
  return 1;
}

ElfImage Object(const std::string& path_part) {
  Found f;
  f.path_part = path_part;
  dl_iterate_phdr(&FindObject, &f);
  EXPECT_TRUE(f.found) << path_part;
  return f.image;
}

TEST(ElfImageTest, FindsWhatTheLoaderFinds) {
  const ElfImage libc = Object("libc.so");
  void* handle = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  for (const char* name : {"malloc", "getpid", "fopen"}) {
    const ElfW(Sym)* sym = FindDefinedFunction(libc, name);
    ASSERT_NE(sym, nullptr) << name;
    EXPECT_EQ(reinterpret_cast<void*>(libc.base + sym->st_value), dlsym(handle, name)) << name;
  }
  dlclose(handle);
  // An IFUNC's symbol is its resolver, not the function: not taken for one.
  EXPECT_EQ(FindDefinedFunction(libc, "strlen"), nullptr);
  EXPECT_EQ(FindDefinedFunction(libc, "nrtprof_no_such_function"), nullptr);
  // The program imports getpid; it does not define it.
  EXPECT_EQ(FindDefinedFunction(Object(""), "getpid"), nullptr);
}

pid_t FakeGetpid() { return -42; }

// Through the program's own PLT/GOT, as any caller of getpid in it.
__attribute__((noinline)) pid_t CallGetpid() { return getpid(); }

TEST(ElfImageTest, RewritesTheSlotTheProgramCallsThrough) {
  const pid_t real = CallGetpid();
  ASSERT_GT(real, 0);
  const ElfImage program = Object("");
  void** slot = nullptr;
  ForEachImportSlot(program, [&](const ImportSlot& s) {
    if (strcmp(s.name, "getpid") == 0 && s.kind != ImportSlot::kData) slot = s.slot;
  });
  ASSERT_NE(slot, nullptr) << "the test program imports getpid through a slot";
  void* const original = *slot;
  // Bound at load (the build links with -z now): the slot is in RELRO, read-only until the
  // rewrite makes its page writable for the store.
  EXPECT_TRUE(reinterpret_cast<uintptr_t>(slot) >= program.relro_begin &&
              reinterpret_cast<uintptr_t>(slot) < program.relro_end);
  ASSERT_TRUE(WriteGotSlot(program, slot, reinterpret_cast<void*>(&FakeGetpid)));
  EXPECT_EQ(CallGetpid(), -42);
  ASSERT_TRUE(WriteGotSlot(program, slot, original));
  EXPECT_EQ(CallGetpid(), real);
}

}  // namespace
}  // namespace nrtprof::shim
