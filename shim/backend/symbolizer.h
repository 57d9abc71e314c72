// Names a return address the way stacks show in a trace: "function (module+0xoffset)", the
// function demangled, the module by its file name, the offset that of the call instruction
// from the module's load address (what addr2line wants).
//
// The function comes from the dynamic symbol table (dladdr) or, for functions that are not
// exported, from the module's ELF symbol table (libunwind reads it); "??" if neither has one.
// Runs on the flusher thread, never on the program's: it allocates, opens files, takes the
// loader's lock. Thread-compatible.
#ifndef NRTPROF_SHIM_BACKEND_SYMBOLIZER_H_
#define NRTPROF_SHIM_BACKEND_SYMBOLIZER_H_

#include <cstdint>
#include <string>

namespace nrtprof::shim {

std::string SymbolizeReturnAddress(uintptr_t return_address);

// abi::__cxa_demangle, or `name` itself if it is not a mangled C++ name.
std::string Demangle(const char* name);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_SYMBOLIZER_H_
