// The flusher's interned call stacks: each distinct list of return addresses gets an id (from
// 1) whose frames are interned strings "function (module+0xoffset)", each address symbolized
// once. Bounded: past kMaxStacks distinct stacks, new ones get id 0 (no stack).
//
// Not thread-safe: the flusher thread owns it, with the StringTable it interns into (which
// must outlive it).
#ifndef NRTPROF_SHIM_BACKEND_STACK_TABLE_H_
#define NRTPROF_SHIM_BACKEND_STACK_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "shim/backend/string_table.h"

namespace nrtprof::shim {

class StackTable {
 public:
  static constexpr size_t kMaxStacks = 1 << 18;
  using SymbolizeFn = std::function<std::string(uintptr_t return_address)>;

  StackTable(StringTable* strings, SymbolizeFn symbolize);
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;

  // The id of the stack `frames[0..n)` (innermost first); 0 if n == 0 or the table is full.
  uint32_t Intern(const uintptr_t* frames, uint32_t n);
  // The frame string ids of stack `iid` (1..size()).
  const std::vector<uint32_t>& FrameIids(uint32_t iid) const;
  uint32_t size() const { return static_cast<uint32_t>(stacks_.size()); }

 private:
  uint32_t FrameIid(uintptr_t address);

  StringTable* const strings_;
  const SymbolizeFn symbolize_;
  std::map<std::vector<uintptr_t>, uint32_t> ids_;
  std::vector<std::vector<uint32_t>> stacks_;  // iid - 1 -> frame string ids
  std::unordered_map<uintptr_t, uint32_t> frame_iids_;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_STACK_TABLE_H_
