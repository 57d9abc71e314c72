// The flusher's interned strings: each distinct string (function names, range names, tensor
// and model names, symbolized frames) gets an id, from 1, for the life of the process. Which
// ids a stream has already been sent is the batcher's business (batcher.h): the first batch of
// a stream that uses an id carries its string.
//
// Strings are stored as valid UTF-8 (utf8.h). Past kMaxStrings distinct strings, new ones all
// map to one overflow id whose string says so, so memory stays bounded whatever the program
// names. Not thread-safe: the flusher thread owns it.
#ifndef NRTPROF_SHIM_BACKEND_STRING_TABLE_H_
#define NRTPROF_SHIM_BACKEND_STRING_TABLE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nrtprof::shim {

class StringTable {
 public:
  static constexpr size_t kDefaultMaxStrings = 1 << 20;
  static constexpr char kOverflowString[] = "<nrtprof: too many distinct strings>";

  explicit StringTable(size_t max_strings = kDefaultMaxStrings);
  StringTable(const StringTable&) = delete;
  StringTable& operator=(const StringTable&) = delete;

  // The id of `s` (sanitized to UTF-8), adding it if new.
  uint32_t Intern(std::string_view s);
  // The string of `iid` (1..size()); "" for 0 or an unknown id.
  const std::string& Get(uint32_t iid) const;
  // Ids in use are 1..size().
  uint32_t size() const { return static_cast<uint32_t>(strings_.size()); }

 private:
  const size_t max_strings_;
  std::vector<std::string> strings_;  // iid - 1 -> string
  std::unordered_map<std::string, uint32_t> ids_;
  uint32_t overflow_iid_ = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_STRING_TABLE_H_
