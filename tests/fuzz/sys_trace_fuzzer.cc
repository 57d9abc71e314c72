// libFuzzer target: the shim's reader of the runtime's system-trace documents
// (shim/backend/device_trace.h over shim/backend/sys_trace_reader.h). Any bytes must be refused whole with a
// one-line reason and counted, or read into hardware-lane events that make sense: known kinds
// and names, executions on the device clock, transfers on the host's. The input is read three
// times, as consecutive fetches of one capture and then of the next (open spans carried over).
// A crash, a sanitizer report, or an output breaking those rules is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shim/backend/device_trace.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "sys_trace_fuzzer: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  nrtprof::shim::StringTable strings;
  nrtprof::shim::DeviceTraceParser parser(&strings);
  parser.set_realtime_offset_for_testing(1700000000000000000);
  for (uint64_t generation : {1, 1, 2}) {
    nrtprof::shim::DeviceTraceOutput out;
    std::string error;
    if (!parser.Parse(generation, json, &out, &error)) {
      Check(!error.empty() && error.find('\n') == std::string::npos, "refused without one line");
      Check(out.events.empty() && out.clock_syncs.empty(), "a refused document left events");
      Check(out.malformed >= 1, "a refused document counted nothing");
      continue;
    }
    for (const nrtprof::DeviceClockSync& s : out.clock_syncs) {
      Check(s.nc_idx() >= 0 && s.nc_idx() < 4096, "a clock sync out of the wire's range");
    }
    for (const nrtprof::Event& e : out.events) {
      const std::string& name = strings.Get(e.name_iid());
      if (e.kind() == nrtprof::EVENT_DEVICE_EXEC) {
        // An execution, or a collective's barrier or running (sent as executions).
        Check((name == "nc_exec_running" || name == "cc_exec_barrier" || name == "cc_running") &&
                  !e.host_clock(),
              "a bad execution");
        Check(name != "nc_exec_running" || e.worker_gid() == 0, "an execution with a rank");
      } else if (e.kind() == nrtprof::EVENT_DEVICE_DMA) {
        Check((name == "dma_h2d" || name == "dma_d2h" || name == "dma_model_load") &&
                  e.host_clock(),
              "a bad transfer");
      } else {
        Check(false, "an event of another kind");
      }
      Check(e.nc_idx() >= 0 && e.nc_idx() < 4096, "a core out of the wire's range");
      // What the daemon would refuse the whole batch for.
      Check(e.duration_ns() <= 7ull * 24 * 3600 * 1000000000, "a span over a week");
      Check(e.start_ns() <= UINT64_MAX - e.duration_ns(), "a span past the clock's end");
    }
  }
  return 0;
}
