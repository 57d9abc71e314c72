#include "shim/backend/string_table.h"

#include "shim/backend/utf8.h"

namespace nrtprof::shim {

StringTable::StringTable(size_t max_strings) : max_strings_(max_strings < 1 ? 1 : max_strings) {}

uint32_t StringTable::Intern(std::string_view s) {
  std::string value = SanitizeUtf8(s);
  if (auto it = ids_.find(value); it != ids_.end()) return it->second;
  if (strings_.size() + 1 >= max_strings_) {
    if (overflow_iid_ == 0) {
      strings_.emplace_back(kOverflowString);
      overflow_iid_ = static_cast<uint32_t>(strings_.size());
      ids_.emplace(kOverflowString, overflow_iid_);
    }
    return overflow_iid_;
  }
  strings_.push_back(value);
  const uint32_t iid = static_cast<uint32_t>(strings_.size());
  ids_.emplace(std::move(value), iid);
  return iid;
}

const std::string& StringTable::Get(uint32_t iid) const {
  static const std::string* const kEmpty = new std::string();
  if (iid == 0 || iid > strings_.size()) return *kEmpty;
  return strings_[iid - 1];
}

}  // namespace nrtprof::shim
