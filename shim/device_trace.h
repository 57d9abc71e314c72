// Turns the runtime's system-trace documents (nrt_sys_trace_fetch_events, format in
// sim/README.md) into hardware-lane events: nc_exec_running → EVENT_DEVICE_EXEC, engine ops →
// EVENT_DEVICE_OP, dma_transfer → EVENT_DEVICE_DMA (device clock, submitting thread as tid),
// timestamp_sync_point → DeviceClockSync. The "cores" entries' events_overwritten, cumulative
// per capture, become a process-wide count of device events lost.
//
// Not thread-safe: the flusher thread owns it, with the StringTable (which must outlive it).
#ifndef NRTPROF_SHIM_DEVICE_TRACE_H_
#define NRTPROF_SHIM_DEVICE_TRACE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shim/proto_lite/nrtprof.pb.h"
#include "shim/string_table.h"

namespace nrtprof::shim {

struct DeviceTraceOutput {
  std::vector<nrtprof::Event> events;
  std::vector<nrtprof::DeviceClockSync> clock_syncs;
  uint64_t overwritten = 0;  // newly overwritten events in this document
  uint64_t skipped = 0;      // events of a type this shim does not know
};

class DeviceTraceParser {
 public:
  explicit DeviceTraceParser(StringTable* strings) : strings_(strings) {}
  DeviceTraceParser(const DeviceTraceParser&) = delete;
  DeviceTraceParser& operator=(const DeviceTraceParser&) = delete;

  // Parses one document fetched from capture `generation` (a capture's counters start from
  // zero; generations only grow). Appends to *out. False, with *error, if the document is not
  // a system trace; nothing is appended then.
  bool Parse(uint64_t generation, std::string_view json, DeviceTraceOutput* out,
             std::string* error);

  uint64_t overwritten_total() const { return overwritten_total_; }

 private:
  uint32_t InternOrZero(const std::string& s) { return s.empty() ? 0 : strings_->Intern(s); }

  StringTable* const strings_;
  uint64_t generation_ = 0;
  std::map<int64_t, uint64_t> overwritten_seen_;  // nc_idx -> events_overwritten so far
  uint64_t overwritten_total_ = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_DEVICE_TRACE_H_
