#include "trace/process_capture.h"

namespace nrtprof::daemon {

DropCounts CombineDropCounts(const DropCounts& a, const DropCounts& b,
                             uint64_t (*fn)(uint64_t, uint64_t)) {
  DropCounts d;
  d.ring_full = fn(a.ring_full, b.ring_full);
  d.daemon_away = fn(a.daemon_away, b.daemon_away);
  d.spool_full = fn(a.spool_full, b.spool_full);
  d.device_overwritten = fn(a.device_overwritten, b.device_overwritten);
  d.oversized = fn(a.oversized, b.oversized);
  d.no_memory = fn(a.no_memory, b.no_memory);
  d.device_malformed = fn(a.device_malformed, b.device_malformed);
  d.process_died = fn(a.process_died, b.process_died);
  d.daemon_overflow = fn(a.daemon_overflow, b.daemon_overflow);
  d.no_clock_sync = fn(a.no_clock_sync, b.no_clock_sync);
  d.by_lane.framework = fn(a.by_lane.framework, b.by_lane.framework);
  d.by_lane.runtime = fn(a.by_lane.runtime, b.by_lane.runtime);
  d.by_lane.hardware = fn(a.by_lane.hardware, b.by_lane.hardware);
  return d;
}

}  // namespace nrtprof::daemon
