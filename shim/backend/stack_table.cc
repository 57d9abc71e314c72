#include "shim/backend/stack_table.h"

#include <utility>

namespace nrtprof::shim {

StackTable::StackTable(StringTable* strings, SymbolizeFn symbolize)
    : strings_(strings), symbolize_(std::move(symbolize)) {}

uint32_t StackTable::Intern(const uintptr_t* frames, uint32_t n) {
  if (n == 0) return 0;
  std::vector<uintptr_t> key(frames, frames + n);
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  if (stacks_.size() >= kMaxStacks) return 0;
  std::vector<uint32_t> frame_iids;
  frame_iids.reserve(n);
  for (uint32_t i = 0; i < n; ++i) frame_iids.push_back(FrameIid(frames[i]));
  stacks_.push_back(std::move(frame_iids));
  const uint32_t iid = static_cast<uint32_t>(stacks_.size());
  ids_.emplace(std::move(key), iid);
  return iid;
}

const std::vector<uint32_t>& StackTable::FrameIids(uint32_t iid) const {
  static const std::vector<uint32_t>* const kNone = new std::vector<uint32_t>();
  if (iid == 0 || iid > stacks_.size()) return *kNone;
  return stacks_[iid - 1];
}

uint32_t StackTable::FrameIid(uintptr_t address) {
  if (auto it = frame_iids_.find(address); it != frame_iids_.end()) return it->second;
  const uint32_t iid = strings_->Intern(symbolize_(address));
  frame_iids_.emplace(address, iid);
  return iid;
}

}  // namespace nrtprof::shim
