#include "shim/backend/tick_wait.h"

#include <algorithm>

namespace nrtprof::shim {

void TickWait::NoteRingFill(double fill) { fill_ = std::max(fill_, fill); }

void TickWait::NoteSystemTraceDocument(uint64_t most_numbered_on_a_core, bool own_capture) {
  if (!own_capture || own_events_per_core_ == 0) return;
  NoteRingFill(static_cast<double>(most_numbered_on_a_core) /
               static_cast<double>(own_events_per_core_));
}

uint64_t TickWait::Next(uint64_t now_ns) {
  const double fill = fill_;
  fill_ = 0;
  const uint64_t elapsed_ns = last_tick_ns_ != 0 ? now_ns - last_tick_ns_ : 0;
  last_tick_ns_ = now_ns;
  if (elapsed_ns == 0) return kTickNs;
  if (fill == 0) return kLongTickNs;
  // The fill grows with the time waited: a wait of elapsed_ns / (headroom * fill) fills a
  // 1/headroom of the fullest ring at this rate.
  const double wait_ns = static_cast<double>(elapsed_ns) / (kHeadroom * fill);
  return wait_ns >= kLongTickNs ? kLongTickNs
                                : std::max(kTickNs, static_cast<uint64_t>(wait_ns));
}

}  // namespace nrtprof::shim
