// IdIndex: finds one of a ProcessTrace's events by its id (a RangeEvent by id, an ApiCall by
// correlation_id). The correlator numbers a process's ranges, then its calls, one after
// another, so an event's position is usually its id less the first one's: found by a
// subtraction, with no table at all. A list whose ids are not consecutive but near each other
// (cut to a window) is indexed by a table of positions by id, any other (the streams of a
// reconnected process merged) by a hash map.
//
// The index views the list, which must outlive it and not change. Not thread-safe to build;
// Find() may be called from several threads once built.
#ifndef NRTPROF_TRACE_ID_INDEX_H_
#define NRTPROF_TRACE_ID_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace nrtprof::daemon {

template <typename T, uint64_t T::*kId, typename List>
class IdIndex {
 public:
  explicit IdIndex(const List& list) : list_(list) {
    for (size_t i = 0; i < list.size() && consecutive_; ++i) {
      consecutive_ = list[i].*kId == list[0].*kId + i;
    }
    if (consecutive_) return;
    // Ids near each other (a list cut to a window: the always-on fold's) are found by a table
    // from id to position, one read each; others by a hash map.
    uint64_t low = UINT64_MAX, high = 0;
    for (const T& e : list) {
      low = std::min(low, e.*kId);
      high = std::max(high, e.*kId);
    }
    if (high - low < 4 * uint64_t{list.size()} + 1024 && list.size() < kNone) {
      low_ = low;
      position_.assign(high - low + 1, kNone);
      for (size_t i = 0; i < list.size(); ++i) {
        uint32_t& at = position_[list[i].*kId - low];
        if (at == kNone) at = static_cast<uint32_t>(i);  // an id given twice: the first
      }
      return;
    }
    by_id_.reserve(list.size());
    for (const T& e : list) by_id_.try_emplace(e.*kId, &e);  // an id given twice: the first
  }

  // The event with `id`, or null.
  const T* Find(uint64_t id) const {
    if (consecutive_) {
      if (list_.empty() || id < list_[0].*kId) return nullptr;
      const uint64_t k = id - list_[0].*kId;
      return k < list_.size() ? &list_[k] : nullptr;
    }
    if (!position_.empty()) {
      if (id < low_ || id - low_ >= position_.size()) return nullptr;
      const uint32_t at = position_[id - low_];
      return at == kNone ? nullptr : &list_[at];
    }
    auto it = by_id_.find(id);
    return it != by_id_.end() ? it->second : nullptr;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  const List& list_;
  bool consecutive_ = true;
  uint64_t low_ = 0;                 // position_[id - low_]: the position of id, or kNone
  std::vector<uint32_t> position_;
  absl::flat_hash_map<uint64_t, const T*> by_id_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_ID_INDEX_H_
