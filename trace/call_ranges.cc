#include "trace/call_ranges.h"

#include <cstdint>
#include <unordered_map>

namespace nrtprof::daemon {
namespace {

uint64_t End(uint64_t start, uint64_t duration) { return start + duration; }

}  // namespace

void AssignCallRanges(const CaptureVector<RangeEvent>& ranges, CaptureVector<ApiCall>* calls) {
  std::unordered_map<uint32_t, std::vector<size_t>> ranges_of;  // in (start, outer-first) order
  for (size_t i = 0; i < ranges.size(); ++i) ranges_of[ranges[i].tid].push_back(i);
  std::unordered_map<uint32_t, std::vector<size_t>> calls_of;  // by start
  for (size_t i = 0; i < calls->size(); ++i) {
    (*calls)[i].range = 0;
    calls_of[(*calls)[i].tid].push_back(i);
  }
  auto range_end = [&](size_t i) { return End(ranges[i].start_ns, ranges[i].duration_ns); };
  for (auto& [tid, on_thread] : calls_of) {
    auto it = ranges_of.find(tid);
    if (it == ranges_of.end()) continue;
    const std::vector<size_t>& thread_ranges = it->second;
    std::vector<size_t> open;
    size_t next = 0;
    for (size_t ci : on_thread) {
      ApiCall& c = (*calls)[ci];
      const uint64_t c_end = End(c.start_ns, c.duration_ns);
      for (; next < thread_ranges.size() && ranges[thread_ranges[next]].start_ns <= c.start_ns;
           ++next) {
        const RangeEvent& r = ranges[thread_ranges[next]];
        while (!open.empty() && range_end(open.back()) < End(r.start_ns, r.duration_ns)) {
          open.pop_back();
        }
        open.push_back(thread_ranges[next]);
      }
      while (!open.empty() && range_end(open.back()) < c.start_ns) open.pop_back();
      for (auto r = open.rbegin(); r != open.rend(); ++r) {
        if (range_end(*r) >= c_end) {
          c.range = ranges[*r].id;
          break;
        }
      }
    }
  }
}

}  // namespace nrtprof::daemon
