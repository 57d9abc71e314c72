// IdIndex: finds one of a ProcessTrace's events by its id (a RangeEvent by id, an ApiCall by
// correlation_id). The correlator numbers a process's ranges, then its calls, one after
// another, so an event's position is usually its id less the first one's: found by a
// subtraction, with no table at all. A list whose ids are not consecutive (the streams of a
// reconnected process merged) is indexed by a hash map instead.
//
// The index views the list, which must outlive it and not change. Not thread-safe to build;
// Find() may be called from several threads once built.
#ifndef NRTPROF_TRACE_ID_INDEX_H_
#define NRTPROF_TRACE_ID_INDEX_H_

#include <cstddef>
#include <cstdint>

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
    auto it = by_id_.find(id);
    return it != by_id_.end() ? it->second : nullptr;
  }

 private:
  const List& list_;
  bool consecutive_ = true;
  absl::flat_hash_map<uint64_t, const T*> by_id_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_ID_INDEX_H_
