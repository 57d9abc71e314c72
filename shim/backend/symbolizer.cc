#include "shim/backend/symbolizer.h"

#include <cxxabi.h>
#include <dlfcn.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nrtprof::shim {
namespace {

// The ELF symbol table's name for `pc`, through libunwind (which maps the module's file).
bool SymtabName(uintptr_t pc, std::string* name) {
  unw_accessors_t* accessors = unw_get_accessors(unw_local_addr_space);
  if (accessors == nullptr || accessors->get_proc_name == nullptr) return false;
  char buf[1024];
  unw_word_t offset = 0;
  if (accessors->get_proc_name(unw_local_addr_space, static_cast<unw_word_t>(pc), buf,
                               sizeof(buf), &offset, nullptr) != 0) {
    return false;
  }
  buf[sizeof(buf) - 1] = '\0';
  if (buf[0] == '\0') return false;
  *name = buf;
  return true;
}

}  // namespace

std::string Demangle(const char* name) {
  if (name == nullptr) return "";
  if (name[0] == '_' && name[1] == 'Z') {
    int status = 0;
    char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (status == 0 && demangled != nullptr) {
      std::string out(demangled);
      free(demangled);
      return out;
    }
    free(demangled);
  }
  return name;
}

std::string SymbolizeReturnAddress(uintptr_t return_address) {
  // The call instruction ends just before the return address.
  const uintptr_t pc = return_address > 0 ? return_address - 1 : 0;
  Dl_info info;
  memset(&info, 0, sizeof(info));
  const bool found = dladdr(reinterpret_cast<void*>(pc), &info) != 0;
  std::string function;
  if (found && info.dli_sname != nullptr && info.dli_sname[0] != '\0') {
    function = Demangle(info.dli_sname);
  } else if (std::string raw; SymtabName(pc, &raw)) {
    function = Demangle(raw.c_str());
  } else {
    function = "??";
  }
  char where[64];
  if (found && info.dli_fname != nullptr) {
    const char* slash = strrchr(info.dli_fname, '/');
    const char* module = slash != nullptr ? slash + 1 : info.dli_fname;
    snprintf(where, sizeof(where), "+0x%llx)",
             static_cast<unsigned long long>(pc - reinterpret_cast<uintptr_t>(info.dli_fbase)));
    return function + " (" + (module[0] != '\0' ? module : "?") + where;
  }
  snprintf(where, sizeof(where), " (?+0x%llx)", static_cast<unsigned long long>(pc));
  return function + where;
}

}  // namespace nrtprof::shim
